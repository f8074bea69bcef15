package lsm

import (
	"io"
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/errors/oserror"
	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats"
)

// detailCarrier is the line Pebble's reports of corrupt data add to an
// error's message: the error that carries the file's path and key bounds
// for pebble.ExtractDataCorruptionInfo, which stays in the chain.
const detailCarrier = "\n<corruption detail carrier>"

// markPebble marks Pebble's corruption errors with lsmstats.ErrCorruption,
// so that errors.Is(err, lsmstats.ErrCorruption) holds for every corruption
// error the store returns, and drops Pebble's detail-carrier line from the
// message (the message names the file: "pebble: file 000012: block ...").
// Pebble's message names an SST by its file number alone: for an SST in an
// object store, the message names its object too ("(object NAME)"), the
// name under which it is found in the bucket. Other errors are returned as
// they are.
func markPebble(err error) error {
	if err == nil || !pebble.IsCorruptionError(err) {
		return err
	}
	msg := err.Error()
	clean := strings.ReplaceAll(msg, detailCarrier, "")
	if info := pebble.ExtractDataCorruptionInfo(err); info != nil && info.IsRemote {
		if _, name, ok := strings.Cut(info.Path, "://"); ok && !strings.Contains(clean, name) {
			clean += " (object " + name + ")"
		}
	}
	if clean != msg {
		err = &cleanMessage{msg: clean, cause: err}
	}
	return lsmstats.MarkCorruption(err)
}

// cleanMessage replaces the message of its cause and keeps the cause in the
// chain (errors.Is, errors.As and pebble.ExtractDataCorruptionInfo see it).
type cleanMessage struct {
	msg   string
	cause error
}

func (e *cleanMessage) Error() string { return e.msg }
func (e *cleanMessage) Unwrap() error { return e.cause }

// checkOptionsFile checks Pebble's most recent OPTIONS file as Pebble's
// Open does (Options.CheckCompatibility), to name the file in the error:
// Pebble's own error does not. One that does not parse is corrupt. One
// that names another comparer is left to pebble.Open, which compares the
// MANIFEST's comparer first and so tells a store of another comparer from
// a damaged OPTIONS file (openError).
func (s *Store) checkOptionsFile(names []string, popts *pebble.Options) error {
	dbDir := s.fs.PathJoin(s.dir, pebbleDir)
	latest, latestNum := "", uint64(0)
	for _, n := range names {
		num, ok := strings.CutPrefix(n, "OPTIONS-")
		if !ok {
			continue
		}
		v, err := strconv.ParseUint(num, 10, 64)
		if err == nil && (latest == "" || v > latestNum) {
			latest, latestNum = n, v
		}
	}
	if latest == "" {
		return nil
	}
	path := s.fs.PathJoin(dbDir, latest)
	f, err := s.fs.Open(path)
	if err != nil {
		return errors.Wrapf(err, "lsmstats: open %s", path)
	}
	data, err := io.ReadAll(f)
	err = errors.CombineErrors(err, f.Close())
	if err != nil {
		return errors.Wrapf(err, "lsmstats: read %s", path)
	}
	if err := popts.CheckCompatibility(dbDir, string(data)); err != nil {
		if isComparerMismatch(err) {
			// Another comparer, or a damaged name: Pebble's Open tells
			// (openError), comparing with the MANIFEST's first.
			return nil
		}
		return lsmstats.MarkCorruption(errors.Wrapf(err, "lsmstats: Pebble's options file %s is corrupt", path))
	}
	return nil
}

func isComparerMismatch(err error) bool {
	return strings.Contains(err.Error(), "comparer name from file")
}

// openError classifies an error of pebble.Open. Pebble checks the
// comparer the MANIFEST names, then the one its OPTIONS file names: a
// mismatch in the MANIFEST is a store of another comparer, one in OPTIONS
// alone (the MANIFEST agreed) a corrupt OPTIONS file.
func (s *Store) openError(err error) error {
	switch {
	case errors.Is(err, pebble.ErrDBDoesNotExist):
		return errors.Wrapf(ErrNoStore, "%s holds no Pebble database", s.dir)
	case isComparerMismatch(err) && strings.Contains(err.Error(), "manifest file"):
		return errors.Wrapf(err, "lsmstats: %s was written with another comparer", s.dir)
	case isComparerMismatch(err):
		return lsmstats.MarkCorruption(errors.Wrapf(err,
			"lsmstats: Pebble's options file in %s names another comparer than its MANIFEST: it is corrupt", s.dir))
	case oserror.IsNotExist(err):
		// Files the MANIFEST lists (or the MANIFEST the marker names) are
		// gone: a MANIFEST that lost edits, or files removed.
		return lsmstats.MarkCorruption(errors.Wrapf(err,
			"lsmstats: open pebble in %s: files the MANIFEST lists are missing (a damaged MANIFEST, or files removed)", s.dir))
	case strings.Contains(err.Error(), "object size mismatch"):
		// Pebble's consistency check: an SST shorter or longer than the
		// MANIFEST says (a cut or overwritten file).
		return lsmstats.MarkCorruption(errors.Wrapf(err, "lsmstats: open pebble in %s: SSTs differ from their size in the MANIFEST", s.dir))
	}
	return markPebble(errors.Wrapf(err, "lsmstats: open pebble in %s", s.dir))
}

// LiveIncomplete reports whether the live statistics of a table's vnode
// are incomplete: a read-only Open left out a live-statistics row of it
// that does not decode (CorruptMetadata names it), so Stats().Live counts
// too few rows there. Always false on a writable store, whose Open fails
// on such a row instead.
func (s *Store) LiveIncomplete(table uint32, vnode uint16) bool {
	return s.liveLeftOut[table][int(vnode)] || s.liveLeftOut[table][-1]
}
