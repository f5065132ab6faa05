package org.libmoe;

/** What an {@link Engine} does when its KV cache cannot grow ({@code moe_kv_full_policy}). */
public enum KvFullPolicy {
  /** Free the youngest running request's blocks; it is computed again later, output unchanged. */
  PREEMPT(0),
  /** The request that needs room finishes with {@link FinishReason#CONTEXT_FULL}. */
  FINISH(1);

  final int code;

  KvFullPolicy(int code) {
    this.code = code;
  }
}
