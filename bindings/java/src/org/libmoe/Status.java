package org.libmoe;

/** The status codes of the C library ({@code moe_status}); the numbers never change. */
public enum Status {
  OK(0),
  INVALID_ARGUMENT(1),
  NOT_FOUND(2),
  IO(3),
  CORRUPT_MODEL(4),
  UNSUPPORTED(5),
  OUT_OF_RANGE(6),
  CONTEXT_FULL(7),
  CANCELLED(8),
  OUT_OF_MEMORY(9),
  BUFFER_TOO_SMALL(10),
  BUSY(11),
  INTERNAL(12),
  /** An engine request has not finished yet. */
  NOT_READY(13),
  /** A wait ran out before the request finished. */
  TIMEOUT(14);

  private final int code;

  Status(int code) {
    this.code = code;
  }

  /** The C value. */
  public int code() {
    return code;
  }

  /** The status for a C value; unknown values (from a newer library) map to INTERNAL. */
  public static Status fromCode(int code) {
    for (Status s : values()) if (s.code == code) return s;
    return INTERNAL;
  }
}
