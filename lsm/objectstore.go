package lsm

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/errors/oserror"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage"
	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats"
	"github.com/lsmstats/lsmstats/objstore"
	"github.com/prometheus/client_golang/prometheus"
)

// A store on an object store (Options.ObjectStore) keeps its SSTs in the
// object store and everything else on local disk: Pebble's WAL, MANIFEST,
// OPTIONS and remote-object catalog, the checkpoint mark, the MANIFEST's
// copy, the staging directory, and the object-store record:
//
//	<dir>/OBJECT-STORE      lines of text, the last one a checksum:
//	    lsmstats object store 1
//	    creator CREATOR
//	    url URL
//	    crc32c XXXXXXXX
//
// CREATOR is the store's creator id in Pebble's shared storage (random,
// never 0: stores that share a bucket and prefix make objects of different
// names), URL the object store's URL without credentials (empty for a
// caller's storage without one), the checksum the crc32c (Castagnoli) of
// the lines before it, in 8 hex digits. Beside the SSTs, the object store
// holds the store's identity marker, an object named
// lsmstats-store-CREATOR whose body is the record's text: Open refuses an
// object store that lacks it (another bucket, another prefix, another
// server), so a store never runs against objects that are not its own.
//
// Creation writes the marker, then the record (synced), then opens Pebble
// and gives it the creator id (DB.SetCreatorID, kept in Pebble's catalog);
// a crash in between leaves a marker without a store, or a record whose
// creator Pebble does not know yet, which the next Open sets. Every Open
// checks, before it calls SetCreatorID, that the objects Pebble's catalog
// lists were made by the record's creator (Pebble refuses another id, and
// panics on one in its invariants builds).

const (
	objectStoreRecordName  = "OBJECT-STORE"
	objectStoreRecordMagic = "lsmstats object store 1"
	// objectStoreLocator is the locator of the store's object store in
	// Pebble's catalog: Pebble keeps it with every remote SST, so it never
	// changes.
	objectStoreLocator = remote.Locator("lsmstats")
	// markerPrefix starts the name of the store's identity marker.
	markerPrefix = "lsmstats-store-"
	// propertiesTail is what the statistics tracker reads at once of a
	// remote SST, at its end: its footer, metaindex and properties block
	// (the statistics payload: a few KiB for an SST of a few vnodes, up
	// to ~1.3 KiB per vnode of a large one), in one GET. Properties that
	// do not fit cost one more GET of the bytes missing; a rebuild from the
	// SST's keys reads it propertiesWindow bytes at a time. verifyWindow is
	// the window of Verify's reads of every block.
	propertiesTail   = 64 << 10
	propertiesWindow = 256 << 10
	verifyWindow     = 8 << 20
	// keptTails bounds the tails of the SSTs the store wrote that it keeps
	// for the statistics (objstore.TailKeeper): 64 tails of
	// propertiesTail, more than a flush or most compactions write before
	// the statistics' next refresh reads them.
	keptTails = 4 << 20
)

// objectStoreRecord is what the record file holds.
type objectStoreRecord struct {
	creator uint64
	url     string
}

func (r objectStoreRecord) encode() []byte {
	return withCRCLine(fmt.Appendf(nil, "%s\ncreator %d\nurl %s\n", objectStoreRecordMagic, r.creator, r.url))
}

func decodeObjectStoreRecord(b []byte) (objectStoreRecord, error) {
	var r objectStoreRecord
	lines, err := checkedLines(b)
	if err != nil {
		return r, err
	}
	if len(lines) != 3 || lines[0] != objectStoreRecordMagic {
		return r, errors.Newf("not a record of this format (%q)", lines[0])
	}
	c, ok := strings.CutPrefix(lines[1], "creator ")
	if !ok {
		return r, errors.Newf("line %q is no creator", lines[1])
	}
	if r.creator, err = strconv.ParseUint(c, 10, 64); err != nil || r.creator == 0 {
		return r, errors.Newf("creator %q is not a positive number", c)
	}
	if r.url, ok = strings.CutPrefix(lines[2], "url "); !ok {
		return r, errors.Newf("line %q is no url", lines[2])
	}
	return r, nil
}

