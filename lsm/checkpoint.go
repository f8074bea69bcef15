package lsm

import (
	"encoding/binary"
	"hash/crc32"
	"io"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/errors/oserror"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats"
)

// The checkpoint mark: a file beside Pebble's directory that says what
// the store has committed, rewritten in place after every commit, so that
// Open can tell a store that lost committed checkpoints from one that
// lost nothing. It holds the last committed epoch, and which MANIFEST the
// store followed and how many of its bytes Pebble had synced then
// (manifestTail):
//
//	magic "lsc2" | epoch u64 BE | manifest u64 BE | synced u64 BE | crc32c u32 BE
//
// (32 bytes). A mark of the first layout, "lsck" | epoch u64 BE | crc32c
// u32 BE (16 bytes), still reads, with no MANIFEST; the store writes the
// new one from its first commit on.
//
// Pebble reads its MANIFEST up to the last record it can decode and takes
// anything after it for the tail of a write that a crash cut short. Open
// checks the MANIFEST against the mark before Pebble reads it
// (checkManifest, manifest.go), and after Pebble opened, the committed
// epoch it recovered against the mark's: a committed epoch below the mark's
// is a lost checkpoint (a WAL tail that Pebble took for torn, say). Both
// are refused with an error marked lsmstats.ErrCorruption, and the files
// Pebble would have deleted while it opened are kept (deferredRemoveFS).
//
// The mark is written after the commit's batch or ingestion is durable and
// is not synced (Close syncs it): after a crash it may be older than the
// committed epoch (or missing), never newer, and it counts only the
// MANIFEST bytes Pebble had synced, so it never refuses a store that lost
// nothing. A failed write is logged and leaves it older.

const (
	markName    = "CHECKPOINT"
	markMagic   = "lsc2"
	markLen     = len(markMagic) + 3*8 + 4
	markMagicV1 = "lsck"
	markLenV1   = len(markMagicV1) + 8 + 4
)

// mark is what the checkpoint mark records.
type mark struct {
	epoch uint64
	// manifest is the file number of the MANIFEST the store followed (0:
	// none, a mark of the first layout), and synced the bytes of it that
	// Pebble had synced.
	manifest, synced uint64
}

func encodeMark(m mark) []byte {
	b := binary.BigEndian.AppendUint64([]byte(markMagic), m.epoch)
	b = binary.BigEndian.AppendUint64(b, m.manifest)
	b = binary.BigEndian.AppendUint64(b, m.synced)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func decodeMark(b []byte) (mark, error) {
	checks := func(n int, magic string) bool {
		return len(b) == n && string(b[:len(magic)]) == magic &&
			binary.BigEndian.Uint32(b[n-4:]) == crc32.Checksum(b[:n-4], castagnoli)
	}
	switch {
	case checks(markLen, markMagic):
		return mark{
			epoch:    binary.BigEndian.Uint64(b[4:]),
			manifest: binary.BigEndian.Uint64(b[12:]),
			synced:   binary.BigEndian.Uint64(b[20:]),
		}, nil
	case checks(markLenV1, markMagicV1):
		return mark{epoch: binary.BigEndian.Uint64(b[4:])}, nil
	}
	return mark{}, lsmstats.Corruptionf("lsmstats: checkpoint mark %s does not decode (%x)", markName, b)
}

// readMark returns the checkpoint mark; ok is false when there is none.
func (s *Store) readMark() (m mark, ok bool, err error) {
	path := s.fs.PathJoin(s.dir, markName)
	f, err := s.fs.Open(path)
	if err != nil {
		if oserror.IsNotExist(err) {
			return mark{}, false, nil
		}
		return mark{}, false, errors.Wrapf(err, "lsmstats: open %s", path)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(markLen)+1))
	if err != nil {
		return mark{}, false, errors.Wrapf(err, "lsmstats: read %s", path)
	}
	m, err = decodeMark(b)
	return m, err == nil, err
}

// openMark reads the checkpoint mark for Open. A damaged mark says
// nothing: a read-only store reports it (Verify), a writable one writes a
// new one after Open.
func (s *Store) openMark(logger pebble.Logger) (mark, bool, error) {
	m, ok, err := s.readMark()
	switch {
	case err != nil && !lsmstats.IsCorruption(err):
		return mark{}, false, err
	case err != nil:
		if logger == nil {
			logger = pebble.DefaultLogger
		}
		logger.Errorf("%v", err)
		if s.opts.ReadOnly {
			s.corruptMeta = append(s.corruptMeta, err)
		}
		s.markDamaged = err
		return mark{}, false, nil
	}
	return m, ok, nil
}

