package lsm

import (
	"encoding/binary"
	"hash/crc32"
	"io"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/errors/oserror"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats"
)

// The checkpoint mark: a 16-byte file beside Pebble's directory that holds
// the last committed epoch, rewritten in place after every commit.
//
// Pebble reads its MANIFEST up to the last record it can decode and takes
// anything after it for the tail of a write that a crash cut short. A
// MANIFEST damaged in the middle, or cut, therefore opens at an older
// version — without an error when the lost edits were ingestions — and the
// store would reopen at an older checkpoint, its later commits gone. The
// mark tells: a committed epoch below the mark's is a lost checkpoint, and
// Open refuses it with an error marked lsmstats.ErrCorruption.
//
// The mark is written after the commit's ingestion is durable and is not
// synced: after a crash it may be older than the committed epoch (or
// missing), never newer, so it never refuses a store that lost nothing. A
// failed write is logged and leaves it older. A commit's loss the mark did
// not record yet, and losses of other edits (catalog, GC), go unnoticed;
// most such losses make Pebble refuse the MANIFEST itself (files it lists
// that compactions deleted), which Open reports as corruption too.
//
//	magic "lsck" | epoch u64 BE | crc32c(magic | epoch) u32 BE

const (
	markName  = "CHECKPOINT"
	markMagic = "lsck"
	markLen   = len(markMagic) + 8 + 4
)

func encodeMark(epoch uint64) []byte {
	b := binary.BigEndian.AppendUint64([]byte(markMagic), epoch)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func decodeMark(b []byte) (uint64, error) {
	if len(b) != markLen || string(b[:len(markMagic)]) != markMagic ||
		binary.BigEndian.Uint32(b[markLen-4:]) != crc32.Checksum(b[:markLen-4], castagnoli) {
		return 0, lsmstats.Corruptionf("lsmstats: checkpoint mark %s does not decode (%x)", markName, b)
	}
	return binary.BigEndian.Uint64(b[len(markMagic):]), nil
}

// readMark returns the epoch of the checkpoint mark; ok is false when there
// is none.
func (s *Store) readMark() (epoch uint64, ok bool, err error) {
	path := s.fs.PathJoin(s.dir, markName)
	f, err := s.fs.Open(path)
	if err != nil {
		if oserror.IsNotExist(err) {
			return 0, false, nil
		}
		return 0, false, errors.Wrapf(err, "lsmstats: open %s", path)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(markLen)+1))
	if err != nil {
		return 0, false, errors.Wrapf(err, "lsmstats: read %s", path)
	}
	epoch, err = decodeMark(b)
	return epoch, err == nil, err
}

// checkMark compares the committed epoch Open loaded with the checkpoint
// mark, and brings the mark up to date (not on a read-only store).
func (s *Store) checkMark() error {
	committed := s.committed.Load()
	epoch, ok, err := s.readMark()
	switch {
	case err != nil && !lsmstats.IsCorruption(err):
		return err
	case err != nil:
		// The mark itself is damaged: it says nothing. A read-only store
		// reports it (Verify); a writable one writes a new one.
		s.popts.Logger.Errorf("%v", err)
		if s.opts.ReadOnly {
			s.corruptMeta = append(s.corruptMeta, err)
		}
	case ok && epoch > committed:
		return lsmstats.Corruptionf("lsmstats: store %s opens at committed epoch %d, but its checkpoint mark (%s) "+
			"says epoch %d was committed: Pebble's MANIFEST lost edits (it reads a damaged or cut MANIFEST up to its "+
			"last valid record)", s.dir, committed, markName, epoch)
	}
	if s.opts.ReadOnly || (ok && epoch == committed) {
		return nil
	}
	s.writeMark(committed)
	return nil
}

// checkMarkWithoutMetadata refuses a Pebble database that holds none of
// the store's metadata beside a checkpoint mark. The store writes the mark
// only after its first metadata is durable, so the pair means Pebble's
// MANIFEST lost the edits that added the metadata (a MANIFEST damaged near
// its start opens as an almost empty database): corruption, reported
// before a writable Open would initialise the store over it.
func (s *Store) checkMarkWithoutMetadata() error {
	epoch, ok, err := s.readMark()
	switch {
	case err != nil && !lsmstats.IsCorruption(err):
		return err
	case err != nil:
		return lsmstats.MarkCorruption(errors.Wrapf(err, "lsmstats: store %s: Pebble's database holds none of the "+
			"store's metadata, but a checkpoint mark (%s) is there: Pebble's MANIFEST lost edits", s.dir, markName))
	case ok:
		return lsmstats.Corruptionf("lsmstats: store %s: Pebble's database holds none of the store's metadata, but its "+
			"checkpoint mark (%s) says epoch %d was committed: Pebble's MANIFEST lost edits (it reads a damaged or cut "+
			"MANIFEST up to its last valid record)", s.dir, markName, epoch)
	}
	return nil
}

// writeMark records epoch as committed in the mark. Failures are logged:
// the mark then stays older, which is safe. Callers hold ingestMu, or are
// Open.
func (s *Store) writeMark(epoch uint64) {
	if s.mark == nil {
		f, err := s.fs.OpenReadWrite(s.fs.PathJoin(s.dir, markName), vfs.WriteCategoryUnspecified)
		if err != nil {
			s.popts.Logger.Errorf("lsmstats: open the checkpoint mark: %v", err)
			return
		}
		s.mark = f
	}
	if _, err := s.mark.WriteAt(encodeMark(epoch), 0); err != nil {
		s.popts.Logger.Errorf("lsmstats: write the checkpoint mark: %v", err)
	}
}
