package org.libmoe;

/**
 * What a Java callback threw while native code was calling it: kept, since no exception may cross
 * into C, and rethrown by the caller once the native call has returned.
 */
final class CallbackError {
  private Throwable thrown;

  void capture(Throwable t) {
    if (thrown == null) thrown = t;
  }

  boolean caught() {
    return thrown != null;
  }

  void rethrow() {
    if (thrown instanceof RuntimeException r) throw r;
    if (thrown instanceof Error e) throw e;
    if (thrown != null) throw new RuntimeException(thrown);
  }
}
