// Package quietlog holds the Pebble logger that internal/keystats's tests
// still use. Everything else uses lsm.QuietLogger, which replaced it:
// switch those tests to it and delete this package. (They were left alone
// while another change restructured internal/keystats.)
package quietlog

import (
	"fmt"
	"io"
	"os"
)

// Logger is a Pebble logger that drops Pebble's informational lines and
// writes errors to W (standard error when nil). Like Pebble's default
// logger, Fatalf — which Pebble calls on WAL and MANIFEST write errors —
// ends the process: a store cannot go on after those.
type Logger struct{ W io.Writer }

// Infof drops the line.
func (Logger) Infof(string, ...any) {}

// Errorf writes the line.
func (l Logger) Errorf(format string, args ...any) {
	fmt.Fprintf(l.out(), format+"\n", args...)
}

// Fatalf writes the line and exits with status 4.
func (l Logger) Fatalf(format string, args ...any) {
	fmt.Fprintf(l.out(), "fatal: "+format+"\n", args...)
	os.Exit(4)
}

func (l Logger) out() io.Writer {
	if l.W == nil {
		return os.Stderr
	}
	return l.W
}