// readObjectStoreRecord reads the record of the store in dir; ok is false
// when it has none.
func readObjectStoreRecord(fs vfs.FS, dir string) (r objectStoreRecord, ok bool, err error) {
	path := fs.PathJoin(dir, objectStoreRecordName)
	f, err := fs.Open(path)
	if oserror.IsNotExist(err) {
		return r, false, nil
	}
	if err != nil {
		return r, false, errors.Wrapf(err, "lsmstats: open %s", path)
	}
	b, err := io.ReadAll(f)
	err = errors.CombineErrors(err, f.Close())
	if err != nil {
		return r, false, errors.Wrapf(err, "lsmstats: read %s", path)
	}
	r, err = decodeObjectStoreRecord(b)
	if err != nil {
		return r, false, lsmstats.MarkCorruption(errors.Wrapf(err, "lsmstats: the object-store record %s is corrupt", path))
	}
	return r, true, nil
}

func markerName(creator uint64) string { return markerPrefix + strconv.FormatUint(creator, 10) }

// objectStore is the object store of an open store.
type objectStore struct {
	// storage is the one Pebble uses: the caller's or the Bucket opened
	// from the URL, whose deletions wait while Open checks the store, and
	// which keeps the last bytes of the SSTs Pebble writes (tails) until
	// the statistics read their properties.
	storage *deferredDeleteStorage
	tails   *objstore.TailKeeper
	// owned is the Bucket the store opened from the URL and closes.
	owned *objstore.Bucket
	// name names the object store in messages: its URL, without
	// credentials.
	name string
	rec  objectStoreRecord
	// create says the store is new: Open writes the record.
	create bool
	// db is the store's Pebble database, once open (setCreator), and
	// foreign says that its catalog lists SSTs of other stores, taken by
	// reference by a vnode move (move.go, sstObject).
	db      *pebble.DB
	foreign atomic.Bool
}

// checker is a remote.Storage that can check that it works (a Bucket).
type checker interface {
	Check(ctx context.Context) error
}

// checkTimeout bounds Open's check of the object store.
const checkTimeout = 30 * time.Second

// prepareObjectStore reads the store's object-store record and checks it
// against the options, before anything is written: a store created with an
// object store is refused without one, and one created without with one.
// With an object store it opens it, checks that it answers (Check) and,
// for an existing store, that it holds the store's identity marker. hasDB
// says that the directory holds a Pebble database. The result is nil for a
// store without an object store.
func (s *Store) prepareObjectStore(hasDB bool, logger pebble.Logger) (*objectStore, error) {
	rec, hasRec, err := readObjectStoreRecord(s.fs, s.dir)
	if err != nil {
		return nil, err
	}
	so := s.opts.ObjectStore
	if so == nil || (so.URL == "" && so.Storage == nil) {
		if hasRec {
			return nil, errors.Newf("lsmstats: store %s keeps its SSTs in the object store %s: open it with that object store "+
				"(lsm.Options.ObjectStore, lsmstats --object-store)", s.dir, recordedName(rec))
		}
		return nil, nil
	}
	o := &objectStore{rec: rec, name: so.URL}
	if !hasRec && hasDB {
		return nil, errors.Newf("lsmstats: store %s keeps its SSTs on local disk (it was created without an object store): "+
			"open it without one, not with %s", s.dir, o.describe())
	}
	storage, name, owned, err := openStorage(so, logger)
	if err != nil {
		return nil, err
	}
	o.name, o.owned = name, owned
	o.tails = objstore.NewTailKeeper(storage, propertiesTail, keptTails, isSSTObject)
	o.storage = newDeferredDeleteStorage(o.tails)
	if err := o.check(s.dir, hasRec); err != nil {
		o.close()
		return nil, err
	}
	if !hasRec {
		if s.opts.ReadOnly {
			o.close()
			return nil, errors.Wrapf(ErrNoStore, "%s holds no store", s.dir)
		}
		o.create = true
		o.rec = objectStoreRecord{creator: newCreatorID(), url: o.name}
	}
	return o, nil
}

