package lsm

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// QuietLogger returns a logger for Options.Logger that drops informational
// lines, Pebble's (flushes, compactions, ingestions: several a second
// under a backfill) and the store's, and writes errors to w, one line
// each; nil w means standard error, and io.Discard drops the errors too.
// Like Pebble's default logger, Fatalf, which Pebble calls on a failed
// write or sync of its WAL or MANIFEST (after which no store can go on),
// writes its line to w and ends the process, with exit status 1. The
// logger is safe for concurrent use: it serialises its writes to w.
func QuietLogger(w io.Writer) pebble.Logger {
	if w == nil {
		w = os.Stderr
	}
	return &quietLogger{w: w}
}

// quietLogger is QuietLogger's logger.
type quietLogger struct {
	mu sync.Mutex
	w  io.Writer
}

// Infof drops the line.
func (*quietLogger) Infof(string, ...any) {}

// Errorf writes the line.
func (l *quietLogger) Errorf(format string, args ...any) { l.write("", format, args...) }

// Fatalf writes the line and exits with status 1.
func (l *quietLogger) Fatalf(format string, args ...any) {
	l.write("fatal: ", format, args...)
	os.Exit(1)
}

func (l *quietLogger) write(prefix, format string, args ...any) {
	line := prefix + strings.TrimRight(fmt.Sprintf(format, args...), "\n") + "\n"
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = io.WriteString(l.w, line)
}
