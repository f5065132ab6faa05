package org.libmoe;

/**
 * Turns tokens that arrive one at a time into text, holding back the bytes of a character split
 * across tokens until it is complete (so every piece returned is whole UTF-8). Get one from {@link
 * Model#newDetokenizer()}; one thread at a time; close it when done.
 */
public final class Detokenizer implements AutoCloseable {
  private volatile NativeDetokenizer nativeDetokenizer;

  Detokenizer(Model model) {
    nativeDetokenizer = new NativeDetokenizer(model.get());
  }

  /**
   * The text that {@code token} completes, possibly "" (an incomplete character).
   *
   * @throws MoeException {@link Status#OUT_OF_RANGE} for an id outside the vocabulary
   */
  public String push(int token) {
    NativeDetokenizer d = nativeDetokenizer;
    if (d == null) throw new MoeException(Status.INVALID_ARGUMENT, "the detokenizer is closed");
    return Utf8.decode(d.Push(token));
  }

  /** Releases it. Idempotent; using it afterwards throws {@link MoeException}. */
  @Override
  public synchronized void close() {
    NativeDetokenizer d = nativeDetokenizer;
    nativeDetokenizer = null;
    if (d != null) d.delete();
  }
}
