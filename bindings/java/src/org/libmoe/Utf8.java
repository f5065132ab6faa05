package org.libmoe;

import java.nio.charset.StandardCharsets;

// Every string crosses into C as UTF-8 bytes (see moe_java.i).
final class Utf8 {
  private Utf8() {}

  static byte[] encode(String s) {
    if (s == null) throw new NullPointerException("string");
    return s.getBytes(StandardCharsets.UTF_8);
  }

  static String decode(byte[] b) {
    return new String(b, StandardCharsets.UTF_8);
  }
}
