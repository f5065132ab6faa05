package org.libmoe;

/**
 * What a load does when the weights copied into memory would not fit in the memory the model may
 * take ({@code moe_memory_fit}).
 */
public enum MemoryFit {
  /** The routed experts stay in the file behind an expert cache sized to fit (the default). */
  CACHE_EXPERTS(0),
  /** The load fails with {@link Status#OUT_OF_MEMORY}, naming the bytes needed. */
  ERROR(1);

  final int code;

  MemoryFit(int code) {
    this.code = code;
  }
}
