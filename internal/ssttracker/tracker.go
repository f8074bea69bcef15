package ssttracker

// The Tracker keeps a Version current as Pebble flushes, ingests and
// compacts.
//
// # Refresh
//
// A refresh derives the next Version from the current one by subtracting
// the files that left and adding those that arrived, reading the payload of
// each new file only (see version.go for the copy-on-write layout). A file
// that stayed but moved to another level (a move compaction) keeps its
// summary. The new Version is published with one atomic store: readers
// never block and always see one consistent file set.
//
// Which files arrived and left comes from the changes Pebble's events
// report (changes.go), so a refresh costs the changed files, not the LSM's
// size. A listing of the live SSTs — without properties (O(files), no
// I/O), diffed with the current Version's files, both sorted by file number
// — is the ground truth: Refresh lists, and so does RefreshSignalled when
// the changes do not add up or a listing is due (changes.go names the
// cases).
//
// A listed file may vanish before it is opened (a compaction finished and
// Pebble deleted its inputs). The listing is then stale, so the refresh lists
// again (files already read are kept) — a few times; after that a file that
// vanished in the last listing is left out, and the event of the compaction
// that removed it brings the next refresh. A file that vanished and is
// listed again is missing, not removed (Pebble deletes a file only once no
// version lists it, and never reuses a file number): the refresh fails with
// an error marked as corruption, never leaving out a file silently. Any
// other error while reading a file fails the refresh and publishes
// nothing: the current Version stays complete, but lags behind the DB, and
// the next refresh lists. Err reports the failure until a refresh
// succeeds, and the background goroutine retries with a backoff instead of
// waiting for an event that may never come.
//
// # Files without a usable payload
//
// A virtual SST (excise, ingest-split) shares its backing file's properties,
// so its summary is rebuilt from the backing file's keys within the virtual
// bounds. A physical SST whose payload is missing (e.g. written without the
// collector, or by Pebble's CopySpan, which drops block properties), corrupt,
// truncated, of an unknown format, or inconsistent with Pebble's NumEntries,
// is logged with its file number and rebuilt from its keys, and the Version
// lists it in Rebuilt. Both rebuilds feed the keys to the collector's own
// classification (sstsummary.Collector.Add): one mechanism, never silently
// wrong totals.
//
// # Events
//
// The listener's callbacks run under Pebble's mutex: they log the change,
// signal the background goroutine (a non-blocking send on a one-slot
// channel) and never call into the DB. Signals coalesce; the log keeps
// every change until a refresh takes it. A refresh that finds nothing
// changed keeps the Version. Whoever ingests calls RefreshSignalled, which
// takes the ingestion's change (TableIngested fires before Ingest returns).

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/errors/oserror"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats"
	"github.com/lsmstats/lsmstats/internal/sstsummary"
	"github.com/lsmstats/lsmstats/keys"
)

var (
	// ErrNoDB is returned by Refresh and Recompute before a DB is set.
	ErrNoDB = errors.New("lsmstats/stats: tracker has no DB")
	// ErrEntriesMismatch marks CheckFile failures: a file's summary does not
	// account for Pebble's NumEntries.
	ErrEntriesMismatch = errors.New("lsmstats/stats: summary does not match Pebble's NumEntries")
)

// maxListAttempts bounds how often a refresh lists again because a listed
// file vanished.
const maxListAttempts = 4

// minFailBackoff and maxFailBackoff bound the background goroutine's wait
// before it retries a refresh that failed; the wait doubles per failure.
const (
	minFailBackoff = 10 * time.Millisecond
	maxFailBackoff = 5 * time.Second
)

