package org.libmoe;

/** Severity of a library log message ({@code moe_log_level}), lowest first. */
public enum LogLevel {
  DEBUG,
  INFO,
  WARN,
  ERROR;

  static LogLevel fromCode(int code) {
    LogLevel[] all = values();
    return all[Math.max(0, Math.min(code, all.length - 1))];
  }
}
