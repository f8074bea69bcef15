package lsm

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/stats"
)

// FormatVersion is the store format this library writes. Open refuses a
// store whose format_version is newer.
const FormatVersion = 1

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
	tracker *stats.Tracker
	// wopts are the options of every SST the store writes for ingestion
	// (with the stats collector); spillOpts those of staged spills.
	wopts, spillOpts sstable.WriterOptions

	// statsMu pairs the physical and live statistics of one checkpoint.
	statsMu sync.RWMutex
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
		live    *stats.LiveState
		// hwm is the durable epoch high-water mark.
		hwm uint64
		// gcEpoch is the garbage-collection watermark: reads below it are
		// refused. GC raises it with each ingestion (gc.go).
		gcEpoch uint64
		// gcPending is the safe epoch of the GC pass in progress (0: none):
		// pins below it are refused before its deletions land.
		gcPending uint64
	}
	// gc serialises GC passes and manual compactions and lets Close stop
	// them (gc.go).
	gc        gcState
	committed atomic.Uint64
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
	stallsAbandoned, stallNanos           atomic.Int64
	pebbleStalls                          atomic.Int64
	bucketScans, bucketScanRows           atomic.Int64
}

// Open opens (or creates) the store in dir. A nil opts means the defaults.
func Open(dir string, opts *Options) (*Store, error) {
	o := opts.withDefaults()
	s := &Store{dir: dir, opts: o, fs: o.FS, staging: o.FS.PathJoin(dir, stagingDir)}
	s.hooks.phase = o.OnPhase
	s.mu.catalog = map[uint32]*TableDef{}
	s.mu.writers = map[*Writer]struct{}{}
	s.mu.pins = map[uint64]int{}
	s.mu.live = stats.NewLiveState()
	s.gc.closing = make(chan struct{})

	if err := s.fs.MkdirAll(dir, 0o755); err != nil {
		return nil, errors.Wrapf(err, "lsmstats: create %s", dir)
	}
	// Staged spills and unfinished commit outputs belong to epochs that did
	// not commit: they must not survive a restart.
	if err := s.resetStaging(); err != nil {
		return nil, err
	}

	popts := o.pebbleOptions()
	s.tracker = stats.NewTracker(stats.TrackerConfig{
		Dir:           s.fs.PathJoin(dir, pebbleDir),
		FS:            s.fs,
		ReaderOptions: popts.MakeReaderOptions(),
		Logger:        popts.Logger,
	})
	el := s.tracker.EventListener()
	el.WriteStallBegin = func(pebble.WriteStallBeginInfo) { s.metrics.pebbleStalls.Add(1) }
	popts.AddEventListener(el)
	if o.EventListener != nil {
		popts.AddEventListener(*o.EventListener)
	}
	if o.Pebble != nil {
		o.Pebble(popts)
	}
	s.popts = popts

	db, err := pebble.Open(s.fs.PathJoin(dir, pebbleDir), popts)
	if err != nil {
		return nil, errors.Wrapf(err, "lsmstats: open pebble in %s", dir)
	}
	s.db = db
	s.wopts = popts.MakeWriterOptions(0, db.TableFormat())
	s.spillOpts = s.wopts
	s.spillOpts.BlockPropertyCollectors = nil
	s.tracker.SetDB(db)

	if err := s.load(); err != nil {
		_ = s.tracker.Close()
		_ = db.Close()
		return nil, err
	}
	if err := s.tracker.Refresh(); err != nil {
		_ = s.tracker.Close()
		_ = db.Close()
		return nil, errors.Wrap(err, "lsmstats: load statistics")
	}
	s.tracker.Start()
	// Redo the bucket rescans that were pending persistence at the crash or
	// close (see stats.LiveState.Rescans): the live statistics are then
	// exactly what they were before it.
	s.mu.Lock()
	reqs := s.mu.live.Rescans()
	s.mu.Unlock()
	s.rescanBuckets(reqs)
	return s, nil
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
func (s *Store) load() error {
	start, end := keys.TableSpan(keys.MetaTable)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
	if err != nil {
		return err
	}
	defer it.Close()
	var formatSeen bool
	liveEntries := [][2][]byte{}
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
			return err
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
			formatSeen = true
		case n == keys.CommittedEpochName:
			v, err := u64(name, val)
			if err != nil {
				return err
			}
			s.committed.Store(v)
		case n == hwmName:
			if s.mu.hwm, err = u64(name, val); err != nil {
				return err
			}
		case n == gcEpochName:
			if s.mu.gcEpoch, err = u64(name, val); err != nil {
				return err
			}
		case len(n) > len(keys.CatalogPrefix) && n[:len(keys.CatalogPrefix)] == keys.CatalogPrefix:
			id, ok := keys.ParseCatalogKey(it.Key())
			if !ok {
				return errors.Wrapf(ErrCorruptMetadata, "catalog key %x", it.Key())
			}
			def, err := decodeCatalogEntry(id, val)
			if err != nil {
				return err
			}
			s.mu.catalog[id] = def
			s.mu.live.AddTable(id, def.VnodeCount)
		default:
			liveEntries = append(liveEntries, [2][]byte{append([]byte(nil), it.Key()...), append([]byte(nil), val...)})
		}
	}
	if err := it.Error(); err != nil {
		return err
	}
	for _, e := range liveEntries {
		if err := s.mu.live.Load(e[0], e[1]); err != nil {
			return errors.Mark(err, ErrCorruptMetadata)
		}
	}
	s.mu.live.FinishLoad()
	if !formatSeen {
		if s.committed.Load() != 0 || len(s.mu.catalog) > 0 {
			return errors.Wrapf(ErrCorruptMetadata, "store %s has metadata but no format_version", s.dir)
		}
		if err := s.ingestMeta([]stats.MetaEntry{
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

func u64(name, val []byte) (uint64, error) {
	if len(val) != 8 {
		return 0, errors.Wrapf(ErrCorruptMetadata, "metadata %q: want 8 bytes, have %x", name, val)
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
	err := s.tracker.Close()
	err = errors.CombineErrors(err, s.db.Close())
	err = errors.CombineErrors(err, s.fs.RemoveAll(s.staging))
	return err
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

// DB returns the underlying Pebble database, for tools and tests. Writing to
// it directly bypasses the store's invariants.
func (s *Store) DB() *pebble.DB { return s.db }

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// PebbleDir returns the directory of the underlying Pebble database, for
// tools that read its SSTs.
func (s *Store) PebbleDir() string { return s.fs.PathJoin(s.dir, pebbleDir) }

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
	if err := s.ingestMeta([]stats.MetaEntry{{Key: keys.CatalogKey(def.ID), Value: encodeCatalogEntry(&def)}}); err != nil {
		return err
	}
	s.mu.Lock()
	s.mu.catalog[def.ID] = &def
	s.mu.live.AddTable(def.ID, def.VnodeCount)
	s.mu.Unlock()
	return nil
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
func (s *Store) ingestMeta(entries []stats.MetaEntry) error {
	entries = slices.Clone(entries)
	slices.SortFunc(entries, func(a, b stats.MetaEntry) int { return bytes.Compare(a.Key, b.Key) })
	out := s.newOutput()
	for _, e := range entries {
		if err := out.addMeta(e); err != nil {
			out.abort()
			return err
		}
	}
	if err := s.ingest(out, "metadata"); err != nil {
		return err
	}
	// The metadata is durable; a failed refresh only leaves the SST count
	// of the statistics behind until the next one.
	if err := s.tracker.RefreshSignalled(); err != nil {
		s.logf("lsmstats: refresh statistics after a metadata ingestion: %v", err)
	}
	return nil
}

// ingest finishes out's SSTs and ingests them in one Ingest call, atomically; the staged files are removed
// whether or not it succeeds. what (formatted with args) names the
// ingestion in the error. Callers hold ingestMu.
func (s *Store) ingest(out *output, what string, args ...any) error {
	paths, err := out.finish()
	if err != nil {
		return err
	}
	err = s.db.Ingest(context.Background(), paths)
	s.removeFiles(paths)
	return errors.Wrapf(err, "lsmstats: ingest "+what, args...)
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

// Metrics are the store's counters.
type Metrics struct {
	Commits, Spills, SpilledBytes int64
	// CommitStalls counts the commits and GC batches that found L0 at
	// Options.L0StopSublevels (none while automatic compactions are off:
	// nothing would drain L0), and CommitStallTime their total wait.
	// CommitStallsAbandoned counts those that went on with L0 still deep:
	// compactions failing, none running (then later ones do not wait until
	// one succeeds again), or the 30 s bound.
	CommitStalls, CommitStallsAbandoned int64
	CommitStallTime                     time.Duration
	// PebbleWriteStalls counts Pebble's own write stalls (memtable writes).
	PebbleWriteStalls int64
	// BufferedBytes is the memory held by writers' buffers now.
	BufferedBytes int64
	// BucketScans and BucketScanRows count the scans of live-statistics
	// buckets (splits of buckets that grew too big, recalibrations) and the
	// rows they read.
	BucketScans, BucketScanRows int64
	L0Sublevels                 int
	L0Files                     int64
}

// Metrics returns the store's counters.
func (s *Store) Metrics() Metrics {
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
	}
	pm := s.db.Metrics()
	m.L0Sublevels = int(pm.Levels[0].Sublevels)
	m.L0Files = pm.Levels[0].TablesCount
	return m
}
