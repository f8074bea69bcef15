package main

import (
	"flag"
	"fmt"
	"io"
)

// verifyCmd recomputes every statistic of a store; ok is false on any
// difference. With --recompute-live it first replaces the live statistics
// of every table flagged as possibly containing estimates by a scan.
func verifyCmd(args []string, stdout io.Writer) (ok bool, err error) {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	dir := fs.String("dir", "", "store directory")
	recompute := fs.Bool("recompute-live", false,
		"first recompute (scan, persist) the live statistics of the tables written by unchecked writers")
	if err := fs.Parse(args); err != nil {
		return false, err
	}
	if fs.NArg() > 0 {
		return false, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	s, err := openExisting(*dir)
	if err != nil {
		return false, err
	}
	defer s.Close()
	if *recompute {
		live := s.Live()
		for _, def := range s.Tables() {
			if !live.ContainsEstimates(def.ID) {
				continue
			}
			before, after, err := s.RecomputeLiveStats(def.ID)
			if err != nil {
				return false, err
			}
			fmt.Fprintf(stdout, "recomputed live statistics of table %d: %d rows / %d bytes -> %d rows / %d bytes\n",
				def.ID, before.Rows, before.Bytes, after.Rows, after.Bytes)
		}
	}
	rep, err := s.Verify()
	if err != nil {
		return false, err
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(stdout, "note: %s\n", n)
	}
	for _, d := range rep.Differences {
		fmt.Fprintf(stdout, "DIFFERENCE: %s\n", d)
	}
	status := "ok"
	if !rep.OK() {
		status = fmt.Sprintf("%d differences", len(rep.Differences))
	}
	fmt.Fprintf(stdout, "verified epoch %d: %d SSTs, %d live rows scanned: %s\n", rep.Epoch, rep.Files, rep.Rows, status)
	return rep.OK(), nil
}
