package org.libmoe;

/** Receives the library's log messages; see {@link MoeLog#setHandler}. */
@FunctionalInterface
public interface LogHandler {
  /**
   * Called on the thread whose library call logged the message, while the library holds its log
   * lock: keep it short, do not block on other threads that may be calling into libmoe, and do
   * not call {@link MoeLog#setHandler} from here (that throws). Exceptions thrown here are
   * dropped.
   *
   * @param message one line, without a trailing newline
   */
  void onLog(LogLevel level, String message);
}
