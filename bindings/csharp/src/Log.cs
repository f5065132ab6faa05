namespace LibMoe {
  /// <summary>Severity of a library log message (<c>moe_log_level</c>), lowest first.</summary>
  public enum LogLevel {
    /// <summary>Detail for debugging.</summary>
    Debug = 0,
    /// <summary>What the library is doing (e.g. a model was loaded).</summary>
    Info = 1,
    /// <summary>Something unexpected that did not fail the call.</summary>
    Warn = 2,
    /// <summary>A failure.</summary>
    Error = 3,
  }

  /// <summary>Receives a library log message (one line, no trailing newline). It runs on the
  /// thread whose library call logged, while the library holds its log lock: keep it short, do
  /// not wait for other threads that may be calling into libmoe, and do not call
  /// <see cref="MoeLog.SetHandler"/> from it (that throws). Exceptions thrown here are dropped.
  /// </summary>
  public delegate void LogHandler(LogLevel level, string message);

  /// <summary>The library's process-wide log hook. The library is silent until a handler is set:
  /// <code>MoeLog.SetHandler((level, msg) => Console.Error.WriteLine(level + ": " + msg));</code>
  /// </summary>
  public static class MoeLog {
    private static readonly object gate = new object();
    // The installed bridge, and through it the delegate: the native side calls into them, so this
    // strong reference keeps the GC from collecting them while they are installed.
    private static LogBridge current;

    /// <summary>Sends messages at <paramref name="minLevel"/> or above to
    /// <paramref name="handler"/>, replacing any previous handler; null removes it. Safe while
    /// other threads use the library: when this returns, no thread is still inside the previous
    /// handler.</summary>
    /// <exception cref="MoeException">Status.InvalidArgument when called from inside a handler.
    /// </exception>
    public static void SetHandler(LogHandler handler, LogLevel minLevel = LogLevel.Info) {
      // Checked before taking the lock: a handler waiting for it while its holder waits for the
      // library's log lock (held around this handler) would deadlock.
      if (moe.InLogCallback()) {
        throw new MoeException(Status.InvalidArgument, "the log handler cannot be changed from inside it");
      }
      lock (gate) {
        LogBridge next = handler == null ? null : new LogBridge(handler);
        try {
          moe.SetLogSink(next, (int)minLevel);
        } catch {
          if (next != null) next.Dispose();
          throw;
        }
        // The C library calls handlers under its log lock, so the old one is no longer in use.
        if (current != null) current.Dispose();
        current = next;
      }
    }

    /// <summary>Removes the handler: the library is silent again.</summary>
    public static void RemoveHandler() { SetHandler(null); }

    private sealed class LogBridge : LogSink {
      private readonly LogHandler handler;

      public LogBridge(LogHandler handler) {
        this.handler = handler;
      }

      public override void OnLog(int level, string message) {
        try {
          handler((LogLevel)level, message);
        } catch (System.Exception) {
          // A log line has no caller to report to, and nothing may cross into C.
        }
      }
    }
  }
}