// openStorage is the object store of so: its Storage, or a Bucket opened
// from its URL (owned, which the caller closes; its retries logged), and
// its name for messages (the URL without credentials).
func openStorage(so *objstore.StoreOptions, logger pebble.Logger) (st remote.Storage, name string, owned *objstore.Bucket, err error) {
	if so.Storage != nil {
		name = so.URL
		if b, ok := so.Storage.(*objstore.Bucket); ok && name == "" {
			name = b.Config().String()
		}
		return so.Storage, name, nil, nil
	}
	cfg, err := objstore.ParseURL(so.URL)
	if err != nil {
		return nil, "", nil, errors.Wrap(err, "lsmstats")
	}
	cfg.OnRetry = func(err error, attempts int, wait time.Duration) {
		logger.Errorf("lsmstats: object store: attempt %d failed, retrying in %s: %v", attempts, wait.Round(time.Millisecond), err)
	}
	if owned, err = objstore.New(cfg); err != nil {
		return nil, "", nil, errors.Wrap(err, "lsmstats")
	}
	return owned, cfg.String(), owned, nil
}

// recordedName names the object store of a record.
func recordedName(r objectStoreRecord) string {
	if r.url == "" {
		return fmt.Sprintf("of the caller's storage (creator %d)", r.creator)
	}
	return r.url
}

// describe names the object store in a message.
func (o *objectStore) describe() string {
	if o.name == "" {
		return "the caller's object store"
	}
	return "object store " + o.name
}

// check asks the object store whether it works and, for an existing store
// (hasRec), whether it holds the store's identity marker.
func (o *objectStore) check(dir string, hasRec bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	if c, ok := o.tails.Storage.(checker); ok {
		if err := c.Check(ctx); err != nil {
			return errors.Wrapf(err, "lsmstats: store %s: %s does not work", dir, o.describe())
		}
	}
	if !hasRec {
		return nil
	}
	name := markerName(o.rec.creator)
	if _, err := o.storage.Size(name); err != nil {
		if o.storage.IsNotExistError(err) {
			return errors.Newf("lsmstats: store %s: %s does not hold the store's objects (it has no object %s): "+
				"it is not the object store the store was created with, %s", dir, o.describe(), name, recordedName(o.rec))
		}
		return errors.Wrapf(err, "lsmstats: store %s: look for the store's marker %s in %s", dir, name, o.describe())
	}
	return nil
}

// writeRecord makes a new store's identity: its marker in the object store,
// then its record, synced, in dir.
func (o *objectStore) writeRecord(fs vfs.FS, dir string) error {
	body := o.rec.encode()
	w, err := o.storage.CreateObject(markerName(o.rec.creator))
	if err == nil {
		_, err = w.Write(body)
		err = errors.CombineErrors(err, w.Close())
	}
	if err != nil {
		return errors.Wrapf(err, "lsmstats: store %s: write the store's marker %s in %s", dir, markerName(o.rec.creator), o.describe())
	}
	path := fs.PathJoin(dir, objectStoreRecordName)
	tmp := path + ".tmp"
	if err := writeFileSynced(fs, tmp, body); err != nil {
		return err
	}
	if err := fs.Rename(tmp, path); err != nil {
		return errors.Wrapf(err, "lsmstats: rename %s", tmp)
	}
	d, err := fs.OpenDir(dir)
	if err != nil {
		return errors.Wrapf(err, "lsmstats: open %s", dir)
	}
	err = errors.CombineErrors(d.Sync(), d.Close())
	return errors.Wrapf(err, "lsmstats: sync %s", dir)
}

// setPebbleOptions makes Pebble create its SSTs in the object store.
func (o *objectStore) setPebbleOptions(popts *pebble.Options, so *objstore.StoreOptions) {
	popts.Experimental.RemoteStorage = remote.MakeSimpleFactory(map[remote.Locator]remote.Storage{objectStoreLocator: o.storage})
	popts.Experimental.CreateOnShared = so.Levels
	if so.Levels == remote.CreateOnSharedNone {
		popts.Experimental.CreateOnShared = remote.CreateOnSharedAll
	}
	popts.Experimental.CreateOnSharedLocator = objectStoreLocator
	popts.Experimental.SecondaryCacheSizeBytes = so.CacheSize
	popts.Logger = &sizeCheckLogger{Logger: popts.Logger}
}

// sizeCheckLogger is the store's logger as Pebble sees it on an object
// store. Pebble compares the size of a remote SST with the MANIFEST's only
// in its table-statistics job, in the background, and on a mismatch calls
// Logger.Fatalf, which ends the process. An object cut short or
// overwritten in the bucket is bad input, not a reason to end the caller's
// process: the mismatch is logged as an error (once per message), and the
// SST is left to the reads that meet it, which fail with an error marked
// as corruption naming its object (Verify reports it). Pebble's other
// Fatalf calls (a failed WAL or MANIFEST write) pass through. Safe for
// concurrent use.
type sizeCheckLogger struct {
	pebble.Logger
	logged sync.Map // messages logged
}

