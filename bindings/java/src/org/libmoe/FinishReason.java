package org.libmoe;

/** Why generation stopped ({@code moe_finish_reason}). */
public enum FinishReason {
  NONE,
  END_OF_GENERATION,
  MAX_TOKENS,
  STOP_STRING,
  CALLBACK,
  CONTEXT_FULL;

  static FinishReason fromCode(int code) {
    FinishReason[] all = values();
    return code >= 0 && code < all.length ? all[code] : NONE;
  }
}
