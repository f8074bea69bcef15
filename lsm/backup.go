package lsm

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider/remoteobjcat"
	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/cockroachdb/pebble/v2/record"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats"
)

// Backups. A store on an object store keeps its SSTs there, and on local
// disk only what Pebble needs to find them: its MANIFEST, remote-object
// catalog, OPTIONS, markers and WAL, and the store's object-store record.
// A backup uploads those files, as Pebble's Checkpoint writes them (a
// consistent cut: the MANIFEST up to the version it copied, the catalog,
// the WAL up to its synced end), next to the SSTs; Restore writes them
// back into an empty directory, and the store opens there as it would have
// on its own directory after a crash at the backup: same creator id, same
// SSTs, the committed epoch of the backup. A commit is an ingested SST,
// which the object store holds before the commit returns, or a batch in
// Pebble's WAL (Options.CommitBatchBytes), which the backup carries; a
// backup flushes the memtable into an SST first once the WAL holds
// backupFlushBytes, and uploads a WAL's records, not the rest of a file
// Pebble recycled. So a backup uploads a few KiB to a few hundred KiB
// whatever the store's size: the copy of its MANIFEST (bounded by
// Pebble's MANIFEST rotation), its catalog and OPTIONS, and its WAL.
//
// In the object store, beside the SSTs:
//
//	lsmstats-backup/NAME/CURRENT       the latest backup: text lines
//	    lsmstats backup 1
//	    seq SEQ
//	    creator CREATOR
//	    epoch EPOCH                    the committed epoch
//	    file PATH SIZE CRC32C          one per file, PATH relative to the
//	                                   store's directory (db/MANIFEST-000007)
//	    object FILENUM CREATOR CREATORFILENUM
//	                                   one per remote SST of the catalog
//	    crc32c XXXXXXXX
//	lsmstats-backup/NAME/SEQ/PATH      each file of backup SEQ (none for an
//	                                   empty one: its line says it all)
//
// A backup uploads its files, then replaces CURRENT: a crash at any point
// leaves CURRENT naming a complete backup (or none). The objects of the
// backup before go with the next backup's uploads, in the same parallel
// round. The checksums are crc32c (Castagnoli) in 8 hex digits, of the
// lines before them (CURRENT) or of the file.
//
// The SSTs a backup references must outlive the store's compactions of
// them until the next backup: Pebble's Checkpoint keeps them (it protects
// every remote object of the version it copies, for the life of the
// process, and forgets them once compactions replaced them), and the
// sweep of orphaned objects (objectStore.sweep) keeps the SSTs that the
// store's latest backup references. The sweep runs at Open and every
// backupSweepEvery backups (sweepBackedUp): it removes the SSTs that only
// older backups kept.

const (
	backupRoot    = "lsmstats-backup/"
	backupMagic   = "lsmstats backup 1"
	backupCurrent = "CURRENT"
	// backupFlushBytes bounds the WAL a backup uploads (Backup).
	backupFlushBytes = 256 << 10
	// backupSweepEvery is how many backups a store makes between two
	// sweeps of the SSTs the backups before kept (sweepBackedUp): a sweep
	// lists the whole object store (every store's SSTs on it; 0.2-0.5 s for
	// make demo-cluster's bucket on a local SeaweedFS), and Pebble's
	// compactions leave at most backupSweepEvery backups' SSTs in between.
	backupSweepEvery = 32
)

var (
	// ErrNoBackup is a Restore from an object store that holds no backup of
	// the name asked.
	ErrNoBackup = errors.New("lsmstats: no backup")
	// ErrStoreExists is a Restore into a directory that holds a store.
	ErrStoreExists = errors.New("lsmstats: the directory holds a store")
)

// backupName checks a backup's name: letters, digits, '.', '_' and '-',
// and '/' between them.
var backupName = regexp.MustCompile(`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`)

func checkBackupName(name string) error {
	if !backupName.MatchString(name) || strings.Contains("/"+name+"/", "/../") || strings.Contains("/"+name+"/", "/./") {
		return errors.Newf("lsmstats: backup name %q: want letters, digits, '.', '_' and '-', with '/' between them", name)
	}
	return nil
}

