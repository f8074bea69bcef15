// Command lsmstats runs the main job of the project — an arrangement backfill
// on an embedded store with live progress for the truth and both progress
// approaches — and inspects and verifies stores.
//
//	lsmstats backfill [flags]          run a backfill (see lsmstats backfill -h)
//	lsmstats stats --dir PATH [--table ID] [--json]
//	lsmstats verify --dir PATH [--recompute-live]
//	lsmstats repair --dir PATH
//	lsmstats restore --dir PATH --object-store URL --backup NAME
//	lsmstats node --dir PATH --object-store URL [--backup NAME]
//
// stats and verify open the store read-only: they create and write nothing,
// and refuse a path that holds no store. Every exit status is listed in
// lsmstats help (exitStatuses).
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats"
	// Pebble's block cache and memtables are C memory: the process starts
	// with glibc's malloc limited to one arena (package malloc).
	_ "github.com/lsmstats/lsmstats/internal/malloc"
)

// Exit statuses. Keep exitStatuses, README.md and TestExitCodes in step.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitMVMismatch  = 3
	exitFatal       = 4
	exitWorkerLost  = 5
	exitDifferences = 6
	exitCorrupt     = 7
	// exitInterrupted is the shell's status for a process ended by SIGINT
	// (128+2), which backfill returns after stopping cleanly on one.
	exitInterrupted = 130
)

// exitStatuses documents each exit status, for lsmstats help.
var exitStatuses = []struct {
	code int
	what string
}{
	{exitOK, "success (verify: every statistic matches its recomputation)"},
	{exitError, "the command failed: no store at --dir, an I/O error, an unknown table, ..."},
	{exitUsage, "usage: an unknown command, bad flags or arguments (Go also exits 2 on a panic, its trace on stderr)"},
	{exitMVMismatch, "backfill: the MV does not match the upstream table at the end"},
	{exitFatal, "Pebble ended the process on a fatal error (a failed WAL or MANIFEST write); the reason is on stderr"},
	{exitWorkerLost, "backfill worker (internal): its supervisor is gone"},
	{exitDifferences, "verify: statistics differ from their recomputation"},
	{exitCorrupt, "the store is corrupt: a checksum failed or stored data does not decode (verify: corrupt files or rows, or statistics it could not check; any command: a MANIFEST that would open an older version than the store committed; repair: the store's copy cannot restore it)"},
	{exitInterrupted, "backfill: interrupted (Ctrl-C, SIGINT or SIGTERM); the store in --dir keeps its last checkpoint (the same command resumes), a temporary one is removed"},
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes a command line and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	// The store's log lines come from Pebble's goroutines too.
	stderr = &syncWriter{w: stderr}
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	var code int
	var err error
	switch args[0] {
	case "backfill":
		code, err = backfillCmd(args[1:], stdout, stderr)
	case "stats":
		code, err = statsCmd(args[1:], stdout, stderr)
	case "verify":
		code, err = verifyCmd(args[1:], stdout, stderr)
	case "repair":
		code, err = repairCmd(args[1:], stdout, stderr)
	case "node":
		code, err = nodeCmd(args[1:], stdout, stderr)
	case "restore":
		code, err = restoreCmd(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		usage(stdout)
		return exitOK
	default:
		fmt.Fprintf(stderr, "lsmstats: unknown command %q\n", args[0])
		usage(stderr)
		return exitUsage
	}
	if err == nil {
		return code
	}
	fmt.Fprintf(stderr, "lsmstats %s: %v\n", args[0], err)
	switch {
	case code != exitOK:
		return code
	case lsmstats.IsCorruption(err):
		return exitCorrupt
	default:
		return exitError
	}
}

// usageError marks errors in the command line: exit status 2.
func usageError(err error) (int, error) { return exitUsage, err }

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  lsmstats backfill [flags]                 a backfill with live progress (lsmstats backfill -h)
  lsmstats stats --dir PATH [--table ID] [--json]
                                            statistics of a store, per table and vnode
  lsmstats verify --dir PATH [--recompute-live]
                                            recompute every statistic and check every block;
                                            non-zero exit on a difference or corruption
                                            (--recompute-live: first rescan the live statistics of
                                            tables written by unchecked writers, and persist them)
  lsmstats node --dir PATH --object-store URL [--name N] [--listen ADDR] [--backup NAME]
                                            one store node of a cluster, driven by a coordinator
                                            (lsmstats backfill --nodes N); --backup: back the store
                                            up to the object store after every checkpoint
  lsmstats restore --dir PATH --object-store URL --backup NAME
                                            write a store's latest backup into an empty directory
                                            (a node whose disk was lost), then verify it
  lsmstats repair --dir PATH                restore a damaged MANIFEST from the store's own copy of
                                            it, then verify the store as verify does

stats and verify open the store read-only (verify --recompute-live writes the
recomputed statistics) and refuse a path that holds no store.

exit status:
`)
	for _, s := range exitStatuses {
		fmt.Fprintf(w, "  %3d  %s\n", s.code, s.what)
	}
}

// cliLogger is the store's logger in every command: Pebble's informational
// lines are dropped, its errors and the store's go to stderr, and Fatalf —
// which Pebble calls on a failed WAL or MANIFEST write, after which no store
// can go on — prints the reason on stderr and exits with exitFatal.
type cliLogger struct{ w io.Writer }

func (cliLogger) Infof(string, ...any) {}

func (l cliLogger) Errorf(format string, args ...any) {
	fmt.Fprintf(l.w, "%s\n", strings.TrimRight(fmt.Sprintf(format, args...), "\n"))
}

func (l cliLogger) Fatalf(format string, args ...any) {
	fmt.Fprintf(l.w, "lsmstats: Pebble ended the process on a fatal error: %s\n",
		strings.TrimRight(fmt.Sprintf(format, args...), "\n"))
	os.Exit(exitFatal)
}

// syncWriter serialises writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// errCorrupt is returned (marked lsmstats.ErrCorruption) by commands that
// found the store corrupt after reporting what they found.
func errCorrupt(format string, args ...any) error {
	return lsmstats.MarkCorruption(errors.Newf(format, args...))
}