// Fatalf implements pebble.Logger.
func (l *sizeCheckLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if !strings.Contains(msg, "object size mismatch") {
		l.Logger.Fatalf(format, args...)
		return
	}
	if _, dup := l.logged.LoadOrStore(msg, true); !dup {
		l.Errorf("lsmstats: %s: the SST's object is not the size the MANIFEST records (cut short or overwritten in the object store): it is corrupt", msg)
	}
}

// setCreator checks that the remote objects Pebble's catalog lists were
// made by the record's creator, then (writable stores) gives Pebble the
// creator id: a no-op when its catalog has it.
func (o *objectStore) setCreator(db *pebble.DB, dir string, readOnly bool) error {
	o.db = db
	for _, m := range db.ObjProvider().List() {
		if !m.IsRemote() {
			continue
		}
		// An SST a vnode move took by reference (move.go) is named by its
		// creator's file number, not the store's.
		foreign := db.ObjProvider().IsSharedForeign(m) // Pebble knows it is not its own
		if foreign || m.Remote.CreatorFileNum != m.DiskFileNum {
			o.foreign.Store(true)
		}
		if foreign {
			continue
		}
		if c := uint64(m.Remote.CreatorID); c != o.rec.creator {
			return lsmstats.MarkCorruption(errors.Newf("lsmstats: store %s: Pebble's catalog lists SST %06d of creator %d, "+
				"but the store's record %s names creator %d", dir, uint64(m.DiskFileNum), c, objectStoreRecordName, o.rec.creator))
		}
	}
	if readOnly {
		return nil
	}
	if err := db.SetCreatorID(o.rec.creator); err != nil {
		return errors.Wrapf(err, "lsmstats: store %s: set the creator id %d", dir, o.rec.creator)
	}
	return nil
}

// sweep removes the store's orphaned objects: SSTs of its creator, and
// its reference markers, whose file Pebble's catalog does not list. A
// failed upload leaves such objects (an SST whose marker's PUT failed, a
// PUT that timed out at the client but landed), and so does a deletion
// that failed, or one deferred while Open checked the store; Pebble never
// removes them. The listing comes first: an object it lists was created
// (Pebble adds an object to its catalog before it uploads it), so a file
// Pebble makes meanwhile is never taken for an orphan. It returns the
// objects removed.
func (o *objectStore) sweep(db *pebble.DB) ([]string, error) {
	snap, err := o.sweepSnapshot(db)
	if err != nil {
		return nil, err
	}
	return o.sweepFinish(snap)
}

// sweepState is what a sweep decides on: the object store's listing, then
// the store's catalog (sweepSnapshot); its deletions need neither Pebble
// nor a pause of the store's ingestions (sweepFinish).
type sweepState struct {
	names []string
	// known are the file numbers of the store's remote SSTs (its
	// references' names), own the objects of its creator it uses, by
	// their creator's file numbers (another number than the store's when
	// a vnode move brought one back, move.go).
	known, own map[uint64]bool
}

// sweepSnapshot lists the object store, then the store's catalog.
func (o *objectStore) sweepSnapshot(db *pebble.DB) (sweepState, error) {
	names, err := o.storage.List("", "")
	if err != nil {
		return sweepState{}, err
	}
	me := o.rec.creator
	st := sweepState{names: names, known: map[uint64]bool{}, own: map[uint64]bool{}}
	for _, m := range db.ObjProvider().List() {
		if m.IsRemote() {
			st.known[uint64(m.DiskFileNum)] = true
			if uint64(m.Remote.CreatorID) == me {
				st.own[uint64(m.Remote.CreatorFileNum)] = true
			}
		}
	}
	return st, nil
}

// sweepFinish removes the orphans of a snapshot, keeping the SSTs of the
// store's backups (backup.go): a Restore brings back the catalog that
// lists them.
func (o *objectStore) sweepFinish(st sweepState) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	if err := keepBackedUp(ctx, o.storage, o.rec.creator, st.known, st.own); err != nil {
		return nil, err
	}
	return removeOrphans(o.storage, st.names, o.rec.creator, st.known, st.own)
}