// BackupInfo describes a backup: what Store.Backup uploaded, or what
// Restore wrote.
type BackupInfo struct {
	// Seq numbers the backup among those of its name.
	Seq uint64
	// Epoch is the store's committed epoch in the backup.
	Epoch uint64
	// Files and Bytes count the files of the backup (the SSTs it
	// references are not among them: they are in the object store
	// already), and Objects the remote SSTs it references.
	Files   int
	Bytes   int64
	Objects int
	// Removed counts the SSTs a Restore deleted: those of the store's life
	// after the backup, which it no longer references.
	Removed int
	// Took is how long the backup or the restore took.
	Took time.Duration
}

// backupRecord is a CURRENT: which backup of a name is the latest, and
// what it holds.
type backupRecord struct {
	seq, creator, epoch uint64
	files               []backupFile
	objects             []backupObject
}

type backupFile struct {
	path string
	size int64
	crc  uint32
}

// backupObject is a remote SST of a backup's catalog: its number in the
// store, its creator and its number there.
type backupObject struct {
	num, creator, creatorNum uint64
}

// Backup uploads a backup of the store, named name, to its object store
// (see the comment at the top of backup.go): after it returns, Restore
// brings the store back, at its committed epoch of then or a later one,
// on a new directory. Backups of one name replace each other; a store
// should use a name of its own. A store without an object store is
// refused.
func (s *Store) Backup(ctx context.Context, name string) (BackupInfo, error) {
	if err := s.checkOpen(); err != nil {
		return BackupInfo{}, err
	}
	if s.obj == nil {
		return BackupInfo{}, errors.Newf("lsmstats: backup of %s: the store keeps its SSTs on local disk; a backup needs an object store", s.dir)
	}
	if s.opts.ReadOnly {
		return BackupInfo{}, errors.Wrapf(ErrReadOnly, "backup of %s", s.dir)
	}
	if err := checkBackupName(name); err != nil {
		return BackupInfo{}, err
	}
	start := time.Now()
	s.backupMu.Lock()
	defer s.backupMu.Unlock()
	st := s.obj.storage.Storage
	prefix := backupRoot + name + "/"
	if s.backupSeq == 0 || s.backupName != name {
		cur, err := readBackupCurrent(ctx, st, prefix)
		switch {
		case errors.Is(err, ErrNoBackup):
			s.backupSeq = 0
		case err != nil:
			// A damaged CURRENT is replaced by this backup.
			s.logf("lsmstats: backup %s: %v; writing a new one", name, err)
			s.backupSeq = uint64(time.Now().UnixNano())
		default:
			s.backupSeq = cur.seq
		}
		s.backupName, s.backupOld, s.backupLast, s.backupListed = name, nil, nil, false
	}
	seq := s.backupSeq + 1

	// Pebble's checkpoint into the staging directory, under ingestMu: no
	// commit lands meanwhile, so its epoch is the committed one.
	tmp := s.fs.PathJoin(s.staging, fmt.Sprintf("backup-%d", seq))
	if err := s.fs.RemoveAll(tmp); err != nil {
		return BackupInfo{}, errors.Wrapf(err, "lsmstats: backup %s", name)
	}
	defer func() { _ = s.fs.RemoveAll(tmp) }()
	s.ingestMu.Lock()
	if s.closed.Load() {
		s.ingestMu.Unlock()
		return BackupInfo{}, ErrClosed
	}
	// Commits below Options.CommitBatchBytes go through Pebble's WAL: a
	// WAL past backupFlushBytes is flushed into an SST (in the object
	// store) rather than uploaded again with every backup.
	var err error
	if s.db.Metrics().WAL.Size > backupFlushBytes {
		err = s.flushMemtable()
	}
	epoch := s.committed.Load()
	if err == nil {
		// No WithFlushedWAL: every commit's batch was synced.
		err = s.db.Checkpoint(tmp)
	}
	s.ingestMu.Unlock()
	if err != nil {
		return BackupInfo{}, errors.Wrapf(err, "lsmstats: backup %s: checkpoint %s", name, s.dir)
	}
	idx := backupRecord{seq: seq, creator: s.obj.rec.creator, epoch: epoch}
	objs, err := catalogObjects(s.fs, tmp)
	if err != nil {
		return BackupInfo{}, errors.Wrapf(err, "lsmstats: backup %s", name)
	}
	idx.objects = objs

	// The files: the object-store record, then Pebble's.
	names, err := s.fs.List(tmp)
	if err != nil {
		return BackupInfo{}, errors.Wrapf(err, "lsmstats: backup %s", name)
	}
	slices.Sort(names)
	type local struct{ path, rel string }
	files := []local{{s.fs.PathJoin(s.dir, objectStoreRecordName), objectStoreRecordName}}
	for _, n := range names {
		files = append(files, local{s.fs.PathJoin(tmp, n), pebbleDir + "/" + n})
	}
	info := BackupInfo{Seq: seq, Epoch: epoch, Objects: len(objs)}
	bodies := make([][]byte, len(files))
	for i, f := range files {
		b, err := readFile(s.fs, f.path)
		if err != nil {
			return BackupInfo{}, errors.Wrapf(err, "lsmstats: backup %s", name)
		}
		if num, ok := walNum(f.rel); ok {
			b = walRecords(b, num)
		}
		bodies[i] = b
		idx.files = append(idx.files, backupFile{path: f.rel, size: int64(len(b)), crc: crc32.Checksum(b, castagnoli)})
		info.Files++
		info.Bytes += int64(len(b))
	}
	// The files at once (an empty one, as Pebble's markers are, is its
	// line in CURRENT only), and meanwhile the objects of the backups
	// before the one CURRENT names (backupOld); then CURRENT.
	var objects []string
	for i, f := range files {
		if len(bodies[i]) > 0 {
			objects = append(objects, backupObjectName(prefix, seq, f.rel))
		}
	}
	old := s.backupOld
	var failed []string
	var mu sync.Mutex
	var delErr error
	err = parallel(len(files)+len(old), func(i int) error {
		if i >= len(files) {
			n := old[i-len(files)]
			if err := st.Delete(n); err != nil && !st.IsNotExistError(err) {
				mu.Lock()
				failed, delErr = append(failed, n), errors.CombineErrors(delErr, err)
				mu.Unlock()
			}
			return nil
		}
		if len(bodies[i]) == 0 {
			return nil
		}
		return errors.Wrapf(putObject(st, backupObjectName(prefix, seq, files[i].rel), bodies[i]), "upload %s", files[i].rel)
	})
	s.backupOld = failed
	if delErr != nil {
		s.logf("lsmstats: backup %s: remove %d objects of older backups: %v", name, len(failed), delErr)
	}
	// A failed backup's number is not used again: its objects may be
	// deleted while the next backup uploads.
	s.backupSeq = seq
	if err != nil {
		// CURRENT does not name this backup: its objects go with the next
		// backup's.
		s.backupOld = append(s.backupOld, objects...)
		return BackupInfo{}, errors.Wrapf(err, "lsmstats: backup %s", name)
	}
	if err := putObject(st, prefix+backupCurrent, idx.encode()); err != nil {
		// A write that failed at the client may have landed: CURRENT may
		// name this backup, whose objects then stay until a later CURRENT
		// replaces it, as the last backup's do.
		s.backupLast = append(s.backupLast, objects...)
		return BackupInfo{}, errors.Wrapf(err, "lsmstats: backup %s: upload %s", name, backupCurrent)
	}
	// The previous backup's objects go with the next backup's uploads; at
	// the first backup of the name, every object of an older life of it.
	s.backupOld = append(s.backupOld, s.backupLast...)
	s.backupLast = objects
	if !s.backupListed {
		names, err := st.List(prefix, "")
		if err != nil {
			s.logf("lsmstats: backup %s: list older backups: %v", name, err)
		}
		keep := strconv.FormatUint(seq, 10) + "/"
		for _, n := range names {
			if n != backupCurrent && !strings.HasPrefix(n, keep) {
				s.backupOld = append(s.backupOld, prefix+n)
			}
		}
		s.backupListed = err == nil
	}
	s.metrics.backups.Add(1)
	s.metrics.backupBytes.Add(info.Bytes)
	s.backupsSinceSweep++
	if s.backupsSinceSweep >= backupSweepEvery {
		s.sweepBackedUp()
	}
	info.Took = time.Since(start)
	return info, nil
}

