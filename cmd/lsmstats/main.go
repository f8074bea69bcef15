// Command lsmstats runs the main job of the project — an arrangement backfill
// on an embedded store with live progress for the truth and both progress
// approaches — and inspects and verifies stores.
//
//	lsmstats backfill [flags]          run a backfill (see lsmstats backfill -h)
//	lsmstats stats --dir PATH [--table ID] [--json]
//	lsmstats verify --dir PATH [--recompute-live]
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes a command line and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	var err error
	switch args[0] {
	case "backfill":
		var code int
		code, err = backfillCmd(args[1:], stdout, stderr)
		if err == nil {
			return code
		}
	case "stats":
		err = statsCmd(args[1:], stdout)
	case "verify":
		var ok bool
		ok, err = verifyCmd(args[1:], stdout)
		if err == nil && !ok {
			return 1
		}
	case "-h", "--help", "help":
		usage(stdout)
		return 0
	default:
		fmt.Fprintf(stderr, "lsmstats: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "lsmstats %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  lsmstats backfill [flags]                 a backfill with live progress (lsmstats backfill -h)
  lsmstats stats --dir PATH [--table ID] [--json]
                                            statistics of a store, per table and vnode
  lsmstats verify --dir PATH [--recompute-live]
                                            recompute every statistic; non-zero exit on a difference
                                            (--recompute-live: first rescan the live statistics of
                                            tables written by unchecked writers, and persist them)
`)
}
