package main

import (
	"flag"
	"fmt"
	"io"
)

// verifyCmd recomputes every statistic of a store; ok is false on any
// difference.
func verifyCmd(args []string, stdout io.Writer) (ok bool, err error) {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	dir := fs.String("dir", "", "store directory")
	if err := fs.Parse(args); err != nil {
		return false, err
	}
	s, err := openExisting(*dir)
	if err != nil {
		return false, err
	}
	defer s.Close()
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
