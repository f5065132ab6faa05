package org.libmoe;

/**
 * The library's process-wide log hook. The library is silent until a handler is installed:
 *
 * <pre>{@code MoeLog.setHandler(LogLevel.INFO, (level, msg) -> System.err.println(level + ": " + msg));}</pre>
 */
public final class MoeLog {
  // The installed bridge; its native half is what the C library calls, so it stays referenced
  // here (and undeleted) for as long as it is installed.
  private static LogBridge current;

  private MoeLog() {}

  /**
   * Sends messages at {@code minLevel} or above to {@code handler}, replacing any previous
   * handler; {@code handler} null removes it. Safe while other threads use the library: when
   * this returns, no thread is still inside the previous handler.
   *
   * @throws MoeException with {@link Status#INVALID_ARGUMENT} when called from inside a handler
   */
  public static void setHandler(LogLevel minLevel, LogHandler handler) {
    if (handler != null && minLevel == null) throw new NullPointerException("minLevel");
    // Checked before taking the lock: a handler waiting for it while its holder waits for the
    // library's log lock (held around this handler) would deadlock.
    if (moe.InLogCallback()) {
      throw new MoeException(Status.INVALID_ARGUMENT, "the log handler cannot be changed from inside it");
    }
    synchronized (MoeLog.class) {
      LogBridge next = handler == null ? null : new LogBridge(handler);
      try {
        moe.SetLogSink(next, handler == null ? 0 : minLevel.ordinal());
      } catch (RuntimeException e) {
        if (next != null) next.delete();
        throw e;
      }
      // The C library calls handlers under its log lock, so the old one is no longer in use.
      if (current != null) current.delete();
      current = next;
    }
  }

  /** Removes the handler: the library is silent again. */
  public static void removeHandler() {
    setHandler(null, null);
  }

  private static final class LogBridge extends LogSink {
    private final LogHandler handler;

    LogBridge(LogHandler handler) {
      this.handler = handler;
    }

    @Override
    public void OnLog(int level, byte[] message) {
      try {
        handler.onLog(LogLevel.fromCode(level), Utf8.decode(message));
      } catch (Throwable ignored) {
        // A log line has no caller to report to, and nothing may cross into C.
      }
    }
  }
}
