package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/lsm"
)

// verifyCmd recomputes every statistic of a store and checks every block of
// its SSTs. It prints every corrupt file or row, every statistic it could
// not check and every difference, and exits with exitCorrupt if anything
// is corrupt or unchecked, else exitDifferences if anything differs. With
// --recompute-live it first replaces the live statistics of every table
// flagged as possibly containing estimates by a scan: then it opens the
// store for writing.
func verifyCmd(args []string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "store directory")
	recompute := fs.Bool("recompute-live", false,
		"first recompute (scan, persist) the live statistics of the tables written by unchecked writers")
	objectStore := objectStoreFlag(fs)
	if err := fs.Parse(args); err != nil {
		return usageError(err)
	}
	if fs.NArg() > 0 {
		return usageError(errors.Newf("unexpected argument %q", fs.Arg(0)))
	}
	if *dir == "" {
		return usageError(errors.New("--dir is required"))
	}
	s, err := openStore(*dir, *objectStore, stderr, *recompute)
	if err != nil {
		return exitOK, err
	}
	defer s.Close()
	if *recompute {
		live := s.Stats().Live
		for _, def := range s.Tables() {
			if !live.ContainsEstimates(def.ID) {
				continue
			}
			before, after, err := s.RecomputeLiveStats(def.ID)
			if err != nil {
				return exitOK, err
			}
			fmt.Fprintf(stdout, "recomputed live statistics of table %d: %d rows / %d bytes -> %d rows / %d bytes\n",
				def.ID, before.Rows, before.Bytes, after.Rows, after.Bytes)
		}
	}
	return verifyStore(s, stdout)
}

// verifyStore runs Verify on s and prints its report; the exit status and
// error are verify's.
func verifyStore(s *lsm.Store, stdout io.Writer) (int, error) {
	rep, err := s.Verify()
	if err != nil {
		return exitOK, err
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(stdout, "note: %s\n", n)
	}
	for _, c := range rep.Corrupt {
		fmt.Fprintf(stdout, "CORRUPT: %s\n", c)
	}
	for _, u := range rep.Unchecked {
		fmt.Fprintf(stdout, "UNCHECKED: %s\n", u)
	}
	for _, d := range rep.Differences {
		fmt.Fprintf(stdout, "DIFFERENCE: %s\n", d)
	}
	status := "ok"
	if !rep.OK() {
		status = fmt.Sprintf("%d corrupt, %d unchecked, %s", len(rep.Corrupt), len(rep.Unchecked),
			plural(len(rep.Differences), "difference"))
	}
	fmt.Fprintf(stdout, "verified epoch %d: %d SSTs, %d live rows scanned: %s\n", rep.Epoch, rep.Files, rep.Rows, status)
	switch {
	case len(rep.Corrupt) > 0 || len(rep.Unchecked) > 0:
		return exitCorrupt, errors.Newf("the store is corrupt: %d corrupt files or metadata rows, %d statistics that could not be checked (listed above)",
			len(rep.Corrupt), len(rep.Unchecked))
	case len(rep.Differences) > 0:
		return exitDifferences, errors.Newf("%s between the statistics and their recomputation (listed above)",
			plural(len(rep.Differences), "difference"))
	}
	return exitOK, nil
}

// repairCmd restores a damaged MANIFEST from the store's own copy of it
// (lsm.RepairManifest), then verifies the store as verify does. A MANIFEST
// the copy cannot restore is left as it is (exit 7: the store must be
// restored from a copy); one that is not damaged is only verified.
func repairCmd(args []string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("repair", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "store directory")
	objectStore := objectStoreFlag(fs)
	if err := fs.Parse(args); err != nil {
		return usageError(err)
	}
	if fs.NArg() > 0 {
		return usageError(errors.Newf("unexpected argument %q", fs.Arg(0)))
	}
	if *dir == "" {
		return usageError(errors.New("--dir is required"))
	}
	repaired, err := lsm.RepairManifest(*dir, &lsm.Options{Logger: cliLogger{w: stderr}, ObjectStore: objectStoreOptions(*objectStore)})
	if err != nil {
		return exitOK, err
	}
	if repaired {
		fmt.Fprintf(stdout, "restored the MANIFEST of %s from the store's copy of it (the damaged one is kept in %s)\n", *dir, *dir)
	} else {
		fmt.Fprintf(stdout, "the MANIFEST of %s is not damaged: nothing to restore\n", *dir)
	}
	s, err := openStore(*dir, *objectStore, stderr, false)
	if err != nil {
		return exitOK, err
	}
	defer s.Close()
	return verifyStore(s, stdout)
}

// restoreCmd writes a store's latest backup in its object store (which a
// node makes after every checkpoint: lsmstats node --backup) into a
// directory that holds no store, then verifies the store as verify does.
func restoreCmd(args []string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "the directory to restore the store into (missing or empty)")
	objectStore := objectStoreFlag(fs)
	name := fs.String("backup", "", "the backup's name (lsmstats node --backup)")
	if err := fs.Parse(args); err != nil {
		return usageError(err)
	}
	if fs.NArg() > 0 {
		return usageError(errors.Newf("unexpected argument %q", fs.Arg(0)))
	}
	if *dir == "" || *objectStore == "" || *name == "" {
		return usageError(errors.New("--dir, --object-store and --backup are required"))
	}
	info, err := lsm.Restore(context.Background(), *dir, &lsm.Options{Logger: cliLogger{w: stderr}, ObjectStore: objectStoreOptions(*objectStore)}, *name)
	if err != nil {
		return exitOK, err
	}
	fmt.Fprintf(stdout, "restored backup %d of %s into %s: committed epoch %d, %d files (%d bytes) referencing %d SSTs; removed %d SSTs made after it\n",
		info.Seq, *name, *dir, info.Epoch, info.Files, info.Bytes, info.Objects, info.Removed)
	s, err := openStore(*dir, *objectStore, stderr, false)
	if err != nil {
		return exitOK, err
	}
	defer s.Close()
	return verifyStore(s, stdout)
}