// keepBackedUp adds to known and own (sweep) the SSTs that the backups of
// creator me reference.
func keepBackedUp(ctx context.Context, st remote.Storage, me uint64, known, own map[uint64]bool) error {
	backed, err := backupsOf(ctx, st, me)
	if err != nil {
		return errors.Wrap(err, "read the store's backups")
	}
	for _, b := range backed {
		known[b.num] = true
		if b.creator == me {
			own[b.creatorNum] = true
		}
	}
	return nil
}

// removeOrphans deletes, of the objects names, creator me's reference
// markers whose store file number is not known and its SSTs that it does
// not own and no other store references (sweep).
func removeOrphans(st remote.Storage, names []string, me uint64, known, own map[uint64]bool) ([]string, error) {
	// Objects of the store that another store references stay.
	shared := map[uint64]bool{}
	for _, n := range names {
		if p, ok := objstore.ParseName(n); ok && p.Ref && p.Creator == me && p.RefCreator != me {
			shared[p.FileNum] = true
		}
	}
	// Reference markers before SSTs: an SST whose deletion failed keeps
	// the marker that says whose it is.
	var refs, ssts []string
	for _, n := range names {
		p, ok := objstore.ParseName(n)
		switch {
		case !ok:
			continue
		case p.Ref && (p.RefCreator != me || known[p.RefFileNum]):
			continue
		case !p.Ref && (p.Creator != me || own[p.FileNum] || shared[p.FileNum]):
			continue
		case p.Ref:
			refs = append(refs, n)
		default:
			ssts = append(ssts, n)
		}
	}
	orphans, split := append(refs, ssts...), len(refs)
	removed := make([]bool, len(orphans))
	var err error
	for _, part := range [][2]int{{0, split}, {split, len(orphans)}} {
		err = parallel(part[1]-part[0], func(i int) error {
			n := orphans[part[0]+i]
			if err := st.Delete(n); err != nil {
				return err
			}
			removed[part[0]+i] = true
			return nil
		})
		if err != nil {
			break
		}
	}
	var out []string
	for i, n := range orphans {
		if removed[i] {
			out = append(out, n)
		}
	}
	return out, err
}

// openSST opens backing SST num in the object store for reading outside
// Pebble, with reads of window bytes at a time (objstore.NewReadable). A
// missing object is marked os.ErrNotExist, as a missing local file is.
func (o *objectStore) openSST(ctx context.Context, num uint64, window int64) (objstorage.Readable, error) {
	return o.open(ctx, num, func(name string) (objstorage.Readable, error) {
		return objstore.NewReadable(ctx, o.storage, name, window)
	})
}

// openProperties is openSST for the statistics tracker, which reads an
// SST's properties at its end: its last propertiesTail bytes, kept from
// its upload if the store wrote it since it opened, else in one GET
// (objstore.NewTailReadable: no HEAD on a Bucket), then windows of
// propertiesWindow.
func (o *objectStore) openProperties(ctx context.Context, num uint64) (objstorage.Readable, error) {
	return o.open(ctx, num, func(name string) (objstorage.Readable, error) {
		return objstore.NewTailReadable(ctx, o.tails, name, propertiesTail, propertiesWindow)
	})
}

// isSSTObject says whether an object name is an SST's (not a reference
// marker's, nor the store's identity marker).
func isSSTObject(name string) bool {
	p, ok := objstore.ParseName(name)
	return ok && !p.Ref
}

// open opens SST num's object with openObject, naming the SST and its
// object in an error. A missing object is marked os.ErrNotExist, at the
// open and at every read after it (missingReadable).
func (o *objectStore) open(ctx context.Context, num uint64, openObject func(name string) (objstorage.Readable, error)) (objstorage.Readable, error) {
	name := o.sstObject(num)
	r, err := openObject(name)
	if err != nil {
		missing := o.storage.IsNotExistError(err)
		err = errors.Wrapf(err, "lsmstats: open SST %06d, object %s in %s", num, name, o.describe())
		if missing {
			err = errors.Mark(err, os.ErrNotExist)
		}
		return nil, err
	}
	return &missingReadable{Readable: r, storage: o.storage}, nil
}

