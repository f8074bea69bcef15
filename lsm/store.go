package lsm

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/errors/oserror"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats"
	"github.com/lsmstats/lsmstats/internal/livebuckets"
	"github.com/lsmstats/lsmstats/internal/ssttracker"
	"github.com/lsmstats/lsmstats/keys"
)

// FormatVersion is the store format this library writes. Open refuses a
// store whose format_version is newer. Version 3 (the delta log's rows
// compressed, docs/format.md) reads stores of versions 1 (no delta log)
// and 2: a writable Open rewrites their live-statistics rows in the
// current layout (version 1's bucket rows, version 2's log rows) and their
// format_version, in one ingestion; a read-only Open reads them as they
// are.
const FormatVersion = 3

// formatMinor is the minor format version this library writes within
// FormatVersion (docs/format.md, "Versioning rules"). A minor version only
// adds metadata rows and trailing value fields that older readers may
// ignore: a store of a newer minor version opens read-only (its rows of
// names this library does not know are kept and ignored) and is refused for
// writing, since the writer would not maintain what it does not know. In a
// store of this minor version or an older one, a metadata row of a name
// this library does not know (keys.KnownMetaName) is corruption.
const formatMinor = 0

const (
	pebbleDir  = "db"
	stagingDir = "staging"

	hwmName = keys.EpochHWMName
)

// Store is a Hummock-like MVCC state store on Pebble. It is safe for
// concurrent use; each Writer is used by one goroutine at a time.
type Store struct {
	dir     string
	opts    Options
	fs      vfs.FS
	staging string

	db      *pebble.DB
	popts   *pebble.Options
	tracker *ssttracker.Tracker
	// obj is the object store of the store's SSTs (objectstore.go); nil
	// for a store on local disk only.
	obj *objectStore
	// spans says where SSTs end, Pebble's and the store's: at tables and
	// at the vnode partitions of the tables partitionLarge picked.
	spans sstSpans
	// flushFailures counts the flushes that failed, and flushErr holds the
	// last one's error (waitForMemtable, flushMemtable).
	flushFailures atomic.Int64
	flushErr      atomic.Pointer[error]
	// compactErr holds the error of the last compaction if it failed (nil
	// after one that succeeded): the cause a stall names.
	compactErr atomic.Pointer[error]
	// busy measures the time Pebble's flushes and compactions run
	// (Background).
	busy backgroundWork
	// wopts are the options of every SST the store writes for ingestion
	// (with the stats collector); spillOpts those of staged spills.
	wopts, spillOpts sstable.WriterOptions

	// statsMu pairs the physical and live statistics of one checkpoint.
	statsMu sync.RWMutex
	// pebbleMetricsMu keeps Close from closing Pebble while counters reads
	// its metrics (a scrape may come at any time).
	pebbleMetricsMu sync.Mutex
	// ingestMu serialises everything that ingests (commits, spills that raise
	// the high-water mark, catalog changes) and every spill.
	ingestMu sync.Mutex
	// l0 remembers, under ingestMu, that the last L0 wait gave up and how
	// many compactions had succeeded by then (see waitForL0).
	l0 struct {
		gaveUp      bool
		compactions int64
	}

	mu struct {
		sync.Mutex
		closed  bool
		catalog map[uint32]*TableDef
		writers map[*Writer]struct{}
		// orphans are sealed epochs of closed writers, still to commit.
		orphans []*epochBuf
		pins    map[uint64]int
		live    *livebuckets.State
		// hwm is the durable epoch high-water mark.
		hwm uint64
		// gcEpoch is the garbage-collection watermark: reads below it are
		// refused. GC raises it with each ingestion (gc.go).
		gcEpoch uint64
		// gcPending is the safe epoch of the GC pass in progress (0: none):
		// pins below it are refused before its deletions land.
		gcPending uint64
		// moving are the vnodes of each table that a vnode move (or a
		// drop) works on: no writer may take them (move.go).
		moving map[uint32]*roaring.Bitmap
		// exports are the exports of the store not released yet, whose
		// vnodes are in moving (export.go).
		exports map[*VnodeExport]struct{}
	}
	// gc serialises GC passes and manual compactions and lets Close stop
	// them (gc.go).
	gc        gcState
	committed atomic.Uint64
	// movingIn is set while a vnode move ingests into the store (move.go).
	movingIn atomic.Bool
	// closed mirrors mu.closed for the hot paths: iterators (read.go) and
	// every writer op (checkWritable). failed is the fault that stopped
	// writes, if any.
	closed atomic.Bool
	failed atomic.Pointer[error]
	// pub is the committed epoch with the generation of its ingestion.
	pub   atomic.Pointer[published]
	iters iterPool
	// floor is the epoch every new epoch must exceed: max(committed, hwm)
	// as of Open.
	floor uint64
	// buffered is the memory held by all writers' buffers.
	buffered atomic.Int64
	fileSeq  atomic.Uint64
	metrics  storeMetrics
	// mark is the checkpoint mark, open for writing (checkpoint.go); nil
	// until the first write, and on a read-only store.
	mark vfs.File
	// manifestNum is the file number of Pebble's current MANIFEST (from
	// Open, then Pebble's ManifestCreated events), and tail follows it for
	// the mark (checkpoint.go).
	manifestNum atomic.Uint64
	tail        manifestTail
	// markDamaged is the error of a checkpoint mark Open found damaged.
	markDamaged error
	// corruptMeta are the metadata rows a read-only Open left out because
	// they do not decode (Verify reports them).
	corruptMeta []error
	// liveLeftOut are the vnodes whose live-statistics rows a read-only
	// Open left out (vnode -1: a row of the table that names no vnode): their
	// live counts are incomplete (LiveIncomplete).
	liveLeftOut map[uint32]map[int]bool
	// backupMu serialises backups; backupName is the name of the last and
	// backupSeq its number (backup.go).
	backupMu   sync.Mutex
	backupName string
	backupSeq  uint64
	// backupLast are the objects of the last backup, backupOld those of
	// the backups before it, still to delete, and backupListed says that
	// the first backup of backupName listed the older ones of another life
	// of the name.
	backupLast   []string
	backupOld    []string
	backupListed bool
	// backupsSinceSweep counts the backups since the last sweep.
	backupsSinceSweep int
	// hooks let tests observe the store; nil functions are skipped.
	hooks struct {
		// phase is called when a spill starts ("spilling") and ends
		// ("buffering"), and when a commit starts ("committing").
		phase func(string)
	}
}

