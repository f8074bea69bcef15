package lsm

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/errors/oserror"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/atomicfs"
	"github.com/lsmstats/lsmstats"
)

// A damaged MANIFEST.
//
// Pebble's MANIFEST is a log of version edits, each a record of LevelDB's
// log format: 32 KiB blocks of chunks, each chunk a 7-byte header
// (crc32c of its kind and data, masked, u32 LE | length u16 LE | kind u8:
// full, first, middle or last part of a record) and its data; a block's
// last bytes, too few for a header, are zeros. Pebble reads the MANIFEST up
// to the first record that does not decode and takes the rest for the tail
// of a write a crash cut short. A MANIFEST damaged in the middle therefore
// opens, without an error, the version its valid prefix describes: every
// flush, compaction and ingestion recorded after the damage is gone, and
// with them the rows of the WALs that those flushes let Pebble delete. When
// the files of that older version still exist, nothing in Pebble notices.
//
// The store tells the two apart before Pebble opens (checkManifest):
//
//   - a torn tail is the end of the file: Pebble syncs each record before
//     it writes the next, so no record can start after one a crash cut
//     short. A record start (a valid full or first chunk) anywhere after
//     the first chunk that fails is damage, whatever the crash;
//   - the checkpoint mark records how many bytes of which MANIFEST the
//     store had seen synced when it committed (manifestTail): a valid prefix
//     shorter than that lost edits that a checkpoint relied on, even when
//     nothing valid follows the damage.
//
// Either is refused as corruption naming the MANIFEST, before Pebble has
// read it, so nothing is rewritten or deleted. The mark also cannot be
// taken away with the MANIFEST: it is a file of the store, outside
// Pebble's directory.
//
// The way back is the store's own copy of the MANIFEST (manifestTail
// appends every record it reads to <dir>/MANIFEST-NNNNNN.copy, the copy of
// the current MANIFEST only): RepairManifest puts the copy's bytes back
// where the MANIFEST is damaged, when the result is exactly the MANIFEST
// Pebble wrote — every record valid, the mark's synced bytes covered — and
// refuses otherwise.

const (
	recordBlockSize = 32 << 10
	chunkHeaderLen  = 7

	chunkFull   = 1
	chunkFirst  = 2
	chunkMiddle = 3
	chunkLast   = 4

	// maxManifestFileSize is the MANIFEST size at which Pebble starts a new
	// MANIFEST with a snapshot of the version (once the edits since the last
	// snapshot touched as many files as it lists). It bounds what Open reads
	// twice (checkManifest, then Pebble) and the size of the store's copy.
	maxManifestFileSize = 4 << 20
)

// recordScan is what a scan of a MANIFEST's bytes found.
type recordScan struct {
	// end is the end of the valid prefix: of the last whole record whose
	// chunks all check.
	end int64
	// last is where the valid prefix's last record starts (-1: it has
	// none). Pebble synced every record before it: a record is written
	// only once the one before it is synced.
	last int64
	// records counts the records of the valid prefix.
	records int
	// stop is where the scan stopped: the end of the bytes, or the first
	// chunk that does not check (or that breaks a record off).
	stop int64
}

// scanRecords parses b, the bytes of a MANIFEST from offset from (the start
// of a record, or of the file) to the end of what was read.
func scanRecords(b []byte, from int64) recordScan {
	s := recordScan{end: from, last: -1}
	limit := from + int64(len(b))
	off, start := from, int64(-1) // start: of the record being read
	for {
		if rem := recordBlockSize - off%recordBlockSize; rem < chunkHeaderLen {
			off += rem // zeros: no header fits
		}
		kind, n, ok := chunkAt(b, from, off)
		if !ok {
			break
		}
		next := off + chunkHeaderLen + int64(n)
		switch {
		case (kind == chunkFull || kind == chunkFirst) && start < 0:
			if kind == chunkFirst {
				start = off
				break
			}
			s.end, s.last = next, off
			s.records++
		case (kind == chunkMiddle || kind == chunkLast) && start >= 0:
			if kind == chunkLast {
				s.end, s.last = next, start
				s.records++
				start = -1
			}
		default:
			// A record broken off (a new one starts inside it: the damage
			// is in the record that started, and the new one is valid) or
			// a part of one that never started.
			s.stop = off
			if start >= 0 {
				s.stop = start
			}
			return s
		}
		off = next
	}
	s.stop = min(off, limit)
	return s
}