// sweepBackedUp removes the SSTs that Pebble's Checkpoint kept for the
// backups before the last, once compactions replaced them: the sweep of
// Open (objectStore.sweep), while the store runs. It waits for a store
// that holds an export (whose SSTs another store is about to reference)
// and lists the object store and the catalog under ingestMu, so that no
// import attaches another store's SSTs in between; flushes and
// compactions may run, as at Open. A failure is logged: the objects wait
// for the next sweep.
func (s *Store) sweepBackedUp() {
	s.mu.Lock()
	exports := len(s.mu.exports)
	s.mu.Unlock()
	if exports > 0 {
		return
	}
	// The listing and the catalog under ingestMu; the deletions after.
	s.ingestMu.Lock()
	if s.closed.Load() {
		s.ingestMu.Unlock()
		return
	}
	s.backupsSinceSweep = 0
	snap, err := s.obj.sweepSnapshot(s.db)
	s.ingestMu.Unlock()
	var removed []string
	if err == nil {
		removed, err = s.obj.sweepFinish(snap)
	}
	if err != nil {
		s.logf("lsmstats: %s: remove the SSTs of older backups from %s: %v", s.dir, s.obj.describe(), err)
	}
	s.metrics.backupSwept.Add(int64(len(removed)))
}

// Restore writes the latest backup named name in the object store of
// opts into dir, which must hold no store (ErrStoreExists; an empty or
// missing directory is fine), and returns what it wrote; Open then opens
// the store there. ErrNoBackup says the object store holds no backup of
// that name. A file that does not match the backup's CURRENT is refused
// with an error marked lsmstats.ErrCorruption that names it. A crash or
// an error leaves no store in dir (the files are written into a
// directory beside, then renamed): Restore can be run again.
func Restore(ctx context.Context, dir string, opts *Options, name string) (BackupInfo, error) {
	start := time.Now()
	if err := checkBackupName(name); err != nil {
		return BackupInfo{}, err
	}
	o := opts.withDefaults()
	fs := o.FS
	if o.ObjectStore == nil || (o.ObjectStore.URL == "" && o.ObjectStore.Storage == nil) {
		return BackupInfo{}, errors.Newf("lsmstats: restore %s into %s: no object store (lsm.Options.ObjectStore)", name, dir)
	}
	probe := &Store{dir: dir, fs: fs}
	if err := probe.checkExists(); err == nil {
		return BackupInfo{}, errors.Wrapf(ErrStoreExists, "restore %s into %s", name, dir)
	} else if !errors.Is(err, ErrNoStore) {
		return BackupInfo{}, err
	}
	tmp := fs.PathJoin(dir, "restoring")
	if _, err := fs.Stat(fs.PathJoin(dir, objectStoreRecordName)); err == nil {
		// A record without a Pebble directory: a Restore that stopped
		// between its two renames, or not a store of Restore's.
		if _, err := fs.Stat(tmp); err != nil {
			return BackupInfo{}, errors.Wrapf(ErrStoreExists, "restore %s into %s: it holds an object-store record (%s) without a Pebble database", name, dir, objectStoreRecordName)
		}
		if err := fs.Remove(fs.PathJoin(dir, objectStoreRecordName)); err != nil {
			return BackupInfo{}, errors.Wrapf(err, "lsmstats: restore %s", name)
		}
	}
	st, where, owned, err := openStorage(o.ObjectStore, o.Logger)
	if err != nil {
		return BackupInfo{}, err
	}
	if owned != nil {
		defer func() { _ = owned.Close() }()
	}
	prefix := backupRoot + name + "/"
	idx, err := readBackupCurrent(ctx, st, prefix)
	if err != nil {
		return BackupInfo{}, errors.Wrapf(err, "restore %s from %s", name, where)
	}
	info := BackupInfo{Seq: idx.seq, Epoch: idx.epoch, Objects: len(idx.objects)}
	// The objects of the store's life after the backup go first: its SSTs
	// the backup does not reference. Pebble, opened on the backup, would
	// make SSTs of the same numbers again, and the sweep at Open could
	// take one of those for the orphan of the same name it listed.
	names, err := st.List("", "")
	if err != nil {
		return BackupInfo{}, errors.Wrapf(err, "lsmstats: restore %s from %s: list the objects", name, where)
	}
	known, own := map[uint64]bool{}, map[uint64]bool{}
	if err := keepBackedUp(ctx, st, idx.creator, known, own); err != nil {
		return BackupInfo{}, errors.Wrapf(err, "lsmstats: restore %s from %s", name, where)
	}
	removed, err := removeOrphans(st, names, idx.creator, known, own)
	if err != nil {
		return BackupInfo{}, errors.Wrapf(err, "lsmstats: restore %s from %s: remove the SSTs made after the backup", name, where)
	}
	info.Removed = len(removed)
	// Into dir/restoring, then each top-level entry renamed into dir.
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return BackupInfo{}, errors.Wrapf(err, "lsmstats: restore %s", name)
	}
	if err := fs.RemoveAll(tmp); err != nil {
		return BackupInfo{}, errors.Wrapf(err, "lsmstats: restore %s", name)
	}
	if err := fs.MkdirAll(fs.PathJoin(tmp, pebbleDir), 0o755); err != nil {
		return BackupInfo{}, errors.Wrapf(err, "lsmstats: restore %s", name)
	}
	bodies := make([][]byte, len(idx.files))
	err = parallel(len(idx.files), func(i int) error {
		f := idx.files[i]
		if f.size == 0 {
			bodies[i] = []byte{}
			return nil
		}
		obj := backupObjectName(prefix, idx.seq, f.path)
		b, err := getObject(ctx, st, obj)
		if err != nil {
			return errors.Wrapf(err, "lsmstats: restore %s from %s: read %s", name, where, obj)
		}
		bodies[i] = b
		return nil
	})
	if err != nil {
		return BackupInfo{}, err
	}
	for i, f := range idx.files {
		b := bodies[i]
		if int64(len(b)) != f.size || crc32.Checksum(b, castagnoli) != f.crc {
			return BackupInfo{}, lsmstats.MarkCorruption(errors.Newf("lsmstats: restore %s from %s: object %s has %d bytes of crc32c %08x, its backup's CURRENT says %d of %08x",
				name, where, backupObjectName(prefix, idx.seq, f.path), len(b), crc32.Checksum(b, castagnoli), f.size, f.crc))
		}
		if err := writeFileSynced(fs, fs.PathJoin(tmp, f.path), b); err != nil {
			return BackupInfo{}, err
		}
		info.Files++
		info.Bytes += int64(len(b))
	}
	// The record first, Pebble's directory last: until the second rename
	// dir holds no store, and a Restore run again takes the record left
	// beside the restoring directory for its own.
	for _, rel := range []string{objectStoreRecordName, pebbleDir} {
		if err := fs.Rename(fs.PathJoin(tmp, rel), fs.PathJoin(dir, rel)); err != nil {
			return BackupInfo{}, errors.Wrapf(err, "lsmstats: restore %s", name)
		}
	}
	if err := fs.RemoveAll(tmp); err != nil {
		return BackupInfo{}, errors.Wrapf(err, "lsmstats: restore %s", name)
	}
	if d, err := fs.OpenDir(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	info.Took = time.Since(start)
	return info, nil
}