func (s *Store) phase(p string) {
	if s.hooks.phase != nil {
		s.hooks.phase(p)
	}
}

type storeMetrics struct {
	commits, spills, spilledBytes, stalls atomic.Int64
	// committedBytes counts the in-memory bytes of the buffers the
	// checkpoints committed (spilled bytes are counted in spilledBytes).
	committedBytes              atomic.Int64
	stallsAbandoned, stallNanos atomic.Int64
	pebbleStalls                atomic.Int64
	bucketScans, bucketScanRows atomic.Int64
	corruptions                 atomic.Int64
	// backups, backupBytes and backupSwept count the backups, their bytes
	// and the objects the sweeps between backups removed.
	backups, backupBytes, backupSwept atomic.Int64
	// checksAnswered counts the checked ops whose pk the live statistics
	// proved not live, without a read (Writer.checkLocked).
	checksAnswered atomic.Int64
}

// Open opens (or creates) the store in dir. A nil opts means the defaults.
// With Options.ReadOnly or Options.MustExist, a path that holds no store is
// refused with ErrNoStore; a store of a newer format is refused with
// ErrFormatTooNew, and one written with another comparer with Pebble's
// error naming both comparers.
func Open(dir string, opts *Options) (*Store, error) {
	o := opts.withDefaults()
	s := &Store{dir: dir, opts: o, fs: o.FS, staging: o.FS.PathJoin(dir, stagingDir)}
	s.hooks.phase = o.OnPhase
	s.mu.catalog = map[uint32]*TableDef{}
	s.mu.writers = map[*Writer]struct{}{}
	s.mu.pins = map[uint64]int{}
	s.mu.moving = map[uint32]*roaring.Bitmap{}
	s.mu.exports = map[*VnodeExport]struct{}{}
	s.mu.live = livebuckets.NewState()
	s.mu.live.SetBucketBudget(o.StatsBucketBudget)
	s.gc.closing = make(chan struct{})

	if o.MustExist {
		if err := s.checkExists(); err != nil {
			return nil, err
		}
	}
	// What the store committed, against what Pebble is about to recover:
	// a MANIFEST that would open an older version is refused before Pebble
	// reads it, or the store changes anything, and Pebble's removals wait
	// until Open accepts the rest (checkpoint.go, manifest.go).
	names, err := listPebbleDir(s.fs, dir)
	if err != nil {
		return nil, err
	}
	m, hasMark, err := s.openMark(o.Logger)
	if err != nil {
		return nil, err
	}
	num, err := s.checkManifest(names, m, hasMark)
	if err != nil {
		return nil, err
	}
	s.manifestNum.Store(num)
	logger := o.Logger
	if logger == nil {
		logger = pebble.DefaultLogger
	}
	hasDB := slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "MANIFEST-") })
	obj, err := s.prepareObjectStore(hasDB, logger)
	if err != nil {
		return nil, err
	}
	s.obj = obj
	opened := false
	defer func() {
		if !opened && obj != nil {
			obj.close()
		}
	}()
	if o.ReadOnly {
		ro := errors.Wrapf(ErrReadOnly, "store %s", dir)
		s.failed.Store(&ro)
	} else {
		if err := s.fs.MkdirAll(dir, 0o755); err != nil {
			return nil, errors.Wrapf(err, "lsmstats: create %s", dir)
		}
		// Staged spills and unfinished commit outputs belong to epochs that
		// did not commit: they must not survive a restart.
		if err := s.resetStaging(); err != nil {
			return nil, err
		}
		if obj != nil && obj.create {
			if err := obj.writeRecord(s.fs, dir); err != nil {
				return nil, err
			}
		}
	}

	popts := o.pebbleOptions()
	tcfg := ssttracker.TrackerConfig{
		Dir:           s.fs.PathJoin(dir, pebbleDir),
		FS:            s.fs,
		ReaderOptions: popts.MakeReaderOptions(),
		Logger:        popts.Logger,
	}
	if obj != nil {
		obj.setPebbleOptions(popts, o.ObjectStore)
		tcfg.OpenRemote = func(ctx context.Context, num uint64) (objstorage.Readable, error) {
			return obj.openProperties(ctx, num)
		}
		tcfg.ObjectName = s.objectOf
	}
	s.tracker = ssttracker.NewTracker(tcfg)
	el := s.tracker.EventListener()
	// A vnode move's ingestion of another store's SSTs (move.go) is left
	// to a listing: the tracker would take those virtual SSTs, whose
	// backing has their own number, for whole files.
	ingested := el.TableIngested
	el.TableIngested = func(info pebble.TableIngestInfo) {
		if !s.movingIn.Load() {
			ingested(info)
		}
	}
	el.WriteStallBegin = func(pebble.WriteStallBeginInfo) { s.metrics.pebbleStalls.Add(1) }
	el.ManifestCreated = func(info pebble.ManifestCreateInfo) {
		if info.Err == nil {
			s.manifestNum.Store(uint64(info.FileNum))
		}
	}
	flushEnd := el.FlushEnd
	el.FlushEnd = func(info pebble.FlushInfo) {
		flushEnd(info)
		if info.Err != nil && len(info.Output) == 0 && info.InputBytes > 0 {
			s.flushErr.Store(&info.Err)
			s.flushFailures.Add(1)
		}
	}
	compactionEnd := el.CompactionEnd
	el.CompactionEnd = func(info pebble.CompactionInfo) {
		compactionEnd(info)
		switch {
		case info.Err == nil:
			s.compactErr.Store(nil)
		case !errors.Is(info.Err, pebble.ErrCancelledCompaction):
			s.compactErr.Store(&info.Err)
		}
	}
	s.busy.listen(&el)
	popts.Experimental.SpanPolicyFunc = s.spans.policy
	popts.AddEventListener(el)
	if o.EventListener != nil {
		popts.AddEventListener(*o.EventListener)
	}
	o.applyHook(popts)
	if popts.Experimental.CompactionScheduler == nil {
		popts.Experimental.CompactionScheduler = newCompactionScheduler(popts.Logger)
	}
	// Pebble's default reaction to corrupt data is Logger.Fatalf, which ends
	// the process: the read that met it returns the error anyway (naming
	// the file and block), so the store logs and counts it instead.
	var user func(pebble.DataCorruptionInfo)
	if o.EventListener != nil {
		user = o.EventListener.DataCorruption
	}
	popts.EventListener.DataCorruption = func(info pebble.DataCorruptionInfo) {
		s.metrics.corruptions.Add(1)
		popts.Logger.Errorf("lsmstats: corrupt data in %s: %v", info.Path, info.Details)
		if user != nil {
			user(info)
		}
	}
	s.popts = popts

	if err := s.checkOptionsFile(names, popts); err != nil {
		return nil, err
	}
	var deferred *deferredRemoveFS
	if !o.ReadOnly {
		deferred = newDeferredRemoveFS(popts.FS)
		popts.FS = deferred
	}
	db, err := pebble.Open(s.fs.PathJoin(dir, pebbleDir), popts)
	if err != nil {
		return nil, s.openError(err)
	}
	s.busy.opened.Store(true)
	s.db = db
	if obj != nil {
		if err := obj.setCreator(db, dir, o.ReadOnly); err != nil {
			_ = db.Close()
			return nil, err
		}
	}
	s.wopts = popts.MakeWriterOptions(0, db.TableFormat())
	s.spillOpts = s.wopts
	s.spillOpts.BlockPropertyCollectors = nil
	s.tracker.SetDB(db)
	if !o.ReadOnly {
		// Checkpoints committed as batches (Options.CommitBatchBytes) that
		// no flush wrote before a crash are in the WAL: Pebble replays them
		// into memtables and flushes those in the background. Their
		// summaries were in memory only, so wait for the flush: the first
		// refresh then lists them. (A read-only store cannot flush: its
		// physical statistics leave such checkpoints out.)
		// If the flush fails, Pebble retries it; the statistics count the
		// replayed checkpoints once it succeeds.
		if err := s.flushMemtable(); err != nil {
			popts.Logger.Errorf("lsmstats: %s: flush the checkpoints replayed from the WAL: %v", dir, err)
		}
	}

	err = s.load(m, hasMark)
	if err == nil {
		err = s.checkMark(m, hasMark)
	}
	if err != nil {
		_ = s.tracker.Close()
		_ = db.Close()
		s.closeMark()
		return nil, err
	}
	if deferred != nil {
		deferred.accept(popts.Logger)
	}
	if obj != nil && !o.ReadOnly {
		obj.storage.accept(popts.Logger)
	}
	// The first refresh after SetDB lists the live SSTs (load's metadata
	// ingestion may have run it; this one then takes the changes since).
	if err := s.tracker.RefreshSignalled(); err != nil {
		if !lsmstats.IsCorruption(err) {
			_ = s.tracker.Close()
			_ = db.Close()
			return nil, errors.Wrap(err, "lsmstats: load statistics")
		}
		// A live SST whose properties cannot be read: Pebble cannot read
		// the file either, so every read of its range fails and names it.
		// The rest of the store is readable; Stats().PhysicalErr reports
		// the file until a refresh succeeds, and Verify names it.
		popts.Logger.Errorf("lsmstats: load statistics of %s: %v", dir, err)
	}
	s.tracker.Start()
	opened = true
	if o.ReadOnly {
		return s, nil
	}
	// Redo the bucket rescans that were pending persistence at the crash or
	// close (see livebuckets.State.Rescans): the live statistics are then
	// exactly what they were before it.
	s.mu.Lock()
	reqs := s.mu.live.Rescans()
	s.mu.Unlock()
	s.rescanBuckets(reqs)
	if obj != nil {
		// Nothing of the store ingests now (the caller does not have it
		// yet): the sweep cannot take an ingestion's object for an orphan.
		removed, err := obj.sweep(db)
		switch {
		case err != nil:
			popts.Logger.Errorf("lsmstats: %s: remove orphaned objects from %s: %v", dir, obj.describe(), err)
		case len(removed) > 0:
			popts.Logger.Infof("lsmstats: %s: removed %d orphaned objects from %s (%s ...)", dir, len(removed), obj.describe(), removed[0])
		}
	}
	return s, nil
}