// TrackerConfig configures a Tracker. Zero fields take the defaults noted.
type TrackerConfig struct {
	// DB is the store; it may be nil at NewTracker (the listener is needed to
	// open the DB) and set later with SetDB.
	DB *pebble.DB
	// Dir is the DB's directory; FS its file system (nil: vfs.Default).
	Dir string
	FS  vfs.FS
	// ReaderOptions must come from pebble.Options.MakeReaderOptions after
	// EnsureDefaults, so that Comparer and KeySchemas are set. Without a
	// Comparer, those of default options with keys.Comparer are used.
	ReaderOptions sstable.ReaderOptions
	// Logger receives refresh errors and rebuilt files (nil:
	// pebble.DefaultLogger).
	Logger pebble.Logger
	// OpenRemote, if set, opens the SSTs that are not in Dir (those Pebble
	// keeps in remote storage) by their backing file number; an error
	// satisfying oserror.IsNotExist means the SST vanished, as for a local
	// file. Nil: every SST is a file in Dir.
	OpenRemote func(ctx context.Context, fileNum uint64) (objstorage.Readable, error)
	// ObjectName, if set, names the object of a remote SST by its backing
	// file number in messages ("" for an SST in Dir): an error reading an
	// SST names the object too, where Pebble's messages name the file
	// number only. Nil: nothing is added.
	ObjectName func(fileNum uint64) string
	// LoadParallelism bounds the new SSTs whose properties a refresh (or
	// a recomputation) reads at once (0: DefaultLoadParallelism; 1: one at
	// a time). See loadAll.
	LoadParallelism int
}

func (cfg TrackerConfig) withDefaults() TrackerConfig {
	if cfg.FS == nil {
		cfg.FS = vfs.Default
	}
	if cfg.Logger == nil {
		cfg.Logger = pebble.DefaultLogger
	}
	if cfg.LoadParallelism <= 0 {
		cfg.LoadParallelism = DefaultLoadParallelism
	}
	if cfg.ReaderOptions.Comparer == nil {
		o := &pebble.Options{Comparer: keys.Comparer}
		o.EnsureDefaults()
		cfg.ReaderOptions = o.MakeReaderOptions()
	}
	return cfg
}

// Tracker maintains the physical statistics of the live SSTs of one DB.
// Create it with NewTracker (the zero value is not usable). All methods are
// safe for concurrent use; Refresh calls are serialised, and Current never
// blocks.
type Tracker struct {
	cfg     TrackerConfig
	db      atomic.Pointer[pebble.DB]
	current atomic.Pointer[Version]

	refreshMu sync.Mutex
	signal    chan struct{}
	// log holds the changes Pebble's events reported since the last
	// refresh took them (changes.go); dead the file numbers they removed,
	// and needList asks the next refresh to list (under refreshMu for
	// dead).
	log      changeLog
	dead     deadFiles
	needList atomic.Bool
	// flushedSeq is the largest sequence number that a finished flush
	// wrote into an SST: batches at or below it leave the Version at the
	// next refresh (unflushed.go).
	flushedSeq atomic.Uint64
	// refreshes, listings, changed and refreshNanos are the cumulative
	// RefreshCounts.
	refreshes, listings, changed, refreshNanos atomic.Uint64
	// failed holds the error of the last refresh if it failed (nil after a
	// refresh that succeeded).
	failed atomic.Pointer[error]

	lifeMu sync.Mutex
	stop   chan struct{}
	done   chan struct{}
	closed bool

	// deltas computes and delivers compaction deltas (delta.go).
	deltas deltaState
}

// NewTracker returns a Tracker whose Current Version is empty until the first
// Refresh.
func NewTracker(cfg TrackerConfig) *Tracker {
	cfg = cfg.withDefaults()
	t := &Tracker{cfg: cfg, signal: make(chan struct{}, 1)}
	t.needList.Store(true) // the DB's files before any event
	t.deltas.init()
	t.current.Store(&Version{})
	if cfg.DB != nil {
		t.db.Store(cfg.DB)
	}
	return t
}

// SetDB sets the DB (after pebble.Open) and asks the background goroutine, if
// started, for a refresh.
func (t *Tracker) SetDB(db *pebble.DB) {
	t.db.Store(db)
	t.needList.Store(true)
	t.signalRefresh()
}

// Config returns the tracker's configuration, with the defaults filled in
// and the DB that SetDB set: what Recompute reads the live SSTs with.
func (t *Tracker) Config() TrackerConfig {
	cfg := t.cfg
	cfg.DB = t.db.Load()
	return cfg
}

// Current returns the current Version; never nil.
func (t *Tracker) Current() *Version { return t.current.Load() }