// backupWidth bounds the requests a backup or a restore has in flight.
const backupWidth = 16

// parallel calls f(0), ..., f(n-1), backupWidth at a time, and returns
// their errors combined.
func parallel(n int, f func(i int) error) error {
	errs := make([]error, n)
	sem := make(chan struct{}, backupWidth)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	var err error
	for _, e := range errs {
		err = errors.CombineErrors(err, e)
	}
	return err
}

// walNum parses the file number of a WAL's path in a backup,
// db/NNNNNN.log.
func walNum(rel string) (uint64, bool) {
	name, ok := strings.CutPrefix(rel, pebbleDir+"/")
	if !ok {
		return 0, false
	}
	if name, ok = strings.CutSuffix(name, ".log"); !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(name, 10, 64)
	return n, err == nil
}

// walRecords cuts a WAL's copy after its last whole record. Pebble
// recycles WAL files: a file past its records holds those of the log it
// was before, which Pebble's reader tells apart by their log number and
// takes for the end. Checkpoint copies the whole file; the backup uploads
// the records only.
func walRecords(b []byte, num uint64) []byte {
	r := newRecordReader(record.NewReader, bytes.NewReader(b), num)
	end := int64(0)
	for {
		rr, err := r.Next()
		if err != nil {
			break
		}
		if _, err := io.Copy(io.Discard, rr); err != nil {
			break
		}
		end = r.Offset()
	}
	return b[:end]
}

