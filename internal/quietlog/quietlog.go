// Package quietlog holds a Pebble logger for this module's tests, tools
// and benchmarks: Pebble's informational lines drowned their output. It is
// not part of the store's API; a user passes a logger of their own in
// lsm.Options.Logger.
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