// missingReadable is an SST's object opened for reading outside Pebble
// (Verify, the statistics tracker), whose reads mark an object that is
// missing os.ErrNotExist, as the open does. The open is one request (a
// HEAD, or a GET of the SST's tail) and each read past what it fetched is
// another: a compaction that replaces the SST meanwhile deletes its
// object in between, and the reader sees it vanish on a read (a local
// file stays readable once open). The callers take a missing file for
// one a compaction replaced, and list the SSTs again: still listed, it
// is missing for good (corrupt). Safe for concurrent use if the
// Readable is.
type missingReadable struct {
	objstorage.Readable
	storage remote.Storage
}

// ReadAt implements objstorage.Readable.
func (r *missingReadable) ReadAt(ctx context.Context, p []byte, off int64) error {
	err := r.Readable.ReadAt(ctx, p, off)
	if err != nil && r.storage.IsNotExistError(err) && !errors.Is(err, os.ErrNotExist) {
		err = errors.Mark(err, os.ErrNotExist)
	}
	return err
}

// NewReadHandle implements objstorage.Readable: the handle reads through
// ReadAt.
func (r *missingReadable) NewReadHandle(objstorage.ReadBeforeSize) objstorage.ReadHandle {
	h := objstorage.MakeNoopReadHandle(r)
	return &h
}

// objectName names SST num's object in messages.
func (o *objectStore) objectName(num uint64) string {
	return fmt.Sprintf("object %s in %s", o.sstObject(num), o.describe())
}

// ObjectStoreCollector returns the Prometheus collector of the object store
// that the store opened from Options.ObjectStore.URL: its requests, bytes,
// retries and errors by kind, and their latency (objstore.Bucket is the
// collector, lsmstats_objstore_*; register it beside Collector's, under
// labels of the caller's through prometheus.WrapRegistererWith to tell
// several stores apart). Nil for a store on local disk, and for one on a
// caller's Storage, whose collector (if any) is the caller's. It reads the
// counters at each scrape; it is safe for concurrent use.
func (s *Store) ObjectStoreCollector() prometheus.Collector {
	if s.obj == nil || s.obj.owned == nil {
		return nil
	}
	return s.obj.owned
}

// close closes the Bucket the store opened.
func (o *objectStore) close() {
	if o.owned != nil {
		_ = o.owned.Close()
	}
}

// newCreatorID returns a random creator id in [1, 2^63).
func newCreatorID() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if id := binary.BigEndian.Uint64(b[:]) >> 1; id != 0 {
			return id
		}
	}
}

// deferredDeleteStorage is the object store as Pebble sees it: like
// deferredRemoveFS for local files, it keeps the objects Pebble deletes
// while Open checks the store and deletes them once Open accepts it (a
// refused Open deletes nothing). Pebble deletes an SST by deleting its
// reference marker, then the SST once no marker is left: while deletions
// wait, the markers stay, so Pebble keeps the SSTs too, and the sweep
// after Open removes them.
type deferredDeleteStorage struct {
	remote.Storage
	held deferredRemovals
}

func newDeferredDeleteStorage(s remote.Storage) *deferredDeleteStorage {
	return &deferredDeleteStorage{Storage: s, held: deferredRemovals{deferring: true}}
}

// Delete implements remote.Storage.
func (d *deferredDeleteStorage) Delete(name string) error {
	if d.held.hold(name) {
		return nil
	}
	return d.Storage.Delete(name)
}

// accept deletes the objects Pebble deleted while Open checked, and
// passes deletions through from now on. Failures are logged (an object
// left behind, which the next sweep removes).
func (d *deferredDeleteStorage) accept(logger pebble.Logger) {
	for _, name := range d.held.release() {
		if err := d.Storage.Delete(name); err != nil && !d.IsNotExistError(err) {
			logger.Errorf("lsmstats: delete object %s: %v", name, err)
		}
	}
}

// where names SST num's object for a message about the SST, " (object
// NAME in object store URL)", when the SST is not a file in Pebble's
// directory; "" when it is.
func (s *Store) where(num uint64) string {
	if o := s.objectOf(num); o != "" {
		return " (" + o + ")"
	}
	return ""
}

// objectOf names SST num's object, "object NAME in object store URL", when
// the SST is not a file in Pebble's directory; "" when it is.
func (s *Store) objectOf(num uint64) string {
	if s.obj == nil {
		return ""
	}
	if _, err := s.fs.Stat(s.fs.PathJoin(s.dir, pebbleDir, fmt.Sprintf("%06d.sst", num))); err == nil {
		return ""
	}
	return s.obj.objectName(num)
}