// newRecordReader calls record.NewReader (passed as newReader), whose
// file number's type is in a package of Pebble's that is internal.
func newRecordReader[N ~uint64](newReader func(io.Reader, N) *record.Reader, r io.Reader, num uint64) *record.Reader {
	return newReader(r, N(num))
}

// backupsOf returns the remote SSTs that the backups of creator in st
// reference (the sweep keeps them).
func backupsOf(ctx context.Context, st remote.Storage, creator uint64) ([]backupObject, error) {
	names, err := st.List(backupRoot, "")
	if err != nil {
		return nil, err
	}
	var objs []backupObject
	for _, n := range names {
		prefix, ok := strings.CutSuffix(n, "/"+backupCurrent)
		if !ok {
			continue
		}
		prefix = backupRoot + prefix + "/"
		cur, err := readBackupCurrent(ctx, st, prefix)
		if err != nil {
			return nil, err
		}
		if cur.creator == creator {
			objs = append(objs, cur.objects...)
		}
	}
	return objs, nil
}

// catalogObjects lists the remote SSTs of the catalog in a checkpoint's
// directory.
func catalogObjects(fs vfs.FS, dir string) ([]backupObject, error) {
	cat, contents, err := remoteobjcat.Open(fs, dir)
	if err != nil {
		return nil, errors.Wrapf(err, "read the remote-object catalog of %s", dir)
	}
	defer func() { _ = cat.Close() }()
	objs := make([]backupObject, 0, len(contents.Objects))
	for _, m := range contents.Objects {
		objs = append(objs, backupObject{num: uint64(m.FileNum), creator: uint64(m.CreatorID), creatorNum: uint64(m.CreatorFileNum)})
	}
	return objs, nil
}

