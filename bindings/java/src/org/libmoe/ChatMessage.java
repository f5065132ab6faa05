package org.libmoe;

/**
 * One message of a conversation for {@link Model#applyChatTemplate}.
 *
 * @param role "system", "user" or "assistant"
 * @param content the message text
 */
public record ChatMessage(String role, String content) {
  /** Checks that both parts are given. */
  public ChatMessage {
    if (role == null) throw new NullPointerException("role");
    if (content == null) throw new NullPointerException("content");
  }

  /** A "system" message. */
  public static ChatMessage system(String content) {
    return new ChatMessage("system", content);
  }

  /** A "user" message. */
  public static ChatMessage user(String content) {
    return new ChatMessage("user", content);
  }

  /** An "assistant" message. */
  public static ChatMessage assistant(String content) {
    return new ChatMessage("assistant", content);
  }
}