// checkExists refuses a path that holds no store: no directory, no
// Pebble directory in it, or no MANIFEST there (Pebble would lock the
// directory, creating a file, before finding out).
func (s *Store) checkExists() error {
	dbDir := s.fs.PathJoin(s.dir, pebbleDir)
	for _, p := range []string{s.dir, dbDir} {
		st, err := s.fs.Stat(p)
		switch {
		case err != nil && oserror.IsNotExist(err) && p == s.dir:
			return errors.Wrapf(ErrNoStore, "%s does not exist", p)
		case err != nil && oserror.IsNotExist(err):
			msg := fmt.Sprintf("%s holds no store (it has no %s directory)", s.dir, pebbleDir)
			if s.fs.PathBase(s.dir) == pebbleDir && s.hasManifest(s.dir) {
				msg += fmt.Sprintf("; it is a store's Pebble directory: the store is %s", s.fs.PathDir(s.dir))
			}
			return errors.Wrap(ErrNoStore, msg)
		case err != nil && errors.Is(err, syscall.ENOTDIR):
			return errors.Wrapf(ErrNoStore, "%s does not exist: a part of its path is not a directory", p)
		case err != nil:
			return errors.Wrapf(err, "lsmstats: open %s", s.dir)
		case !st.IsDir():
			return errors.Wrapf(ErrNoStore, "%s is not a directory", p)
		}
	}
	names, err := s.fs.List(dbDir)
	if err != nil {
		return errors.Wrapf(err, "lsmstats: list %s", dbDir)
	}
	for _, n := range names {
		if strings.HasPrefix(n, "MANIFEST-") {
			return nil
		}
	}
	return errors.Wrapf(ErrNoStore, "%s holds no Pebble MANIFEST", dbDir)
}