func backupObjectName(prefix string, seq uint64, rel string) string {
	return prefix + strconv.FormatUint(seq, 10) + "/" + rel
}

// readBackupCurrent reads and decodes a name's CURRENT (ErrNoBackup if
// there is none).
func readBackupCurrent(ctx context.Context, st remote.Storage, prefix string) (backupRecord, error) {
	b, err := getObject(ctx, st, prefix+backupCurrent)
	if err != nil {
		if st.IsNotExistError(err) {
			return backupRecord{}, errors.Wrapf(ErrNoBackup, "no object %s", prefix+backupCurrent)
		}
		return backupRecord{}, errors.Wrapf(err, "lsmstats: read %s", prefix+backupCurrent)
	}
	x, err := decodeBackupRecord(b)
	if err != nil {
		return x, errors.Wrapf(err, "object %s", prefix+backupCurrent)
	}
	return x, nil
}

func (x *backupRecord) encode() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\nseq %d\ncreator %d\nepoch %d\n", backupMagic, x.seq, x.creator, x.epoch)
	for _, f := range x.files {
		fmt.Fprintf(&b, "file %s %d %08x\n", f.path, f.size, f.crc)
	}
	for _, o := range x.objects {
		fmt.Fprintf(&b, "object %d %d %d\n", o.num, o.creator, o.creatorNum)
	}
	return withCRCLine(b.Bytes())
}