// chunkAt decodes the chunk header at offset off of the file whose bytes
// from offset from are b; ok is false unless the whole chunk is in b,
// within its block, of a known kind, and its checksum holds.
func chunkAt(b []byte, from, off int64) (kind byte, n int, ok bool) {
	i := off - from
	if i < 0 || i+chunkHeaderLen > int64(len(b)) {
		return 0, 0, false
	}
	sum := binary.LittleEndian.Uint32(b[i:])
	n = int(binary.LittleEndian.Uint16(b[i+4:]))
	kind = b[i+6]
	if kind < chunkFull || kind > chunkLast {
		return 0, 0, false
	}
	end := i + chunkHeaderLen + int64(n)
	if end > int64(len(b)) || off%recordBlockSize+chunkHeaderLen+int64(n) > recordBlockSize {
		return 0, 0, false
	}
	if maskedCRC(b[i+6:end]) != sum {
		return 0, 0, false
	}
	return kind, n, true
}

// maskedCRC is the log format's checksum: crc32c, rotated right by 15
// bits, plus a constant (a CRC of data that holds CRCs is then not itself
// trivially a CRC).
func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// recordStartAfter returns the offset of the first record start (a full
// or first chunk that checks) at or after off in the file whose bytes
// from offset from are b, or -1.
func recordStartAfter(b []byte, from, off int64) int64 {
	for ; off+chunkHeaderLen <= from+int64(len(b)); off++ {
		if k := b[off-from+6]; k != chunkFull && k != chunkFirst {
			continue
		}
		if _, _, ok := chunkAt(b, from, off); ok {
			return off
		}
	}
	return -1
}

// manifestDamage describes the damage a whole MANIFEST's scan found.
type manifestDamage struct {
	size int64
	scan recordScan
	// resumes is the first record start after the damage (-1: none, the
	// rest is a torn tail).
	resumes int64
}

func scanManifest(b []byte) manifestDamage {
	d := manifestDamage{size: int64(len(b)), scan: scanRecords(b, 0), resumes: -1}
	if d.scan.stop < d.size {
		d.resumes = recordStartAfter(b, 0, d.scan.stop+1)
	}
	return d
}

// manifestName is the name of the MANIFEST of file number num.
func manifestName(num uint64) string { return fmt.Sprintf("MANIFEST-%06d", num) }