// hasManifest reports whether dir holds a Pebble MANIFEST.
func (s *Store) hasManifest(dir string) bool {
	names, err := s.fs.List(dir)
	if err != nil {
		return false
	}
	for _, n := range names {
		if strings.HasPrefix(n, "MANIFEST-") {
			return true
		}
	}
	return false
}

func (s *Store) resetStaging() error {
	if err := s.fs.RemoveAll(s.staging); err != nil {
		return errors.Wrapf(err, "lsmstats: clear staging directory %s", s.staging)
	}
	if err := s.fs.MkdirAll(s.staging, 0o755); err != nil {
		return errors.Wrapf(err, "lsmstats: create staging directory %s", s.staging)
	}
	return nil
}

// load reads the metadata: format version, committed epoch, high-water
// mark, catalog and live statistics. A new store is initialised.
func (s *Store) load(m mark, hasMark bool) error {
	start, end := keys.TableSpan(keys.MetaTable)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
	if err != nil {
		return markPebble(errors.Wrapf(err, "lsmstats: read the metadata of %s", s.dir))
	}
	defer it.Close()
	// leaveOut takes a metadata row that does not decode: Open fails on it,
	// unless the store is read-only, which leaves the row out, logs it and
	// reports it in Verify.
	leaveOut := func(err error) error {
		if !s.opts.ReadOnly {
			return err
		}
		s.corruptMeta = append(s.corruptMeta, err)
		s.popts.Logger.Errorf("lsmstats: %s: %v; left out (read-only)", s.dir, err)
		return nil
	}
	var formatSeen, gcEpochBad bool
	var minor, format uint64
	var unknown [][]byte // rows of names this library does not know
	liveEntries := [][2][]byte{}
	// leftOut counts the live-statistics rows of each table whose catalog
	// entry a read-only open left out: reported once per table.
	leftOut := map[uint32]int{}
	for valid := it.First(); valid; valid = it.Next() {
		name, ok := keys.MetaName(it.Key())
		if !ok {
			// Not the store's (none of the key shapes): like a foreign key in
			// a table's range it is reported (Verify), not fatal.
			s.logf("lsmstats: ignoring key %x in the metadata range: it has none of the key shapes", it.Key())
			continue
		}
		val, err := it.ValueAndErr()
		if err != nil {
			return markPebble(errors.Wrapf(err, "lsmstats: read the metadata of %s", s.dir))
		}
		switch n := string(name); {
		case n == keys.FormatVersionName:
			v, err := u64(name, val)
			if err != nil {
				return err
			}
			if v > FormatVersion {
				return errors.Wrapf(ErrFormatTooNew, "store %s has format_version %d, this library writes %d", s.dir, v, FormatVersion)
			}
			if v < 1 {
				return errors.Wrapf(errCorruptMetadata, "store %s has format_version %d", s.dir, v)
			}
			formatSeen, format = true, v
		case n == keys.FormatMinorName:
			if minor, err = u64(name, val); err != nil {
				return err
			}
		case n == keys.CommittedEpochName:
			v, err := u64(name, val)
			if err != nil {
				return err
			}
			s.committed.Store(v)
		case n == hwmName:
			// Only writes need the mark: a read-only store does without.
			if s.mu.hwm, err = u64(name, val); err != nil {
				if err := leaveOut(err); err != nil {
					return err
				}
			}
		case n == gcEpochName:
			if s.mu.gcEpoch, err = u64(name, val); err != nil {
				if err := leaveOut(err); err != nil {
					return err
				}
				gcEpochBad = true
			}
		case len(n) > len(keys.CatalogPrefix) && n[:len(keys.CatalogPrefix)] == keys.CatalogPrefix:
			id, ok := keys.ParseCatalogKey(it.Key())
			if !ok {
				if err := leaveOut(errors.Wrapf(errCorruptMetadata, "catalog key %x", it.Key())); err != nil {
					return err
				}
				continue
			}
			def, err := decodeCatalogEntry(id, val)
			if err != nil {
				if err := leaveOut(err); err != nil {
					return err
				}
				leftOut[id] = 0
				continue
			}
			s.mu.catalog[id] = def
			s.mu.live.AddTable(id, def.VnodeCount)
		case isLiveName(n):
			liveEntries = append(liveEntries, [2][]byte{append([]byte(nil), it.Key()...), append([]byte(nil), val...)})
		default:
			unknown = append(unknown, append([]byte(nil), name...))
		}
	}
	if err := it.Error(); err != nil {
		return markPebble(errors.Wrapf(err, "lsmstats: read the metadata of %s", s.dir))
	}
	if err := s.checkMinor(minor, unknown, leaveOut); err != nil {
		return err
	}
	if formatSeen {
		s.mu.live.SetFormat(format)
	}
	for t := range leftOut {
		s.mu.live.LeaveOut(t)
	}
	for _, e := range liveEntries {
		if t, ok := liveTableOf(e[0]); ok {
			if _, gone := leftOut[t]; gone {
				leftOut[t]++
				continue
			}
		}
		if err := s.mu.live.Load(e[0], e[1]); err != nil {
			t, v, ok := liveVnodeOf(e[0])
			if ok {
				err = errors.Wrapf(err, "live statistics of table %d vnode %d", t, v)
			}
			if err := leaveOut(errors.Mark(lsmstats.MarkCorruption(err), errCorruptMetadata)); err != nil {
				return err
			}
			vnode := int(v)
			if !ok {
				vnode = -1
				t, ok = liveTableOf(e[0])
			}
			if ok {
				if s.liveLeftOut == nil {
					s.liveLeftOut = map[uint32]map[int]bool{}
				}
				if s.liveLeftOut[t] == nil {
					s.liveLeftOut[t] = map[int]bool{}
				}
				s.liveLeftOut[t][vnode] = true
			}
		}
	}
	s.mu.live.FinishLoad()
	if formatSeen && format < FormatVersion && !s.opts.ReadOnly {
		// A store of an older format: its live-statistics rows in the
		// current layout, with the version, in one ingestion.
		migrate := append(s.mu.live.Migrate(), livebuckets.MetaEntry{Key: keys.MetaKey([]byte(keys.FormatVersionName)), Value: be64(FormatVersion)})
		if err := s.ingestMeta(migrate); err != nil {
			return errors.Wrapf(err, "lsmstats: rewrite the live statistics of %s (format %d) in format %d", s.dir, format, FormatVersion)
		}
		s.logf("lsmstats: %s: store of format %d rewritten in format %d", s.dir, format, FormatVersion)
	}
	s.partitionLarge()
	for t, n := range leftOut {
		if n > 0 {
			s.popts.Logger.Errorf("lsmstats: %s: %d live-statistics rows of table %d left out with its catalog entry", s.dir, n, t)
		}
	}
	if gcEpochBad {
		// The watermark is unknown: only the committed epoch is surely
		// readable.
		s.mu.gcEpoch = s.committed.Load()
	}
	if !formatSeen {
		if s.committed.Load() != 0 || len(s.mu.catalog) > 0 {
			// The row is the store's first metadata, ingested at its
			// creation: later rows without it mean that Pebble lost the
			// edit that added its SST (rows a checkpoint batch left in
			// the WAL are replayed all the same).
			return errors.Wrapf(errCorruptMetadata, "store %s has metadata (committed epoch %d) but no format_version: "+
				"Pebble's MANIFEST lost edits (it reads a damaged or cut MANIFEST up to its last valid record)",
				s.dir, s.committed.Load())
		}
		if err := s.checkMarkWithoutMetadata(m, hasMark); err != nil {
			return err
		}
		if s.opts.ReadOnly {
			// A Pebble database that a crash left before the store's first
			// metadata, or none of ours: nothing to inspect.
			return errors.Wrapf(ErrNoStore, "%s holds a Pebble database without a store's metadata", s.dir)
		}
		if err := s.ingestMeta([]livebuckets.MetaEntry{
			{Key: keys.MetaKey([]byte(keys.FormatVersionName)), Value: be64(FormatVersion)},
			{Key: keys.MetaKey([]byte(keys.CommittedEpochName)), Value: be64(0)},
		}); err != nil {
			return err
		}
	}
	s.floor = max(s.committed.Load(), s.mu.hwm)
	s.pub.Store(&published{epoch: s.committed.Load()})
	return nil
}

