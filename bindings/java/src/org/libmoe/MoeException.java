package org.libmoe;

import java.nio.charset.StandardCharsets;

/**
 * A failed libmoe call: the {@link Status} and the library's detailed message. Unchecked, so it
 * passes through lambdas; catch it where you can act on it (for example {@link Status#NOT_FOUND}
 * when loading a model).
 */
public class MoeException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final Status status;

  public MoeException(Status status, String message) {
    super(message.isEmpty() ? status.name() : message);
    this.status = status;
  }

  // Thrown from the JNI layer, which hands over the message as UTF-8 bytes.
  MoeException(int code, byte[] utf8Message) {
    this(Status.fromCode(code), new String(utf8Message, StandardCharsets.UTF_8));
  }

  public Status status() {
    return status;
  }
}
