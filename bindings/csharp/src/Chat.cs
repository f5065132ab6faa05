using System;

namespace LibMoe {
  /// <summary>One message of a conversation for <see cref="Model.ApplyChatTemplate"/>.</summary>
  public sealed class ChatMessage {
    /// <summary>A message from <paramref name="role"/> ("system", "user" or "assistant").</summary>
    public ChatMessage(string role, string content) {
      if (role == null) throw new ArgumentNullException("role");
      if (content == null) throw new ArgumentNullException("content");
      Role = role;
      Content = content;
    }

    /// <summary>"system", "user" or "assistant".</summary>
    public string Role { get; private set; }
    /// <summary>The message text.</summary>
    public string Content { get; private set; }

    /// <summary>A "system" message.</summary>
    public static ChatMessage System(string content) { return new ChatMessage("system", content); }
    /// <summary>A "user" message.</summary>
    public static ChatMessage User(string content) { return new ChatMessage("user", content); }
    /// <summary>An "assistant" message.</summary>
    public static ChatMessage Assistant(string content) { return new ChatMessage("assistant", content); }
  }

  /// <summary>Turns tokens that arrive one at a time into text, holding back the bytes of a
  /// character split across tokens until it is complete, so every piece is whole UTF-8. Get one
  /// from <see cref="Model.CreateDetokenizer"/>; one thread at a time; dispose it when done.
  /// </summary>
  public sealed class Detokenizer : IDisposable {
    private readonly NativeDetokenizer native;  // never disposed by Dispose (see Model)
    private volatile bool disposed;

    internal Detokenizer(Model model) {
      native = new NativeDetokenizer(model.Native);
    }

    /// <summary>The text <paramref name="token"/> completes, possibly "" (an incomplete
    /// character).</summary>
    /// <exception cref="MoeException">Status.OutOfRange for an id outside the vocabulary.
    /// </exception>
    public string Push(int token) {
      if (disposed) throw new ObjectDisposedException("Detokenizer", "the detokenizer is disposed");
      return native.Push(token);
    }

    /// <summary>Releases it. Idempotent; using it afterwards throws
    /// <see cref="ObjectDisposedException"/>.</summary>
    public void Dispose() {
      disposed = true;
      native.Close();
    }
  }
}
