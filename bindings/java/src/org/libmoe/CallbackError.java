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

  // Throws what was kept, if anything, which is then forgotten.
  void rethrow() {
    Throwable t = thrown;
    thrown = null;
    if (t instanceof RuntimeException r) throw r;
    if (t instanceof Error e) throw e;
    if (t != null) throw new RuntimeException(t);
  }
}