func decodeBackupRecord(b []byte) (backupRecord, error) {
	var x backupRecord
	lines, err := checkedLines(b)
	if err == nil && (len(lines) < 4 || lines[0] != backupMagic) {
		err = errors.New("not a backup's CURRENT")
	}
	if err == nil {
		x.seq, err = field(lines[1], "seq")
	}
	if err == nil {
		x.creator, err = field(lines[2], "creator")
	}
	if err == nil {
		x.epoch, err = field(lines[3], "epoch")
	}
	for i := 4; err == nil && i < len(lines); i++ {
		w := strings.Fields(lines[i])
		switch {
		case len(w) == 4 && w[0] == "file":
			f := backupFile{path: w[1]}
			var crc uint64
			f.size, err = strconv.ParseInt(w[2], 10, 64)
			if err == nil {
				crc, err = strconv.ParseUint(w[3], 16, 32)
			}
			if err == nil && (strings.Contains("/"+f.path+"/", "/../") || strings.HasPrefix(f.path, "/") || f.size < 0) {
				err = errors.Newf("file path %q", f.path)
			}
			f.crc = uint32(crc)
			x.files = append(x.files, f)
		case len(w) == 4 && w[0] == "object":
			var o backupObject
			o.num, err = strconv.ParseUint(w[1], 10, 64)
			if err == nil {
				o.creator, err = strconv.ParseUint(w[2], 10, 64)
			}
			if err == nil {
				o.creatorNum, err = strconv.ParseUint(w[3], 10, 64)
			}
			x.objects = append(x.objects, o)
		default:
			err = errors.Newf("line %d: %q", i+1, lines[i])
		}
	}
	if err != nil {
		return x, lsmstats.MarkCorruption(errors.Wrap(err, "lsmstats: backup"))
	}
	return x, nil
}

// withCRCLine appends the line "crc32c XXXXXXXX" of b's checksum: the
// text files of a store (OBJECT-STORE, a backup's CURRENT) end with it.
func withCRCLine(b []byte) []byte {
	return fmt.Appendf(b, "crc32c %08x\n", crc32.Checksum(b, castagnoli))
}

// checkedLines checks b's last line, its checksum, and returns the lines
// before it.
func checkedLines(b []byte) ([]string, error) {
	body := bytes.TrimSuffix(b, []byte("\n"))
	i := bytes.LastIndexByte(body, '\n')
	if i < 0 {
		return nil, errors.New("no checksum line")
	}
	var want uint32
	if _, err := fmt.Sscanf(string(body[i+1:]), "crc32c %08x", &want); err != nil {
		return nil, errors.Newf("checksum line %q", body[i+1:])
	}
	if got := crc32.Checksum(b[:i+1], castagnoli); got != want {
		return nil, errors.Newf("checksum %08x, its contents' %08x", want, got)
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b[:i+1]))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines, sc.Err()
}

func field(line, name string) (uint64, error) {
	v, ok := strings.CutPrefix(line, name+" ")
	if !ok {
		return 0, errors.Newf("line %q: want %s", line, name)
	}
	return strconv.ParseUint(v, 10, 64)
}

func putObject(st remote.Storage, name string, b []byte) error {
	w, err := st.CreateObject(name)
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		_ = w.Close()
		return err
	}
	return w.Close()
}

func getObject(ctx context.Context, st remote.Storage, name string) ([]byte, error) {
	r, size, err := st.ReadObject(ctx, name)
	if err != nil {
		return nil, err
	}
	defer func() { _ = r.Close() }()
	b := make([]byte, size)
	if size > 0 {
		if err := r.ReadAt(ctx, b, 0); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
	}
	return b, nil
}
