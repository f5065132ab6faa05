package org.libmoe;

/** Element type of a context's KV cache ({@code moe_kv_type}). */
public enum KvType {
  /** 32-bit floats (the default). */
  F32(0),
  /** 16-bit floats: half the memory, a little rounding. */
  F16(1),
  /** 8-bit blocks with a scale per 32 values (Q8_0): a quarter of F32's memory; the model's head
   * size must be a multiple of 32. */
  Q8_0(2);

  final int code;

  KvType(int code) {
    this.code = code;
  }
}