const gcEpochName = keys.GCEpochName

// checkMinor applies the minor-version rule (formatMinor) to a store of
// minor version minor whose metadata holds rows of the unknown names.
func (s *Store) checkMinor(minor uint64, unknown [][]byte, leaveOut func(error) error) error {
	if minor > formatMinor {
		if !s.opts.ReadOnly {
			return errors.Wrapf(ErrFormatTooNew, "store %s has format %d.%d, this library writes %d.%d: it opens read-only only",
				s.dir, FormatVersion, minor, FormatVersion, formatMinor)
		}
		if len(unknown) > 0 {
			s.logf("lsmstats: %s (format %d.%d): ignoring %d metadata rows of a newer minor format, the first %q",
				s.dir, FormatVersion, minor, len(unknown), unknown[0])
		}
		return nil
	}
	for _, n := range unknown {
		if err := leaveOut(errors.Wrapf(errCorruptMetadata,
			"metadata row %q: no such name in format %d.%d", n, FormatVersion, minor)); err != nil {
			return err
		}
	}
	return nil
}

// liveVnodeOf returns the table and vnode of a live-statistics bucket key
// ("live/", the table id, the vnode, see livebuckets.BucketKey).
func liveVnodeOf(key []byte) (uint32, uint16, bool) {
	name, ok := keys.MetaName(key)
	if !ok {
		return 0, 0, false
	}
	rest, ok := bytes.CutPrefix(name, []byte("live/"))
	if !ok || len(rest) < 6 {
		return 0, 0, false
	}
	return binary.BigEndian.Uint32(rest), binary.BigEndian.Uint16(rest[4:]), true
}