// checkMark compares the committed epoch Open loaded with the checkpoint
// mark's, and brings the mark up to date (not on a read-only store).
func (s *Store) checkMark(m mark, ok bool) error {
	committed := s.committed.Load()
	if ok && m.epoch > committed {
		return lsmstats.Corruptionf("lsmstats: store %s opens at committed epoch %d, but its checkpoint mark (%s) "+
			"says epoch %d was committed: Pebble recovered less than the store committed (a WAL or MANIFEST it "+
			"read up to a damaged record); the store must be restored from a copy", s.dir, committed, markName, m.epoch)
	}
	// A mark that says what Open found stays as it is: the MANIFEST only
	// grows or is replaced by a newer one, so what it says was synced still
	// is, and the first commit follows the MANIFEST into the store's copy.
	if !s.opts.ReadOnly && (!ok || m.epoch != committed || m.manifest == 0) {
		s.writeMark(committed)
	}
	return nil
}

// checkMarkWithoutMetadata refuses a Pebble database that holds none of
// the store's metadata beside a checkpoint mark. The store writes the mark
// only after its first metadata is durable, so the pair means Pebble lost
// the edits that added the metadata: corruption, reported before a
// writable Open would initialise the store over it.
func (s *Store) checkMarkWithoutMetadata(m mark, ok bool) error {
	if s.markDamaged != nil {
		return lsmstats.MarkCorruption(errors.Wrapf(s.markDamaged, "lsmstats: store %s: Pebble's database holds none of the "+
			"store's metadata, but a checkpoint mark (%s) is there: Pebble's MANIFEST lost edits; the store must be "+
			"restored from a copy", s.dir, markName))
	}
	if ok {
		return lsmstats.Corruptionf("lsmstats: store %s: Pebble's database holds none of the store's metadata, but its "+
			"checkpoint mark (%s) says epoch %d was committed: Pebble's MANIFEST lost edits (it reads a damaged or cut "+
			"MANIFEST up to its last valid record); the store must be restored from a copy", s.dir, markName, m.epoch)
	}
	return nil
}

// writeMark records epoch as committed in the mark, with how far Pebble's
// MANIFEST was synced. Failures are logged: the mark then stays older,
// which is safe. Callers hold ingestMu, or are Open or Close.
func (s *Store) writeMark(epoch uint64) {
	s.tail.follow(s, s.manifestNum.Load())
	s.writeMarkOf(mark{epoch: epoch, manifest: s.tail.num, synced: uint64(s.tail.synced)})
}

func (s *Store) writeMarkOf(m mark) {
	if s.mark == nil {
		f, err := s.fs.OpenReadWrite(s.fs.PathJoin(s.dir, markName), vfs.WriteCategoryUnspecified)
		if err != nil {
			s.popts.Logger.Errorf("lsmstats: open the checkpoint mark: %v", err)
			return
		}
		s.mark = f
	}
	if _, err := s.mark.WriteAt(encodeMark(m), 0); err != nil {
		s.popts.Logger.Errorf("lsmstats: write the checkpoint mark: %v", err)
	}
}

// closeMark records, once Pebble is closed, every MANIFEST byte it wrote as
// synced, syncs the mark and the MANIFEST's copy, and closes them.
func (s *Store) closeMark() {
	if s.mark != nil {
		s.tail.follow(s, s.manifestNum.Load())
		s.tail.synced = s.tail.end // Pebble synced every record before it closed
		s.writeMarkOf(mark{epoch: s.committed.Load(), manifest: s.tail.num, synced: uint64(s.tail.synced)})
		if err := s.mark.Sync(); err != nil {
			s.popts.Logger.Errorf("lsmstats: sync the checkpoint mark: %v", err)
		}
		if err := s.mark.Close(); err != nil {
			s.popts.Logger.Errorf("lsmstats: close the checkpoint mark: %v", err)
		}
		s.mark = nil
	}
	s.tail.close(s, true)
}

