package org.libmoe;

/**
 * Turns tokens that arrive one at a time into text, holding back the bytes of a character split
 * across tokens until it is complete (so every piece returned is whole UTF-8). Get one from {@link
 * Model#newDetokenizer()}; one thread at a time; close it when done.
 */
public final class Detokenizer implements AutoCloseable {
  private final NativeDetokenizer nativeDetokenizer;  // never deleted by close (see Context)
  private volatile boolean closed;

  Detokenizer(Model model) {
    nativeDetokenizer = new NativeDetokenizer(model.get());
  }

  /**
   * The text that {@code token} completes, possibly "" (an incomplete character).
   *
   * @throws MoeException {@link Status#OUT_OF_RANGE} for an id outside the vocabulary
   */
  public String push(int token) {
    if (closed) throw new IllegalStateException("the detokenizer is closed");
    return Utf8.decode(nativeDetokenizer.Push(token));
  }

  /** Releases it. Idempotent; using it afterwards throws {@link IllegalStateException}. */
  @Override
  public void close() {
    closed = true;
    nativeDetokenizer.Close();
  }
}