// liveTableOf returns the table of a live-statistics metadata key
// ("live/" or "live_est/" and the table id, see livebuckets.BucketKey).
func liveTableOf(key []byte) (uint32, bool) {
	name, ok := keys.MetaName(key)
	if !ok {
		return 0, false
	}
	for _, p := range []string{"live/", "live_est/"} {
		if rest, ok := bytes.CutPrefix(name, []byte(p)); ok && len(rest) >= 4 {
			return binary.BigEndian.Uint32(rest), true
		}
	}
	return 0, false
}

func u64(name, val []byte) (uint64, error) {
	if len(val) != 8 {
		return 0, errors.Wrapf(errCorruptMetadata, "metadata row %q: want 8 bytes, have %x", name, val)
	}
	return binary.BigEndian.Uint64(val), nil
}

func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// Close closes the store. Uncommitted data is discarded.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.mu.closed = true
	s.closed.Store(true)
	s.mu.Unlock()
	s.gc.stop() // cancel and wait for a GC pass or manual compaction
	// Wait for a commit or spill in progress.
	s.ingestMu.Lock()
	defer s.ingestMu.Unlock()
	s.iters.close()
	s.iters.closeOpen() // Iters the caller left open stop with ErrClosed
	var err error
	if !s.opts.ReadOnly && s.failed.Load() == nil {
		// Checkpoints committed as batches go into SSTs now, so that a
		// read-only open (which cannot flush) finds every one in its
		// physical statistics.
		if err := s.flushUnflushed(); err != nil {
			s.popts.Logger.Errorf("lsmstats: %s: flush at close: %v", s.dir, err)
		}
	}
	err = errors.CombineErrors(err, s.tracker.Close())
	s.pebbleMetricsMu.Lock() // counters sees closed from now on
	s.pebbleMetricsMu.Unlock()
	err = errors.CombineErrors(err, s.db.Close())
	if s.obj != nil {
		s.obj.close()
	}
	if !s.opts.ReadOnly {
		err = errors.CombineErrors(err, s.fs.RemoveAll(s.staging))
	}
	s.closeMark()
	return err
}

// flushLimit bounds flushMemtable's wait for its flush.
const flushLimit = 5 * time.Second

// flushMemtable flushes Pebble's memtables and waits for the flush, unless
// a flush fails (Pebble retries failed flushes by itself, for as long as
// the fault lasts) or flushLimit passes first. It waits first while Pebble
// would stall the flush (waitForMemtable).
func (s *Store) flushMemtable() error {
	if err := s.waitForMemtable(); err != nil {
		return errors.Wrap(err, "lsmstats: flush")
	}
	failures := s.flushFailures.Load()
	done, err := s.db.AsyncFlush()
	if err != nil {
		return errors.Wrap(err, "lsmstats: flush")
	}
	start := time.Now()
	for d := time.Millisecond; ; d = min(2*d, 20*time.Millisecond) {
		select {
		case <-done:
			return nil
		case <-time.After(d):
		}
		if s.flushFailures.Load() > failures {
			return errors.Wrap(*s.flushErr.Load(), "lsmstats: flush")
		}
		if time.Since(start) > flushLimit {
			return errors.Newf("lsmstats: flush: not done after %s", flushLimit)
		}
	}
}

