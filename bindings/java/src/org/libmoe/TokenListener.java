package org.libmoe;

/** Receives generated text as it is produced. */
@FunctionalInterface
public interface TokenListener {
  /**
   * Called for each generated token with the text it completes.
   *
   * @param token the token id, or -1 for a final call that only flushes held-back text
   * @param piece complete UTF-8 text (possibly empty while a character or stop string is pending)
   * @return true to go on, false to stop generating. An exception thrown here also stops
   *     generation and is rethrown by the generate call.
   */
  boolean onToken(int token, String piece);
}