// manifestTail follows Pebble's current MANIFEST for the checkpoint mark
// (how many of its bytes are synced) and appends its records to the
// store's copy of it, <dir>/MANIFEST-NNNNNN.copy, the way back from a
// damaged MANIFEST (RepairManifest). Pebble writes a record only once the
// one before it is synced, so every record before the last one read is
// synced, and all of them once something follows the last. Used under
// ingestMu, or by Open and Close.
type manifestTail struct {
	num  uint64   // the MANIFEST followed (0: none)
	f    vfs.File // it, open for reading
	copy vfs.File // its copy
	// end is the end of the valid records read (where the next starts),
	// synced the bytes Pebble surely synced.
	end, synced int64
	buf         []byte
}

// follow reads what Pebble appended to MANIFEST num since the last call
// (starting over when Pebble started a new MANIFEST). Errors are logged:
// the tail then records nothing new.
func (t *manifestTail) follow(s *Store, num uint64) {
	if num == 0 {
		return
	}
	if num != t.num {
		t.close(s, false)
		// Pebble opens MANIFEST num now: it starts with a snapshot of the
		// version, and copies of older MANIFESTs are history.
		s.removeManifestCopies(num)
		*t = manifestTail{num: num, buf: t.buf}
		path := s.fs.PathJoin(s.dir, pebbleDir, manifestName(num))
		f, err := s.fs.Open(path)
		if err != nil {
			s.popts.Logger.Errorf("lsmstats: follow %s: %v", path, err)
			t.num = 0
			return
		}
		t.f = f
		cp := manifestCopyPath(s.fs, s.dir, num)
		if t.copy, err = s.fs.Create(cp, vfs.WriteCategoryUnspecified); err != nil {
			s.popts.Logger.Errorf("lsmstats: create %s: %v", cp, err)
		}
	}
	st, err := t.f.Stat()
	if err != nil {
		s.popts.Logger.Errorf("lsmstats: follow %s: %v", manifestName(num), err)
		return
	}
	n := st.Size() - t.end
	if n <= 0 {
		return
	}
	if int64(cap(t.buf)) < n {
		t.buf = make([]byte, n)
	}
	b := t.buf[:n]
	if _, err := t.f.ReadAt(b, t.end); err != nil && !errors.Is(err, io.EOF) {
		s.popts.Logger.Errorf("lsmstats: follow %s: %v", manifestName(num), err)
		return
	}
	sc := scanRecords(b, t.end)
	if sc.end > t.end && t.copy != nil {
		if _, err := t.copy.WriteAt(b[:sc.end-t.end], t.end); err != nil {
			s.popts.Logger.Errorf("lsmstats: write the copy of %s: %v", manifestName(num), err)
			_ = t.copy.Close()
			t.copy = nil
			_ = s.fs.Remove(manifestCopyPath(s.fs, s.dir, num)) // a copy with a hole is no copy
		}
	}
	switch {
	case sc.end < t.end+n:
		// Bytes follow the last whole record (the next record, being
		// written): every whole record is synced.
		t.synced = sc.end
	case sc.last >= 0:
		t.synced = sc.last
	}
	t.end = sc.end
}

// close closes the followed MANIFEST and its copy (synced if sync).
func (t *manifestTail) close(s *Store, sync bool) {
	if t.f != nil {
		_ = t.f.Close()
		t.f = nil
	}
	if t.copy != nil {
		if sync {
			if err := t.copy.Sync(); err != nil {
				s.popts.Logger.Errorf("lsmstats: sync the copy of %s: %v", manifestName(t.num), err)
			}
		}
		_ = t.copy.Close()
		t.copy = nil
	}
}

// manifestCopyPath is the path of the store's copy of MANIFEST num.
func manifestCopyPath(fs vfs.FS, dir string, num uint64) string {
	return fs.PathJoin(dir, manifestName(num)+".copy")
}

// removeManifestCopies removes the store's copies of MANIFESTs other than
// MANIFEST keep. Failures are logged.
func (s *Store) removeManifestCopies(keep uint64) {
	names, err := s.fs.List(s.dir)
	if err != nil {
		s.popts.Logger.Errorf("lsmstats: list %s: %v", s.dir, err)
		return
	}
	for _, name := range names {
		base, ok := strings.CutSuffix(name, ".copy")
		if num, isManifest := parseManifestName(base); !ok || !isManifest || num == keep {
			continue
		}
		if err := s.fs.Remove(s.fs.PathJoin(s.dir, name)); err != nil && !oserror.IsNotExist(err) {
			s.popts.Logger.Errorf("lsmstats: remove %s: %v", name, err)
		}
	}
}