// memtableStall says why a write into Pebble's memtable (or the rotation
// that starts a flush) would stall now, or "" if it would not: Pebble
// stalls them while its memtables fill MemTableStopWritesThreshold
// memtables' worth, or L0 has L0StopWritesThreshold sublevels, until
// flushes and compactions catch up.
func (s *Store) memtableStall(m *pebble.Metrics) string {
	size := s.popts.MemTableSize
	if m.MemTable.Size+size >= uint64(s.popts.MemTableStopWritesThreshold)*size {
		return fmt.Sprintf("Pebble's memtables wait for their flush (%d memtables, %d bytes)", m.MemTable.Count, m.MemTable.Size)
	}
	if l0 := int(m.Levels[0].Sublevels); l0 >= s.popts.L0StopWritesThreshold-1 {
		return fmt.Sprintf("L0 has %d sublevels (Pebble stops writes at %d)", l0, s.popts.L0StopWritesThreshold)
	}
	return ""
}

// waitForMemtable waits while a memtable write would stall
// (memtableStall), for as long as Pebble's flushes and compactions make
// progress: Pebble's own stall has no end while they fail, since it retries
// them. It returns an error naming the stall when a flush or a compaction
// fails during the wait, and after Options.L0StallLimit.
func (s *Store) waitForMemtable() error {
	m := s.db.Metrics()
	why := s.memtableStall(m)
	if why == "" {
		return nil
	}
	start, failures, compFailed := time.Now(), s.flushFailures.Load(), m.Compact.FailedCount
	for d := time.Millisecond; ; d = min(2*d, 50*time.Millisecond) {
		time.Sleep(d)
		m = s.db.Metrics()
		if why = s.memtableStall(m); why == "" {
			return nil
		}
		switch {
		case s.flushFailures.Load() > failures:
			return errors.Wrapf(*s.flushErr.Load(), "%s, and flushes fail", why)
		case m.Compact.FailedCount > compFailed:
			return s.stallErr(errors.Newf("%s, and compactions fail", why))
		case time.Since(start) > s.opts.L0StallLimit:
			return s.stallErr(errors.Newf("%s, still after %s (Options.L0StallLimit)", why, s.opts.L0StallLimit))
		}
	}
}

// stallErr wraps the failure of the last compaction, if it failed, with a
// stall's error: the cause, which errors.Is finds (an I/O error, a corrupt
// block).
func (s *Store) stallErr(err error) error {
	if p := s.compactErr.Load(); p != nil {
		return errors.Wrapf(*p, "%v; the last compaction failed", err)
	}
	return err
}

// flushUnflushed flushes the memtable if it holds checkpoints committed as
// batches. An ingestion or a compaction whose range overlaps the memtable
// makes Pebble flush it first and wait for the flush, without end while the
// flush fails (Pebble retries it); this flush returns the failure instead.
func (s *Store) flushUnflushed() error {
	if ssttracker.NumUnflushed(s.tracker.Current()) == 0 {
		return nil
	}
	return s.flushMemtable()
}

// checkWritable returns ErrClosed or the failure that stopped writes. It
// takes no lock: every writer op calls it.
func (s *Store) checkWritable() error {
	if s.closed.Load() {
		return ErrClosed
	}
	if f := s.failed.Load(); f != nil {
		return *f
	}
	return nil
}

func (s *Store) checkOpen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return ErrClosed
	}
	return nil
}

// fail stops all writes after a fault whose effect on disk is unknown.
func (s *Store) fail(err error) error {
	f := errors.Mark(errors.Wrap(err, ErrFailed.Error()), ErrFailed)
	s.failed.CompareAndSwap(nil, &f) // the first failure is the one kept
	return *s.failed.Load()
}

// CommittedEpoch returns the last committed epoch.
func (s *Store) CommittedEpoch() uint64 { return s.committed.Load() }

// EpochFloor returns the epoch that every epoch used from now on must
// exceed: the larger of the committed epoch and the durable high-water mark
// found at Open. After a restart, resume with an epoch above it.
func (s *Store) EpochFloor() uint64 { return max(s.floor, s.committed.Load()) }

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// pebbleDirPath returns the directory of the underlying Pebble database
// (lsminternal.PebbleDir, for this module's tools and tests).
func (s *Store) pebbleDirPath() string { return s.fs.PathJoin(s.dir, pebbleDir) }

// CreateTable adds a table to the catalog, durably. Creating a table that
// exists with the same definition is a no-op.
func (s *Store) CreateTable(def TableDef) error {
	if err := def.normalize(); err != nil {
		return err
	}
	if err := s.checkWritable(); err != nil {
		return err
	}
	s.ingestMu.Lock()
	defer s.ingestMu.Unlock()
	s.mu.Lock()
	if old, ok := s.mu.catalog[def.ID]; ok {
		s.mu.Unlock()
		if sameDef(old, &def) {
			return nil
		}
		return errors.Newf("lsmstats: table %d exists with another definition", def.ID)
	}
	s.mu.Unlock()
	if err := s.ingestMeta([]livebuckets.MetaEntry{{Key: keys.CatalogKey(def.ID), Value: encodeCatalogEntry(&def)}}); err != nil {
		return err
	}
	s.mu.Lock()
	s.mu.catalog[def.ID] = &def
	s.mu.live.AddTable(def.ID, def.VnodeCount)
	s.mu.Unlock()
	return nil
}

