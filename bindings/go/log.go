package moe

import (
	"sync"

	"github.com/libmoe/moe/internal/raw"
)

// LogLevel is the severity of a library log message (moe_log_level), lowest first.
type LogLevel int

const (
	LogDebug LogLevel = iota
	LogInfo
	LogWarn
	LogError
)

func (l LogLevel) String() string {
	switch l {
	case LogDebug:
		return "debug"
	case LogInfo:
		return "info"
	case LogWarn:
		return "warn"
	}
	return "error"
}

var (
	logMu sync.Mutex
	// The installed sink: the C library calls it, so it stays referenced (and undeleted) here
	// for as long as it is installed.
	logSink raw.LogSink
)

// SetLogHandler sends the library's log messages at minLevel or above to handler (one line,
// no trailing newline), replacing any previous handler; nil removes it and the library is silent
// again, as it is by default. It is safe while other goroutines use the library: when it returns,
// no goroutine is still inside the previous handler.
//
// handler runs on the goroutine whose library call logged, while the library holds its log lock:
// keep it short, do not wait for goroutines that may be calling into libmoe, and do not call
// SetLogHandler from it (that returns an error matching ErrInvalidArgument). A panic in handler
// is recovered and dropped.
func SetLogHandler(minLevel LogLevel, handler func(level LogLevel, message string)) error {
	// Checked before taking logMu: a handler waiting for it while its holder waits for the
	// library's log lock (held around this handler) would deadlock.
	var inside bool
	_ = call(func() { inside = raw.InLogCallback() })
	if inside {
		return &Error{Status: InvalidArgument, Message: "the log handler cannot be changed from inside it"}
	}
	logMu.Lock()
	defer logMu.Unlock()
	var next raw.LogSink
	if handler != nil {
		next = raw.NewDirectorLogSink(&logBridge{f: handler})
	}
	if err := call(func() { raw.SetLogSink(next, int(minLevel)) }); err != nil {
		if next != nil {
			raw.DeleteDirectorLogSink(next)
		}
		return err
	}
	// The C library calls handlers under its log lock, so the old one is no longer in use.
	if logSink != nil {
		raw.DeleteDirectorLogSink(logSink)
	}
	logSink = next
	return nil
}

type logBridge struct {
	f func(LogLevel, string)
}

// OnLog is called by the native layer; a panic must not unwind through C, and a log line has no
// caller to report it to.
func (b *logBridge) OnLog(level int, message string) {
	defer func() { _ = recover() }()
	b.f(LogLevel(level), message)
}