// parseManifestName returns the file number of a MANIFEST's name.
func parseManifestName(name string) (uint64, bool) {
	s, ok := strings.CutPrefix(name, "MANIFEST-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// currentManifest returns the file number of the MANIFEST Pebble would
// open, from the listing of its directory; ok is false when there is none
// (or Pebble cannot tell, which its Open then reports).
func currentManifest(fs vfs.FS, dbDir string, names []string) (num uint64, ok bool) {
	if len(names) == 0 {
		return 0, false
	}
	marker, name, err := atomicfs.LocateMarkerInListing(fs, dbDir, "manifest", names)
	if err != nil {
		return 0, false
	}
	_ = marker.Close()
	return parseManifestName(name)
}

// listPebbleDir lists Pebble's directory of the store in dir (nil when
// there is none yet).
func listPebbleDir(fs vfs.FS, dir string) ([]string, error) {
	dbDir := fs.PathJoin(dir, pebbleDir)
	names, err := fs.List(dbDir)
	if err != nil && !oserror.IsNotExist(err) {
		return nil, errors.Wrapf(err, "lsmstats: list %s", dbDir)
	}
	return names, nil
}

// readFile reads the whole file at path.
func readFile(fs vfs.FS, path string) ([]byte, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b, nil
}

// checkManifest refuses, before Pebble reads it, a MANIFEST that would
// open an older version than the one Pebble wrote (see above): one with
// records after a damaged one, or one whose valid prefix is shorter than
// what the checkpoint mark says was synced. It returns the file number of
// the MANIFEST (0: none; a new store).
func (s *Store) checkManifest(names []string, m mark, hasMark bool) (uint64, error) {
	dbDir := s.fs.PathJoin(s.dir, pebbleDir)
	num, ok := currentManifest(s.fs, dbDir, names)
	if !ok {
		return 0, nil
	}
	path := s.fs.PathJoin(dbDir, manifestName(num))
	b, err := readFile(s.fs, path)
	if err != nil {
		if oserror.IsNotExist(err) {
			return 0, nil // Pebble's Open names the missing MANIFEST
		}
		return 0, errors.Wrapf(err, "lsmstats: read %s", path)
	}
	d := scanManifest(b)
	if d.resumes >= 0 {
		return 0, s.manifestCorruption(path, m, hasMark, fmt.Sprintf(
			"is damaged at byte %d of %d: the record there fails its checksum and valid records follow it (the "+
				"next starts at byte %d), so Pebble would open the version of its first %d records and lose "+
				"every edit after them", d.scan.stop, d.size, d.resumes, d.scan.records))
	}
	if hasMark && m.manifest != 0 {
		switch {
		case m.manifest > num:
			return 0, s.manifestCorruption(path, m, hasMark, fmt.Sprintf(
				"is older than %s, which the checkpoint mark says the store had written: Pebble's manifest "+
					"marker points back to an older MANIFEST", manifestName(m.manifest)))
		case m.manifest == num && d.scan.end < int64(m.synced):
			return 0, s.manifestCorruption(path, m, hasMark, fmt.Sprintf(
				"holds valid records only up to byte %d of %d, but the checkpoint mark says %d bytes of it "+
					"were synced: Pebble would open the version of its first %d records and lose the edits after "+
					"them", d.scan.end, d.size, m.synced, d.scan.records))
		}
	}
	return num, nil
}

// manifestCorruption is the error of a damaged MANIFEST: what is wrong,
// what the store had committed, and the way back.
func (s *Store) manifestCorruption(path string, m mark, hasMark bool, what string) error {
	msg := fmt.Sprintf("lsmstats: store %s: Pebble's MANIFEST %s %s", s.dir, path, what)
	if hasMark {
		msg += fmt.Sprintf("; the store had committed epoch %d (checkpoint mark %s)", m.epoch, markName)
	}
	if s.fs.PathBase(path) != "" && manifestCopyCovers(s.fs, s.dir, path) {
		msg += "; the store's copy of the MANIFEST can restore it: run `lsmstats repair --dir " + s.dir +
			"` (lsm.RepairManifest), then `lsmstats verify`"
	} else {
		msg += "; the store cannot open it without losing committed rows and must be restored from a copy"
	}
	return lsmstats.Corruptionf("%s", msg)
}

// deferredRemoveFS is the file system Pebble opens with. Until Open
// accepts what Pebble recovered (the committed epoch against the
// checkpoint mark, the metadata), it keeps the files Pebble removes — the
// WALs it replayed and flushed, SSTs and MANIFESTs it found obsolete — and
// removes them once Open accepts the store. A store Open refuses keeps
// every file it had: the rows of a WAL Pebble read only in part, the SSTs
// of the version a damaged MANIFEST lost. Pebble never reuses a file
// number, so no file it creates later has the name of one it removed.
type deferredRemoveFS struct {
	vfs.FS
	held deferredRemovals
}

func newDeferredRemoveFS(fs vfs.FS) *deferredRemoveFS {
	return &deferredRemoveFS{FS: fs, held: deferredRemovals{deferring: true}}
}

// Remove implements vfs.FS.
func (d *deferredRemoveFS) Remove(name string) error {
	if d.held.hold(name) {
		return nil
	}
	return d.FS.Remove(name)
}

// accept removes the files Pebble removed while Open checked, and passes
// removals through from now on. Failures are logged (a file left behind,
// as Pebble's own cleaner leaves one it cannot remove).
func (d *deferredRemoveFS) accept(logger pebble.Logger) {
	for _, name := range d.held.release() {
		if err := d.FS.Remove(name); err != nil && !oserror.IsNotExist(err) {
			logger.Errorf("lsmstats: remove %s: %v", name, err)
		}
	}
}

// deferredRemovals holds the names of what Pebble removed (files or
// objects) while Open checks the store: deferredRemoveFS and
// deferredDeleteStorage remove them once Open accepts it. Safe for
// concurrent use.
type deferredRemovals struct {
	mu        sync.Mutex
	deferring bool
	names     []string
}

// hold keeps name for later and reports true while removals are deferred;
// afterwards it reports false and the caller removes name itself.
func (d *deferredRemovals) hold(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.deferring {
		d.names = append(d.names, name)
	}
	return d.deferring
}

// release ends the deferral and returns the names held.
func (d *deferredRemovals) release() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	names := d.names
	d.names, d.deferring = nil, false
	return names
}

// manifestCopyCovers reports whether the store in dir holds a copy of the
// MANIFEST at path that RepairManifest could restore it from.
func manifestCopyCovers(fs vfs.FS, dir, path string) bool {
	num, ok := parseManifestName(fs.PathBase(path))
	if !ok {
		return false
	}
	_, err := repairedManifest(fs, dir, num)
	return err == nil
}

// RepairManifest restores the damaged MANIFEST of the store in dir from
// the store's own copy of it, and returns whether it did. The store must
// not be open.
//
// The store appends every MANIFEST record it reads to a copy of its own
// (<dir>/MANIFEST-NNNNNN.copy, of the current MANIFEST only; checkpoint.go)
// as it commits and when it closes. The repair takes the copy's bytes and
// the MANIFEST's bytes after them, and writes the result only when it is
// exactly the MANIFEST Pebble wrote: the copy's records all check and
// agree with the MANIFEST's up to its damage, every record of the result
// checks, and it holds every byte the checkpoint mark says was synced. The
// damaged MANIFEST is kept beside the store as MANIFEST-NNNNNN.damaged.
// Run Verify (lsmstats verify) after it.
//
// A MANIFEST that is not damaged is left as it is (false, nil). One that
// the copy cannot restore (no copy, a copy that ends before the damage, a
// damaged copy) is left as it is too, with an error marked
// lsmstats.ErrCorruption: such a store must be restored from a copy of the
// whole store. A path that holds no store is refused with ErrNoStore.
func RepairManifest(dir string, opts *Options) (bool, error) {
	o := opts.withDefaults()
	s := &Store{dir: dir, opts: o, fs: o.FS}
	if err := s.checkExists(); err != nil {
		return false, err
	}
	dbDir := s.fs.PathJoin(dir, pebbleDir)
	names, err := listPebbleDir(s.fs, dir)
	if err != nil {
		return false, err
	}
	num, ok := currentManifest(s.fs, dbDir, names)
	if !ok {
		return false, errors.Wrapf(ErrNoStore, "%s holds no Pebble MANIFEST that Pebble would open", dbDir)
	}
	path := s.fs.PathJoin(dbDir, manifestName(num))
	s.popts = &pebble.Options{Logger: o.Logger}
	m, hasMark, err := s.readMark()
	if err != nil && !lsmstats.IsCorruption(err) {
		return false, err
	}
	switch _, err := s.checkManifest(names, m, hasMark); {
	case err == nil:
		return false, nil
	case !lsmstats.IsCorruption(err):
		return false, err
	}
	repaired, err := repairedManifest(s.fs, dir, num)
	if err != nil {
		return false, err
	}
	if hasMark && m.manifest == num {
		if d := scanManifest(repaired); d.scan.end < int64(m.synced) {
			return false, lsmstats.Corruptionf("lsmstats: the copy of %s restores %d bytes of valid records, but the "+
				"checkpoint mark says %d were synced: the store must be restored from a copy", path, d.scan.end, m.synced)
		}
	}
	// Keep the damaged MANIFEST, then replace it in one rename.
	damaged, err := readFile(s.fs, path)
	if err != nil {
		return false, errors.Wrapf(err, "lsmstats: read %s", path)
	}
	if err := writeFileSynced(s.fs, s.fs.PathJoin(dir, manifestName(num)+".damaged"), damaged); err != nil {
		return false, err
	}
	tmp := s.fs.PathJoin(dbDir, manifestName(num)+".repair")
	if err := writeFileSynced(s.fs, tmp, repaired); err != nil {
		return false, err
	}
	if err := s.fs.Rename(tmp, path); err != nil {
		return false, errors.Wrapf(err, "lsmstats: replace %s", path)
	}
	d, err := s.fs.OpenDir(dbDir)
	if err != nil {
		return false, errors.Wrapf(err, "lsmstats: open %s", dbDir)
	}
	err = errors.CombineErrors(d.Sync(), d.Close())
	return true, errors.Wrapf(err, "lsmstats: sync %s", dbDir)
}

// repairedManifest returns MANIFEST num of the store in dir as the store's
// copy restores it, or an error marked lsmstats.ErrCorruption saying why
// it cannot.
func repairedManifest(fs vfs.FS, dir string, num uint64) ([]byte, error) {
	path := fs.PathJoin(dir, pebbleDir, manifestName(num))
	orig, err := readFile(fs, path)
	if err != nil {
		return nil, errors.Wrapf(err, "lsmstats: read %s", path)
	}
	cpPath := manifestCopyPath(fs, dir, num)
	cp, err := readFile(fs, cpPath)
	switch {
	case oserror.IsNotExist(err):
		return nil, lsmstats.Corruptionf("lsmstats: %s is damaged and the store has no copy of it (%s): "+
			"the store must be restored from a copy", path, cpPath)
	case err != nil:
		return nil, errors.Wrapf(err, "lsmstats: read %s", cpPath)
	}
	if sc := scanRecords(cp, 0); sc.end != int64(len(cp)) {
		return nil, lsmstats.Corruptionf("lsmstats: the copy %s of %s is damaged at byte %d: "+
			"the store must be restored from a copy", cpPath, path, sc.stop)
	}
	od := scanManifest(orig)
	if agree := min(od.scan.end, int64(len(cp))); string(orig[:agree]) != string(cp[:agree]) {
		return nil, lsmstats.Corruptionf("lsmstats: the copy %s differs from %s where both are valid: "+
			"it is no copy of it; the store must be restored from a copy", cpPath, path)
	}
	if int64(len(cp)) <= od.scan.stop && od.resumes >= 0 {
		return nil, lsmstats.Corruptionf("lsmstats: %s is damaged at byte %d, after the %d bytes its copy %s holds: "+
			"the store must be restored from a copy", path, od.scan.stop, len(cp), cpPath)
	}
	repaired := cp
	if len(orig) > len(cp) {
		repaired = append(cp, orig[len(cp):]...)
	}
	if d := scanManifest(repaired); d.resumes >= 0 {
		return nil, lsmstats.Corruptionf("lsmstats: %s is damaged at byte %d, beyond what its copy %s restores "+
			"(%d bytes): the store must be restored from a copy", path, d.scan.stop, cpPath, len(cp))
	}
	return repaired, nil
}

// writeFileSynced writes b to a new file at path and syncs it.
func writeFileSynced(fs vfs.FS, path string, b []byte) error {
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return errors.Wrapf(err, "lsmstats: create %s", path)
	}
	_, err = f.Write(b)
	err = errors.CombineErrors(err, f.Sync())
	err = errors.CombineErrors(err, f.Close())
	return errors.Wrapf(err, "lsmstats: write %s", path)
}
