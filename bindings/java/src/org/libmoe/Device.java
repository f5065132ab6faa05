package org.libmoe;

/**
 * Where a model runs ({@code moe_device}). The CUDA path has been compiled but not yet run on a
 * GPU: see the README.
 */
public enum Device {
  /** The CPU (the default). */
  CPU(0),
  /** A CUDA GPU; the load fails with {@link Status#UNSUPPORTED} and the reason when none can be used. */
  CUDA(1),
  /** A CUDA GPU when one can be used, the CPU otherwise ({@link Model#device()} says which). */
  AUTO(2);

  final int code;

  Device(int code) {
    this.code = code;
  }
}
