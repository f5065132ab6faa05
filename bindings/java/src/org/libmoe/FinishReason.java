package org.libmoe;

/** Why generation stopped ({@code moe_finish_reason}). */
public enum FinishReason {
  NONE,
  END_OF_GENERATION,
  MAX_TOKENS,
  STOP_STRING,
  CALLBACK,
  CONTEXT_FULL,
  /** An {@link Engine} request: cancelled, or the engine was closed. */
  CANCELLED,
  /** An {@link Engine} request: its step failed ({@link RequestResult#status()} says why). */
  ERROR;

  static FinishReason fromCode(int code) {
    FinishReason[] all = values();
    return code >= 0 && code < all.length ? all[code] : NONE;
  }
}