// partitionLarge cuts the SSTs of every table whose live bytes have
// reached Options.PartitionBytes at its vnode partitions from now on
// (sstSpans). Callers hold s.mu, or have the store to themselves (Open).
func (s *Store) partitionLarge() {
	if s.opts.PartitionBytes < 0 {
		return
	}
	live := s.mu.live.Current()
	for id, def := range s.mu.catalog {
		if def.VnodeCount > 1 && !s.spans.partitioned(id) && live.Table(id).Bytes >= s.opts.PartitionBytes {
			s.spans.partition(id, def.VnodeCount)
		}
	}
}

// Table returns a table's definition.
func (s *Store) Table(id uint32) (TableDef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.mu.catalog[id]
	if !ok {
		return TableDef{}, errors.Wrapf(ErrUnknownTable, "table %d", id)
	}
	return *d, nil
}

// Tables returns every table definition, by id.
func (s *Store) Tables() []TableDef {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]TableDef, 0, len(s.mu.catalog))
	for _, d := range s.mu.catalog {
		out = append(out, *d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (s *Store) table(id uint32) (*TableDef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.mu.catalog[id]
	if !ok {
		return nil, errors.Wrapf(ErrUnknownTable, "table %d", id)
	}
	return d, nil
}

// ingestMeta durably writes metadata entries in one ingestion. Callers hold
// ingestMu.
func (s *Store) ingestMeta(entries []livebuckets.MetaEntry) error {
	entries = slices.Clone(entries)
	slices.SortFunc(entries, func(a, b livebuckets.MetaEntry) int { return bytes.Compare(a.Key, b.Key) })
	paths, err := s.newOutput().finishWithMeta(entries)
	if err != nil {
		return err
	}
	if err := s.ingestFiles(context.Background(), paths, nil, pebble.KeyRange{}); err != nil {
		return errors.Wrap(err, "lsmstats: ingest metadata")
	}
	// The metadata is durable; a failed refresh only leaves the SST count
	// of the statistics behind until the next one.
	if err := s.tracker.RefreshSignalled(); err != nil {
		s.logf("lsmstats: refresh statistics after a metadata ingestion: %v", err)
	}
	return nil
}

// ingest finishes out's SSTs and ingests them in one Ingest call,
// atomically; the staged files are removed whether or not it succeeds.
// what (formatted with args) names the ingestion in the error. Callers
// hold ingestMu.
func (s *Store) ingest(out *output, what string, args ...any) error {
	paths, err := out.finish()
	if err != nil {
		return err
	}
	return errors.Wrapf(s.ingestFiles(context.Background(), paths, nil, pebble.KeyRange{}), "lsmstats: ingest "+what, args...)
}

// ingestFiles ingests the staged SSTs at paths in one ingestion, after a
// flush of the batches committed unflushed, and removes them whether or
// not it succeeds: with Pebble's Ingest, or, given a span to excise, with
// IngestAndExcise, which first removes what the store holds in the span
// and takes the shared SSTs (another store's, a vnode move's) by
// reference. Callers hold ingestMu.
func (s *Store) ingestFiles(ctx context.Context, paths []string, shared []pebble.SharedSSTMeta, excise pebble.KeyRange) error {
	defer s.removeFiles(paths)
	if err := s.flushUnflushed(); err != nil {
		return err
	}
	if excise.Start == nil {
		return s.db.Ingest(ctx, paths)
	}
	_, err := s.db.IngestAndExcise(ctx, paths, shared, nil, excise)
	return err
}

func (s *Store) removeFiles(paths []string) {
	for _, p := range paths {
		if err := s.fs.Remove(p); err != nil && !errors.Is(err, errNotExist) {
			s.logf("lsmstats: remove %s: %v", p, err)
		}
	}
}

func (s *Store) logf(format string, args ...any) {
	s.popts.Logger.Infof(format, args...)
}

func (s *Store) stagingPath(kind string) string {
	return s.fs.PathJoin(s.staging, fmt.Sprintf("%s-%06d.sst", kind, s.fileSeq.Add(1)))
}

// counters returns the store's counters but GC's (Store.Metrics).
func (s *Store) counters() Metrics {
	m := Metrics{
		Commits:               s.metrics.commits.Load(),
		Spills:                s.metrics.spills.Load(),
		SpilledBytes:          s.metrics.spilledBytes.Load(),
		CommitStalls:          s.metrics.stalls.Load(),
		CommitStallsAbandoned: s.metrics.stallsAbandoned.Load(),
		CommitStallTime:       time.Duration(s.metrics.stallNanos.Load()),
		PebbleWriteStalls:     s.metrics.pebbleStalls.Load(),
		BufferedBytes:         s.buffered.Load(),
		BucketScans:           s.metrics.bucketScans.Load(),
		BucketScanRows:        s.metrics.bucketScanRows.Load(),
		Corruptions:           s.metrics.corruptions.Load(),
		Backups:               s.metrics.backups.Load(),
		BackupBytes:           s.metrics.backupBytes.Load(),
		BackupSweptObjects:    s.metrics.backupSwept.Load(),
	}
	s.pebbleMetricsMu.Lock()
	defer s.pebbleMetricsMu.Unlock()
	if !s.closed.Load() { // a closed Pebble has no metrics
		pm := s.db.Metrics()
		m.L0Sublevels = int(pm.Levels[0].Sublevels)
		m.L0Files = pm.Levels[0].TablesCount
	}
	return m
}