// Err returns the error of the last Refresh if it failed, and nil once one
// succeeds. A failed refresh publishes nothing: Current stays a complete
// Version of an earlier file set, which lags behind the DB until a refresh
// succeeds. The background goroutine (Start) retries failed refreshes with
// a backoff, so the lag ends by itself once the fault does.
func (t *Tracker) Err() error {
	if p := t.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// signalRefresh wakes the background goroutine; signals coalesce.
func (t *Tracker) signalRefresh() {
	select {
	case t.signal <- struct{}{}:
	default:
	}
}

// EventListener returns the callbacks to install in pebble.Options (combine
// with others through pebble.TeeEventListener). They log the changes to the
// file set that the events name (changes.go) and wake the background
// goroutine; CompactionEnd also queues the compaction for its delta
// (delta.go).
func (t *Tracker) EventListener() pebble.EventListener {
	return pebble.EventListener{
		FlushEnd: func(info pebble.FlushInfo) {
			// Logged before the mark is raised: a refresh reads the mark
			// first, so the flush that raised it is in the log it drains.
			t.logFlush(info)
			t.recordFlush(info)
			t.signalRefresh()
		},
		CompactionEnd: func(info pebble.CompactionInfo) {
			// Logged before it is queued for its delta: a refresh counts
			// the queue first (see refreshLocked).
			t.logCompaction(info)
			t.recordCompaction(info)
			t.signalRefresh()
		},
		TableIngested: func(info pebble.TableIngestInfo) {
			t.logIngest(info)
			t.signalRefresh()
		},
		TableDeleted: func(info pebble.TableDeleteInfo) {
			t.logDeleted(info)
			t.signalRefresh()
		},
	}
}

// Start starts the background goroutine that refreshes on events. It is a
// no-op if started before or closed.
func (t *Tracker) Start() {
	t.lifeMu.Lock()
	defer t.lifeMu.Unlock()
	if t.stop != nil || t.closed {
		return
	}
	t.stop, t.done = make(chan struct{}), make(chan struct{})
	go t.run(t.stop, t.done)
}

func (t *Tracker) run(stop, done chan struct{}) {
	defer close(done)
	// A compaction event whose result a refresh did not list yet asks for
	// another refresh after a backoff (see delta.go), and so does a refresh
	// that failed (an I/O error reading a new file's properties): the event
	// that asked for it will not come again, and on a quiet store no other
	// event may come at all.
	var retry *time.Timer
	var retryC <-chan time.Time
	backoff, failBackoff := minRetryBackoff, minFailBackoff
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	arm := func(d time.Duration) {
		if retryC == nil {
			retry = time.NewTimer(d)
			retryC = retry.C
		}
	}
	refresh := func(list bool) {
		refresh := t.RefreshSignalled
		if list {
			refresh = t.Refresh
		}
		if err := refresh(); err != nil && !errors.Is(err, ErrNoDB) {
			t.cfg.Logger.Errorf("lsmstats/stats: refresh: %v; retrying in %s", err, failBackoff)
			arm(failBackoff)
			failBackoff = min(2*failBackoff, maxFailBackoff)
			return
		}
		failBackoff = minFailBackoff
		if t.deltas.pendingLen() == 0 {
			backoff = minRetryBackoff
		}
	}
	for {
		select {
		case <-stop:
			return
		case <-t.signal:
			refresh(false)
		case <-retryC:
			retryC = nil
			refresh(true)
		case <-t.deltas.retry:
			if retryC == nil {
				arm(backoff)
				backoff = min(2*backoff, maxRetryBackoff)
			}
		case <-t.deltas.feed.Ready():
			t.deltas.feed.Deliver()
		}
	}
}

// Close stops the background goroutine and waits for it, and closes the
// channels of compaction subscribers. Close the Tracker before the DB: a
// refresh lists the DB's SSTs. Close is idempotent and always returns nil.
func (t *Tracker) Close() error {
	t.lifeMu.Lock()
	defer t.lifeMu.Unlock()
	if t.stop != nil && !t.closed {
		close(t.stop)
		<-t.done
	}
	if !t.closed {
		t.deltas.feed.Close()
	}
	t.closed = true
	return nil
}

// Refresh brings Current up to date with the DB's live SSTs: it lists
// them, and reads only the files that are new since the last refresh.
func (t *Tracker) Refresh() error {
	t.refreshMu.Lock()
	defer t.refreshMu.Unlock()
	return t.refreshLocked(true)
}

// RefreshSignalled brings Current up to date with every change reported to
// the tracker's EventListener so far — flushes, compactions, ingestions
// (TableIngested fires before Ingest returns) — from the changes alone: it
// reads the new files and lists the DB's SSTs only when the changes do not
// add up, or a listing is due (see changes.go). Call it after an ingestion;
// the background goroutine calls it on every event.
func (t *Tracker) RefreshSignalled() error {
	t.refreshMu.Lock()
	defer t.refreshMu.Unlock()
	return t.refreshLocked(false)
}

// RefreshCounts are a Tracker's cumulative refresh figures.
type RefreshCounts struct {
	// Refreshes counts the refreshes that succeeded; Listings those of
	// them that listed the DB's SSTs.
	Refreshes, Listings uint64
	// ChangedFiles counts the files that arrived in, left or moved within
	// the published Versions.
	ChangedFiles uint64
	// Time is the time the refreshes took, failed ones included.
	Time time.Duration
}

// RefreshCounts returns the tracker's cumulative refresh figures.
func (t *Tracker) RefreshCounts() RefreshCounts {
	return RefreshCounts{
		Refreshes: t.refreshes.Load(), Listings: t.listings.Load(),
		ChangedFiles: t.changed.Load(), Time: time.Duration(t.refreshNanos.Load()),
	}
}

func (t *Tracker) refreshLocked(list bool) error {
	db := t.db.Load()
	if db == nil {
		return ErrNoDB
	}
	start := time.Now()
	defer func() { t.refreshNanos.Add(uint64(time.Since(start))) }()
	// The compaction events queued before the changes are drained are in
	// them (CompactionEnd logs its change first), and so are the flushes
	// at or below the mark (FlushEnd logs first, too).
	n := t.deltas.pendingLen()
	flushedSeq := t.flushedSeq.Load()
	changes, lost := t.log.drain()
	base := t.current.Load()
	l := loader{cfg: &t.cfg, cache: map[uint64]*liveFile{}, flushedSeq: flushedSeq}
	var v *Version
	var err error
	if !list && !lost && !t.needList.Load() {
		v, err = l.apply(context.Background(), base, changes, &t.dead)
	} else {
		t.dead.addRemoved(changes)
	}
	if err == nil && v == nil {
		// A listing: the barrier makes every compaction drained above
		// install its read state, which the listing reads.
		t.listings.Add(1)
		barrier(db)
		v, err = l.derive(context.Background(), db, base)
	}
	if err != nil {
		// The changes drained are gone: the next refresh lists.
		t.needList.Store(true)
		t.failed.Store(&err)
		return err
	}
	t.needList.Store(false)
	t.current.Store(v)
	t.failed.Store(nil)
	t.refreshes.Add(1)
	t.changed.Add(uint64(l.changed))
	if t.deltas.resolve(n, base, v) {
		// A compaction's result is not in v yet: the goroutine lists
		// after a backoff.
		select {
		case t.deltas.retry <- struct{}{}:
		default:
		}
	}
	return nil
}

// barrier returns once Pebble's mutex was free: every event callback that
// ran before it has finished, with the read state its change installs.
func barrier(db *pebble.DB) {
	if s := db.NewSnapshot(); s != nil {
		_ = s.Close()
	}
}

// Recompute builds a Version from scratch over the live SSTs, reading every
// file; it does not change the tracker. Incremental and recomputed Versions
// must not differ (DiffVersions).
func (t *Tracker) Recompute() (*Version, error) {
	return Recompute(t.Config())
}

// Recompute builds a Version from scratch over the live SSTs of cfg.DB.
func Recompute(cfg TrackerConfig) (*Version, error) {
	if cfg.DB == nil {
		return nil, ErrNoDB
	}
	cfg = cfg.withDefaults()
	l := loader{cfg: &cfg, cache: map[uint64]*liveFile{}}
	return l.derive(context.Background(), cfg.DB, &Version{})
}

// CheckFile checks the identity
//
//	Σ (Entries + PebbleTombstones) + MetaKeys + Foreign + NumRangeDeletions == NumEntries
//
// for one file and returns an error marked ErrEntriesMismatch naming the
// file and the terms if it fails.
func CheckFile(fi FileInfo) error {
	if fi.Summary == nil {
		return errors.Wrapf(ErrEntriesMismatch, "sst %06d: no summary", fi.FileNum)
	}
	points := fi.Summary.PointKeys()
	if points+fi.NumRangeDeletions != fi.NumEntries {
		var entries, tombs uint64
		for _, ts := range fi.Summary.Tables {
			for _, vs := range ts.Vnodes {
				entries += vs.Counts.Entries
				tombs += vs.Counts.PebbleTombstones
			}
		}
		return errors.Wrapf(ErrEntriesMismatch,
			"sst %06d: entries %d + pebble tombstones %d + meta %d + foreign %d + range deletions %d = %d, Pebble's NumEntries = %d",
			fi.FileNum, entries, tombs, fi.Summary.MetaKeys, fi.Summary.Foreign, fi.NumRangeDeletions,
			points+fi.NumRangeDeletions, fi.NumEntries)
	}
	return nil
}

// sstRef is one live SST of a listing (small, to sort cheaply).
type sstRef struct {
	fileNum uint64
	level   int
	info    *pebble.SSTableInfo
}

func (r *sstRef) backing() uint64               { return uint64(r.info.BackingSSTNum) }
func (r *sstRef) smallest() sstable.InternalKey { return r.info.Smallest }
func (r *sstRef) largest() sstable.InternalKey  { return r.info.Largest }

func listSSTs(db *pebble.DB) ([]sstRef, error) {
	levels, err := db.SSTables()
	if err != nil {
		return nil, errors.Wrap(err, "lsmstats/stats: listing tables")
	}
	n := 0
	for _, tables := range levels {
		n += len(tables)
	}
	refs := make([]sstRef, 0, n)
	for level, tables := range levels {
		for i := range tables {
			refs = append(refs, sstRef{fileNum: uint64(tables[i].FileNum), level: level, info: &tables[i]})
		}
	}
	slices.SortFunc(refs, func(a, b sstRef) int { return cmp.Compare(a.fileNum, b.fileNum) })
	return refs, nil
}

// loader reads files for one refresh (or recomputation); cache keeps the
// files it read across listing attempts. The unflushed batches of the base
// Version at or below flushedSeq leave it (unflushed.go).
type loader struct {
	cfg        *TrackerConfig
	cache      map[uint64]*liveFile
	flushedSeq uint64
	// changed counts the files that arrived, left or moved in the
	// Versions next derived.
	changed int
}

// derive lists db's SSTs and returns the Version that follows base.
func (l *loader) derive(ctx context.Context, db *pebble.DB, base *Version) (*Version, error) {
	vanished := map[uint64]bool{}
	for attempt := 1; ; attempt++ {
		refs, err := listSSTs(db)
		if err != nil {
			return nil, err
		}
		v, err := l.diff(ctx, base, refs, vanished, attempt == maxListAttempts)
		if err != nil || v != nil {
			return v, err
		}
	}
}

// diff derives the Version for refs from base. If a new file vanished it
// returns a nil Version (list again), unless final: then it leaves the file
// out. vanished holds the files that vanished in earlier listings of the
// refresh: one listed again is missing, not gone (Pebble never reuses a
// file number, and deletes a file only once no version lists it), and the
// refresh fails with an error marked as corruption.
func (l *loader) diff(ctx context.Context, base *Version, refs []sstRef, vanished map[uint64]bool, final bool) (*Version, error) {
	// The base's files are compared by their slots: only the files that
	// left, arrived or moved are touched. The new files are read first,
	// several at once.
	old, oldSlots := base.files, base.slots
	var fresh []*sstRef
	for i, j := 0, 0; j < len(refs); {
		switch {
		case i < len(old) && oldSlots[i].num < refs[j].fileNum:
			i++
		case i == len(old) || refs[j].fileNum < oldSlots[i].num:
			fresh = append(fresh, &refs[j])
			j++
		default:
			i++
			j++
		}
	}
	loaded := l.loadAll(ctx, fresh, final)

	files := make([]*liveFile, 0, len(refs))
	slots := make([]fileSlot, 0, len(refs))
	var added, removed []*liveFile
	moved := 0
	i, j, k := 0, 0, 0
	for i < len(old) || j < len(refs) {
		switch {
		case j == len(refs) || (i < len(old) && oldSlots[i].num < refs[j].fileNum):
			removed = append(removed, old[i])
			i++
		case i == len(old) || refs[j].fileNum < oldSlots[i].num:
			f, err := loaded[k].f, loaded[k].err
			k++
			if err != nil {
				if oserror.IsNotExist(err) {
					num := refs[j].backing()
					if vanished[num] {
						return nil, lsmstats.MarkCorruption(errors.Wrapf(err,
							"lsmstats/stats: sst %06d is in Pebble's current version, but its file is missing", num))
					}
					vanished[num] = true
					if !final {
						return nil, nil
					}
					l.cfg.Logger.Infof("lsmstats/stats: sst %06d vanished before it was read; left out until the next refresh", refs[j].fileNum)
					j++
					continue
				}
				return nil, err
			}
			added = append(added, f)
			files = append(files, f)
			slots = append(slots, fileSlot{refs[j].fileNum, refs[j].level})
			j++
		default:
			f := old[i]
			if oldSlots[i].level != refs[j].level {
				m := *f
				m.info.Level = refs[j].level
				f = &m
				moved++
			}
			files = append(files, f)
			slots = append(slots, fileSlot{refs[j].fileNum, refs[j].level})
			i++
			j++
		}
	}
	return l.next(base, files, slots, added, removed, moved), nil
}

// next returns the Version of files (with their slots) that follows base
// when the files added arrived, removed left and, if anyMoved, some moved
// to another level; the unflushed batches at or below l.flushedSeq leave.
func (l *loader) next(base *Version, files []*liveFile, slots []fileSlot, added, removed []*liveFile, moved int) *Version {
	l.changed += len(added) + len(removed) + moved
	mem := base.mem
	flushed := 0
	for flushed < len(mem) && mem[flushed].batchSeq <= l.flushedSeq {
		flushed++
	}
	if len(added) == 0 && len(removed) == 0 && moved == 0 && flushed == 0 {
		return base // nothing changed: keep the Version
	}
	b := newBuilder(base)
	for _, f := range mem[:flushed] {
		b.apply(f, false)
	}
	for _, f := range removed {
		b.apply(f, false)
	}
	for _, f := range added {
		b.apply(f, true)
	}
	return b.finish(files, slots, rebuiltAfter(base.rebuilt, removed, added), mem[flushed:len(mem):len(mem)])
}

// rebuiltAfter returns the rebuilt files of a Version whose base had
// rebuilt, after the files removed left and added arrived (a moved file
// keeps its entry).
func rebuiltAfter(rebuilt []FileError, removed, added []*liveFile) []FileError {
	gone := func(e FileError) bool {
		return slices.ContainsFunc(removed, func(f *liveFile) bool { return f.info.FileNum == e.FileNum })
	}
	out := rebuilt
	if slices.ContainsFunc(rebuilt, gone) {
		out = slices.DeleteFunc(slices.Clone(rebuilt), gone)
	}
	grew := false
	for _, f := range added {
		if f.rebuildErr != nil {
			if !grew {
				out, grew = slices.Clone(out), true
			}
			out = append(out, FileError{FileNum: f.info.FileNum, Err: f.rebuildErr})
		}
	}
	if grew {
		slices.SortFunc(out, func(a, b FileError) int { return cmp.Compare(a.FileNum, b.FileNum) })
	}
	return out
}

// openReadable opens backing SST fileNum: the file in Dir, or else the
// remote SST (OpenRemote).
func (cfg *TrackerConfig) openReadable(ctx context.Context, fileNum uint64) (objstorage.Readable, error) {
	file, err := cfg.FS.Open(cfg.FS.PathJoin(cfg.Dir, fmt.Sprintf("%06d.sst", fileNum)))
	if err != nil {
		if cfg.OpenRemote != nil && oserror.IsNotExist(err) {
			return cfg.OpenRemote(ctx, fileNum)
		}
		return nil, err
	}
	readable, err := sstable.NewSimpleReadable(file)
	if err != nil {
		_ = file.Close()
		return nil, err
	}
	return readable, nil
}

// nameObject names the object of SST fileNum in err's message, unless the
// SST is local or the message names it already.
func (cfg *TrackerConfig) nameObject(err error, fileNum uint64) error {
	if err == nil || cfg.ObjectName == nil {
		return err
	}
	if name := cfg.ObjectName(fileNum); name != "" && !strings.Contains(err.Error(), name) {
		return errors.Wrapf(err, "%s", name)
	}
	return err
}

// loadFile reads one new SST, logging to log. Errors satisfying
// oserror.IsNotExist mean the file vanished. Safe to call from several
// goroutines at once: it reads l.cfg only.
func (l *loader) loadFile(ctx context.Context, ref *sstRef, log pebble.Logger) (_ *liveFile, err error) {
	defer func() { err = l.cfg.nameObject(err, ref.backing()) }()
	r, err := l.open(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer func() { _ = r.Close() }()
	props, err := r.ReadPropertiesBlock(ctx, nil)
	if err != nil {
		return nil, errors.Wrapf(err, "lsmstats/stats: reading properties of sst %06d", ref.backing())
	}
	info := FileInfo{
		FileNum:           ref.fileNum,
		BackingNum:        ref.backing(),
		Level:             ref.level,
		Size:              ref.info.Size,
		Virtual:           ref.info.Virtual,
		Smallest:          slices.Clone(ref.smallest().UserKey),
		Largest:           slices.Clone(ref.largest().UserKey),
		LargestExclusive:  ref.largest().IsExclusiveSentinel(),
		NumEntries:        props.NumEntries,
		NumRangeDeletions: props.NumRangeDeletions,
		RawKeySize:        props.RawKeySize,
		RawValueSize:      props.RawValueSize,
	}
	var rebuilt error
	if ref.info.Virtual {
		err = summarizeVirtual(ctx, r, ref, props, &info)
	} else {
		rebuilt, err = l.summarize(ctx, r, ref, &info, log)
	}
	if err != nil {
		return nil, err
	}
	f := newLiveFile(info)
	f.rebuildErr = rebuilt
	return f, nil
}

// cached returns the file of ref loaded before, at ref's level.
func (l *loader) cached(ref *sstRef) (*liveFile, bool) {
	f, ok := l.cache[ref.fileNum]
	if ok && f.info.Level != ref.level {
		moved := *f
		moved.info.Level = ref.level
		f = &moved
	}
	return f, ok
}

// open opens the backing file of ref.
func (l *loader) open(ctx context.Context, ref *sstRef) (*sstable.Reader, error) {
	readable, err := l.cfg.openReadable(ctx, ref.backing())
	if err != nil {
		return nil, errors.Wrapf(err, "lsmstats/stats: opening sst %06d", ref.backing())
	}
	ropts := l.cfg.ReaderOptions
	ropts.CacheOpts.FileNum = ref.info.BackingSSTNum // named in Pebble's errors
	r, err := sstable.NewReader(ctx, readable, ropts)
	if err != nil {
		_ = readable.Close()
		return nil, errors.Wrapf(err, "lsmstats/stats: opening sst %06d", ref.backing())
	}
	return r, nil
}

// summarize sets the summary of a physical SST from its statistics
// property or, when the property is missing, corrupt or does not account
// for the file's entries, from the file's keys. rebuilt says why it was
// rebuilt (nil if the property was used); err is a failure to read the
// keys.
func (l *loader) summarize(ctx context.Context, r *sstable.Reader, ref *sstRef, info *FileInfo, log pebble.Logger) (rebuilt, err error) {
	rebuilt = payloadSummary(r, info)
	if rebuilt == nil {
		return nil, nil
	}
	log.Errorf("lsmstats/stats: sst %06d: unusable payload: %v; rebuilding its summary from its keys", ref.fileNum, rebuilt)
	sc, err := scan(ctx, r, ref)
	if err != nil {
		return nil, err
	}
	info.Summary, info.Source = sc.summary, FromRebuild
	if err := CheckFile(*info); err != nil {
		log.Errorf("lsmstats/stats: sst %06d: rebuilt summary: %v", ref.fileNum, err)
		rebuilt = errors.WithSecondaryError(rebuilt, err)
	}
	return rebuilt, nil
}

// payloadSummary sets info's summary from r's statistics property, or
// returns why the property cannot be used.
func payloadSummary(r *sstable.Reader, info *FileInfo) error {
	prop, ok := r.UserProperties[sstsummary.CollectorName]
	if !ok {
		return errors.Newf("lsmstats/stats: no %s property", sstsummary.CollectorName)
	}
	s, err := sstsummary.DecodeSummary([]byte(prop))
	if err != nil {
		return err
	}
	info.Summary = s
	return CheckFile(*info)
}

// summarizeVirtual sets the summary of a virtual SST from the keys of its
// backing file within its bounds (the property covers the whole backing
// file), and apportions the backing file's key and value bytes to it.
func summarizeVirtual(ctx context.Context, r *sstable.Reader, ref *sstRef, props sstable.Properties, info *FileInfo) error {
	sc, err := scan(ctx, r, ref)
	if err != nil {
		return err
	}
	physPoints := props.NumEntries - props.NumRangeDeletions
	info.Summary = sc.summary
	info.Source = FromVirtualScan
	info.NumEntries = sc.points + sc.rangeDels
	info.NumRangeDeletions = sc.rangeDels
	info.RawKeySize = apportion(props.RawKeySize, sc.points, max(physPoints, sc.points))
	// Values go with puts: scale by the share of the backing file's puts
	// (from its payload) when it is usable, else by point keys.
	info.RawValueSize = apportion(props.RawValueSize, sc.points, max(physPoints, sc.points))
	if prop, ok := r.UserProperties[sstsummary.CollectorName]; ok {
		if backing, err := sstsummary.DecodeSummary([]byte(prop)); err == nil {
			if puts := backing.Puts(); puts >= sc.summary.Puts() {
				info.RawValueSize = apportion(props.RawValueSize, sc.summary.Puts(), puts)
			}
		}
	}
	return nil
}

type scanResult struct {
	summary   *sstsummary.FileSummary
	points    uint64
	rangeDels uint64
}

// scan classifies the point keys of r within ref's bounds with the
// collector's code, and counts the range deletions overlapping the bounds.
// Values are never read; blob handles (value separation) are decoded only as
// far as DebugHandlesBlobContext goes, where AssertNoBlobHandles would panic.
func scan(ctx context.Context, r *sstable.Reader, ref *sstRef) (scanResult, error) {
	var res scanResult
	it, err := r.NewIter(sstable.NoTransforms, nil, nil, sstable.DebugHandlesBlobContext)
	if err != nil {
		return res, errors.Wrapf(err, "lsmstats/stats: iterating sst %06d", ref.fileNum)
	}
	c := sstsummary.NewScanCollector()
	cmp := keys.Compare
	smallest, largest := ref.smallest(), ref.largest()
	for kv := it.SeekGE(smallest.UserKey, 0); kv != nil; kv = it.Next() {
		if !afterLower(cmp, kv.K, smallest) {
			continue
		}
		if !beforeUpper(cmp, kv.K, largest) {
			break
		}
		c.Add(kv.K.UserKey, kv.K.Kind())
		res.points++
	}
	err = errors.CombineErrors(it.Error(), it.Close())
	if err == nil {
		err = c.Err()
	}
	if err != nil {
		return res, errors.Wrapf(err, "lsmstats/stats: iterating sst %06d", ref.fileNum)
	}
	res.summary = c.Summary()

	rit, err := r.NewRawRangeDelIter(ctx, sstable.NoFragmentTransforms, sstable.NoReadEnv)
	if err != nil {
		return res, errors.Wrapf(err, "lsmstats/stats: range deletions of sst %06d", ref.fileNum)
	}
	if rit != nil {
		defer rit.Close()
		span, err := rit.First()
		for ; span != nil && err == nil; span, err = rit.Next() {
			// [Start, End) overlaps [smallest, largest]?
			if cmp(span.End, smallest.UserKey) <= 0 {
				continue
			}
			c := cmp(span.Start, largest.UserKey)
			if c > 0 || (c == 0 && largest.IsExclusiveSentinel()) {
				break
			}
			res.rangeDels += uint64(len(span.Keys))
		}
		if err != nil {
			return res, errors.Wrapf(err, "lsmstats/stats: range deletions of sst %06d", ref.fileNum)
		}
	}
	return res, nil
}

// afterLower reports k >= lower and beforeUpper k <= upper (k < upper for
// an exclusive sentinel), by user key: the bounds' trailers may carry an
// ingested file's global seqnum, which the raw iterator (NoTransforms) does
// not apply, and virtual bounds never split one user key.
func afterLower(cmp func(a, b []byte) int, k, lower sstable.InternalKey) bool {
	return cmp(k.UserKey, lower.UserKey) >= 0
}

func beforeUpper(cmp func(a, b []byte) int, k, upper sstable.InternalKey) bool {
	c := cmp(k.UserKey, upper.UserKey)
	return c < 0 || (c == 0 && !upper.IsExclusiveSentinel())
}
