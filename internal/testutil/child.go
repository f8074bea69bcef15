package testutil

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Child is the current test binary run again as a child process, which
// reports on its stdout one line at a time.
type Child struct {
	cmd    *exec.Cmd
	lines  chan string
	killed bool // Kill sent SIGKILL
}

// StartChild runs the test binary again with no test selected and env
// ("NAME=value" pairs) added to the environment, for TestMain to run the
// child's code instead of the tests. The child's stderr goes to stderr.
func StartChild(t testing.TB, stderr io.Writer, env ...string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &Child{cmd: cmd, lines: make(chan string, 4096)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	return c
}

// Lines returns the child's stdout lines not read yet; the channel is
// closed when the output ends.
func (c *Child) Lines() <-chan string { return c.lines }

// Reason says why ReadUntil returned.
type Reason int

const (
	Matched  Reason = iota // handle returned true
	Ended                  // the child's output ended
	TimedOut               // the timeout passed
)

// ReadUntil passes the child's lines to handle until handle returns true,
// the output ends or timeout passes (0: no timeout).
func (c *Child) ReadUntil(timeout time.Duration, handle func(line string) bool) Reason {
	var deadline <-chan time.Time
	if timeout > 0 {
		tm := time.NewTimer(timeout)
		defer tm.Stop()
		deadline = tm.C
	}
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				return Ended
			}
			if handle(l) {
				return Matched
			}
		case <-deadline:
			return TimedOut
		}
	}
}

// Quit sends SIGQUIT to the child: a Go child prints every goroutine's
// stack on its stderr and exits.
func (c *Child) Quit(t testing.TB) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGQUIT))
}

// Kill sends SIGKILL to the child.
func (c *Child) Kill(t testing.TB) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGKILL))
	c.killed = true
}

// KillAfter passes the child's lines to handle until its output ends, and
// sends it SIGKILL once d has passed, unless the output ended first.
func (c *Child) KillAfter(t testing.TB, d time.Duration, handle func(line string)) {
	t.Helper()
	tm := time.NewTimer(d)
	defer tm.Stop()
	kill := tm.C
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				return
			}
			handle(l)
		case <-kill:
			c.Kill(t)
			kill = nil
		}
	}
}

// Exit is how a child ended: killed by SIGKILL, exited with a status, or
// unknown because waiting for it failed.
type Exit struct {
	// Killed is set if SIGKILL ended the child.
	Killed bool
	// KilledByTest is set if that SIGKILL was the one Kill sent.
	KilledByTest bool
	// Code is the exit status; -1 if a signal ended the child or waiting
	// failed.
	Code int
	// Err is what exec.Cmd.Wait returned: nil after exit status 0, an
	// *exec.ExitError after another status or a signal, else why waiting
	// failed.
	Err error
}

// Finished returns nil if the child, having reported its job done, ended
// well: with status 0, or by the test's own SIGKILL, which may land after
// the report and before the exit. Else it returns Err.
func (e Exit) Finished() error {
	if e.KilledByTest {
		return nil
	}
	return e.Err
}

// WaitErr returns Err if waiting for the child failed, nil if the child
// exited or a signal ended it.
func (e Exit) WaitErr() error {
	var ee *exec.ExitError
	if errors.As(e.Err, &ee) {
		return nil
	}
	return e.Err
}

// Wait discards the lines not read, waits for the child to end and says
// how it did.
func (c *Child) Wait() Exit {
	for range c.lines {
	}
	err := c.cmd.Wait()
	e := Exit{Err: err}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		e.Code = ee.ExitCode()
		ws, ok := ee.Sys().(syscall.WaitStatus)
		e.Killed = ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
		e.KilledByTest = e.Killed && c.killed
	default:
		e.Code = -1
	}
	return e
}

// ExitChild ends a child process: with status 0 if err is nil, else with
// status 3 after printing "E <err>" for the parent.
func ExitChild(err error) {
	if err != nil {
		fmt.Printf("E %v\n", err)
		os.Exit(3)
	}
	os.Exit(0)
}

// Missing returns the phases, in order, that no kill has landed in yet
// according to hits (kills per phase).
func Missing(phases []string, hits map[string]int) []string {
	var out []string
	for _, p := range phases {
		if hits[p] == 0 {
			out = append(out, p)
		}
	}
	return out
}
