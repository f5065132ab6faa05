package org.libmoe;

/** Element type of a context's KV cache ({@code moe_kv_type}). */
public enum KvType {
  /** 32-bit floats (the default). */
  F32(0),
  /** 16-bit floats: half the memory, a little rounding. */
  F16(1);

  final int code;

  KvType(int code) {
    this.code = code;
  }
}
