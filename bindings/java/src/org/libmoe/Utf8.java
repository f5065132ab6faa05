package org.libmoe;

import java.nio.charset.StandardCharsets;

// Every string crosses into C as UTF-8 bytes (see moe_java.i).
final class Utf8 {
  private Utf8() {}

  /** {@code what} names the argument in the NullPointerException for a null {@code s}. */
  static byte[] encode(String s, String what) {
    if (s == null) throw new NullPointerException(what + " is null");
    return s.getBytes(StandardCharsets.UTF_8);
  }

  static String decode(byte[] b) {
    return new String(b, StandardCharsets.UTF_8);
  }
}
