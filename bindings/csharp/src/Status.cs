namespace LibMoe {
  /// <summary>The status codes of the C library (<c>moe_status</c>); the numbers never change.</summary>
  public enum Status {
    Ok = 0,
    InvalidArgument = 1,
    NotFound = 2,
    IO = 3,
    CorruptModel = 4,
    Unsupported = 5,
    OutOfRange = 6,
    ContextFull = 7,
    Cancelled = 8,
    OutOfMemory = 9,
    BufferTooSmall = 10,
    Busy = 11,
    Internal = 12,
    /// <summary>An engine request has not finished yet.</summary>
    NotReady = 13,
    /// <summary>A wait ran out before the request finished.</summary>
    Timeout = 14,
  }

  /// <summary>Why generation stopped (<c>moe_finish_reason</c>).</summary>
  public enum FinishReason {
    None = 0,
    EndOfGeneration = 1,
    MaxTokens = 2,
    StopString = 3,
    Callback = 4,
    ContextFull = 5,
    /// <summary>An <see cref="Engine"/> request: cancelled, or the engine was disposed.</summary>
    Cancelled = 6,
    /// <summary>An <see cref="Engine"/> request: its step failed
    /// (<see cref="RequestResult.Status"/> says why).</summary>
    Error = 7,
  }

  /// <summary>A failed libmoe call: the status and the library's detailed message.</summary>
  public class MoeException : System.Exception {
    public MoeException(Status status, string message)
        : base(string.IsNullOrEmpty(message) ? status.ToString() : message) {
      Status = status;
    }

    public Status Status { get; private set; }
  }

  /// <summary>Receives generated text: <paramref name="piece"/> is the complete UTF-8 text
  /// <paramref name="token"/> adds (possibly empty; token is -1 for a final flush). Return false
  /// to stop. An exception thrown here stops generation and is rethrown by Generate.</summary>
  public delegate bool TokenHandler(int token, string piece);

  /// <summary>The routing trace (<see cref="Context.SetRoutingHandler"/>): a processed token's
  /// experts in one MoE layer, best first (the model's top-k; -1 where it ran fewer, under a
  /// routing policy or with experts switched off), and their weights (0 for a -1).</summary>
  public delegate void RoutingHandler(int position, int layer, int[] experts, float[] weights);

  /// <summary>Receives load progress in [0, 1]. Return false to cancel the load (it then fails
  /// with <see cref="Status.Cancelled"/>); an exception thrown here is rethrown by Load.</summary>
  public delegate bool ProgressHandler(float progress);
}
