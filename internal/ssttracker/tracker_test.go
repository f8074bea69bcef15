package ssttracker

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats"
	"github.com/lsmstats/lsmstats/internal/sstsummary"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestTrackerBackground: events drive refreshes; Close stops the goroutine
// (no leak); Start after Close is a no-op; Close is idempotent.
func TestTrackerBackground(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := openPhys(t, func(o *pebble.Options) {
		o.DisableAutomaticCompactions = false
		o.L0CompactionThreshold = 2
	})
	e.tr.Start()
	e.tr.Start()
	var want uint64
	for i := range 6 {
		e.applyBatch(physParseOps(t, fmt.Sprintf("put 1 %d 1 %d\nput 1 %d 2 %d", i%3, i+1, i%3, i+1)))
		want += 2
		require.NoError(t, e.db.Flush())
	}
	// Concurrent readers see consistent Versions while the goroutine
	// refreshes.
	var wg sync.WaitGroup
	var stop atomic.Bool
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				v := e.tr.Current()
				var sum uint64
				for _, f := range Files(v) {
					for _, ts := range f.Summary.Tables {
						for _, vs := range ts.Vnodes {
							sum += vs.Counts.Entries
						}
					}
				}
				if sum != tableEntries(v, 1) {
					panic(fmt.Sprintf("inconsistent version: files %d vs totals %d", sum, tableEntries(v, 1)))
				}
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for tableEntries(e.tr.Current(), 1) != want {
		require.True(t, time.Now().Before(deadline), "background refresh never caught up")
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	require.NoError(t, e.tr.Close())
	require.NoError(t, e.tr.Close())
	e.tr.Start() // no-op after Close
	e.close()
}

func TestTrackerNoDB(t *testing.T) {
	tr := NewTracker(TrackerConfig{})
	require.True(t, errors.Is(tr.Refresh(), ErrNoDB))
	_, err := tr.Recompute()
	require.True(t, errors.Is(err, ErrNoDB))
	require.Zero(t, tr.Current().NumFiles())
	require.NoError(t, tr.Close())
}

// physFlakyFS fails opens of chosen files.
type physFlakyFS struct {
	vfs.FS
	mu    sync.Mutex
	fail  map[string]int // file name -> remaining failures (<0: forever)
	err   error
	opens int
}

func (fs *physFlakyFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	fs.mu.Lock()
	fs.opens++
	for suffix, n := range fs.fail {
		if strings.HasSuffix(name, suffix) && n != 0 {
			fs.fail[suffix] = n - 1
			fs.mu.Unlock()
			return nil, &os.PathError{Op: "open", Path: name, Err: fs.err}
		}
	}
	fs.mu.Unlock()
	return fs.FS.Open(name, opts...)
}

// TestTrackerVanishedFile: a listed file that cannot be found makes the
// refresh list again; if the next listing lists it again, it is missing:
// the refresh fails (corruption), and a later refresh adds it once it is
// back.
func TestTrackerVanishedFile(t *testing.T) {
	e := openPhys(t, nil)
	flaky := &physFlakyFS{FS: e.fs, fail: map[string]int{}, err: os.ErrNotExist}
	tr := NewTracker(TrackerConfig{DB: e.db, Dir: e.dir, FS: flaky, ReaderOptions: e.opts.MakeReaderOptions(), Logger: e.log})
	defer tr.Close()

	e.applyBatch(physParseOps(t, "put 1 1 1 1"))
	require.NoError(t, e.db.Flush())
	e.applyBatch(physParseOps(t, "put 1 2 1 1"))
	require.NoError(t, e.db.Flush())
	files := Files(e.refresh())
	require.Len(t, files, 2)
	second := fmt.Sprintf("%06d.sst", files[1].FileNum)

	// Vanishes once: the refresh lists again and reads it.
	flaky.fail[second] = 1
	require.NoError(t, tr.Refresh())
	require.Equal(t, 2, tr.Current().NumFiles())

	// Missing for good while Pebble still lists it: not a file that a
	// compaction removed (the next listing would not list it), but a file
	// lost. The refresh fails with an error marked as corruption that names
	// it, and publishes nothing.
	tr2 := NewTracker(TrackerConfig{DB: e.db, Dir: e.dir, FS: flaky, ReaderOptions: e.opts.MakeReaderOptions(), Logger: e.log})
	defer tr2.Close()
	flaky.fail[second] = -1
	err := tr2.Refresh()
	require.Error(t, err)
	require.True(t, lsmstats.IsCorruption(err), "%v", err)
	require.ErrorContains(t, err, fmt.Sprintf("sst %06d is in Pebble's current version, but its file is missing", files[1].FileNum))
	require.Equal(t, 0, tr2.Current().NumFiles())
	// It comes back: the next refresh adds it.
	flaky.fail[second] = 0
	require.NoError(t, tr2.Refresh())
	require.Equal(t, 2, tr2.Current().NumFiles())
	require.Equal(t, uint64(1), tr2.Current().Vnode(1, 2).Entries)
}

// TestTrackerReadErrorKeepsVersion: an I/O error fails the refresh and
// publishes nothing.
func TestTrackerReadErrorKeepsVersion(t *testing.T) {
	e := openPhys(t, nil)
	flaky := &physFlakyFS{FS: e.fs, fail: map[string]int{}, err: errors.New("injected I/O error")}
	tr := NewTracker(TrackerConfig{DB: e.db, Dir: e.dir, FS: flaky, ReaderOptions: e.opts.MakeReaderOptions(), Logger: e.log})
	defer tr.Close()
	e.applyBatch(physParseOps(t, "put 1 1 1 1"))
	require.NoError(t, e.db.Flush())
	require.NoError(t, tr.Refresh())
	before := tr.Current()

	e.applyBatch(physParseOps(t, "put 1 2 1 1"))
	require.NoError(t, e.db.Flush())
	files := Files(e.refresh())
	flaky.fail[fmt.Sprintf("%06d.sst", files[1].FileNum)] = -1
	err := tr.Refresh()
	require.ErrorContains(t, err, "injected I/O error")
	require.Same(t, before, tr.Current())
	flaky.fail = map[string]int{}
	require.NoError(t, tr.Refresh())
	require.Equal(t, 2, tr.Current().NumFiles())
}

// TestTrackerRefreshSignalled: after the first listing, the Version follows
// ingestions, a flush and compactions (a move and a merge) from the changes
// their events report, with no further listing of the DB's tables, and
// equals a recomputation after each.
func TestTrackerRefreshSignalled(t *testing.T) {
	e := openPhys(t, nil)
	require.NoError(t, e.tr.RefreshSignalled(), "the first one lists the DB's files")
	require.Equal(t, uint64(1), e.tr.listings.Load())
	check := func(what string) {
		t.Helper()
		require.NoError(t, e.tr.RefreshSignalled(), what)
		re, err := e.tr.Recompute()
		require.NoError(t, err)
		require.NoError(t, DiffVersions(e.tr.Current(), re), what)
		require.Equal(t, uint64(1), e.tr.listings.Load(), "%s: listed", what)
	}

	e.tr.Start()
	const n = 30
	for i := range n {
		e.ingest(physParseOps(t, fmt.Sprintf("put 1 %d 1 1", i)), nil)
		check(fmt.Sprintf("ingestion %d", i))
		require.Equal(t, i+1, e.tr.Current().NumFiles(), "ingestion %d", i)
	}
	// The flushed file (table 2) overlaps none of the ingested ones: the
	// compaction moves it down.
	e.applyBatch(physParseOps(t, "put 2 0 1 1"))
	require.NoError(t, e.db.Flush())
	check("flush")
	require.Equal(t, n+1, e.tr.Current().NumFiles())
	e.compactAll()
	check("move")
	// Two overlapping files in L0 merge into one.
	for i := range 2 {
		e.applyBatch(physParseOps(t, fmt.Sprintf("put 3 %d 1 1\nput 3 9 1 %d", i, i)))
		require.NoError(t, e.db.Flush())
	}
	check("flushes")
	e.compactAll()
	check("merge")
	c := e.tr.RefreshCounts()
	require.Equal(t, uint64(1), c.Listings)
	require.GreaterOrEqual(t, c.ChangedFiles, uint64(n+1+1+2+2+1), "ingested, flushed, moved, merged files")
	require.NoError(t, e.tr.Close())
}

// eventRecorder keeps the events of a DB, to replay them to a tracker in
// another order.
type eventRecorder struct {
	mu     sync.Mutex
	events []func(pebble.EventListener)
}

func (r *eventRecorder) listener() *pebble.EventListener {
	add := func(f func(pebble.EventListener)) {
		r.mu.Lock()
		r.events = append(r.events, f)
		r.mu.Unlock()
	}
	return &pebble.EventListener{
		FlushEnd:      func(i pebble.FlushInfo) { add(func(l pebble.EventListener) { l.FlushEnd(i) }) },
		CompactionEnd: func(i pebble.CompactionInfo) { add(func(l pebble.EventListener) { l.CompactionEnd(i) }) },
		TableIngested: func(i pebble.TableIngestInfo) { add(func(l pebble.EventListener) { l.TableIngested(i) }) },
		TableDeleted:  func(i pebble.TableDeleteInfo) { add(func(l pebble.EventListener) { l.TableDeleted(i) }) },
	}
}

func (r *eventRecorder) take() []func(pebble.EventListener) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

// TestTrackerEventOrder: Pebble fires TableIngested after it releases its
// mutex, so a compaction that consumed the ingested files can be reported
// first. A tracker that gets the compaction's event, then the ingestion's,
// ends with the compaction's output and no trace of the ingested files,
// without listing; one that gets a deletion of a file it holds (a removal
// without an event) lists.
func TestTrackerEventOrder(t *testing.T) {
	rec := &eventRecorder{}
	e := openPhys(t, func(o *pebble.Options) { o.EventListener = rec.listener() })
	tr := NewTracker(TrackerConfig{DB: e.db, Dir: e.dir, ReaderOptions: e.opts.MakeReaderOptions(), Logger: e.log})
	defer tr.Close()
	el := tr.EventListener()
	require.NoError(t, tr.RefreshSignalled())
	require.Equal(t, 0, tr.Current().NumFiles())

	e.ingest(physParseOps(t, "put 1 1 1 1\nput 1 5 1 1"), nil)
	e.ingest(physParseOps(t, "put 1 3 1 1\nput 1 7 1 1"), nil) // overlaps: above the first
	ingested := rec.take()
	require.Len(t, ingested, 2)
	e.compactAll()
	compacted := rec.take()
	for _, ev := range compacted {
		ev(el)
	}
	require.NoError(t, tr.RefreshSignalled())
	for _, ev := range ingested {
		ev(el)
	}
	require.NoError(t, tr.RefreshSignalled())
	re, err := tr.Recompute()
	require.NoError(t, err)
	require.NoError(t, DiffVersions(tr.Current(), re))
	require.Equal(t, 1, tr.Current().NumFiles())
	require.Equal(t, uint64(4), tableEntries(tr.Current(), 1))
	require.Equal(t, uint64(1), tr.RefreshCounts().Listings)

	live := Files(tr.Current())[0].FileNum
	var del pebble.TableDeleteInfo
	setNum(&del.FileNum, live)
	el.TableDeleted(del)
	require.NoError(t, tr.RefreshSignalled())
	require.Equal(t, uint64(2), tr.RefreshCounts().Listings, "a deletion of a live file: list")
	require.NoError(t, DiffVersions(tr.Current(), re))
}

// TestTrackerReadsOnlyNewFiles: a refresh opens only the files that are new.
func TestTrackerReadsOnlyNewFiles(t *testing.T) {
	e := openPhys(t, nil)
	counting := &physFlakyFS{FS: e.fs, fail: map[string]int{}}
	tr := NewTracker(TrackerConfig{DB: e.db, Dir: e.dir, FS: counting, ReaderOptions: e.opts.MakeReaderOptions(), Logger: e.log})
	defer tr.Close()
	for i := range 5 {
		e.applyBatch(physParseOps(t, fmt.Sprintf("put 1 %d 1 1", i)))
		require.NoError(t, e.db.Flush())
	}
	require.NoError(t, tr.Refresh())
	require.Equal(t, 5, counting.opens)
	e.applyBatch(physParseOps(t, "put 1 9 1 1"))
	require.NoError(t, e.db.Flush())
	require.NoError(t, tr.Refresh())
	require.Equal(t, 6, counting.opens)
	require.NoError(t, tr.Refresh())
	require.Equal(t, 6, counting.opens)
}

// TestVersionImmutable: a Version keeps answering the same after later
// refreshes (copy-on-write).
func TestVersionImmutable(t *testing.T) {
	e := openPhys(t, nil)
	e.applyBatch(physParseOps(t, "put 1 1 1 1\nput 1 1 2 1\nput 1 70 1 1"))
	require.NoError(t, e.db.Flush())
	v1 := e.refresh()
	snap := physFormatVersion(v1)
	e.applyBatch(physParseOps(t, "put 1 1 3 2\ndel 1 70 1 2\nput 2 1 1 2"))
	require.NoError(t, e.db.Flush())
	e.refresh()
	e.compactAll()
	v3 := e.refresh()
	require.Equal(t, snap, physFormatVersion(v1))
	require.NotEqual(t, snap, physFormatVersion(v3))
}

// physVersionOf builds a Version from summaries with the builder.
func physVersionOf(base *Version, add, remove []*liveFile, files []*liveFile) *Version {
	b := newBuilder(base)
	for _, f := range remove {
		b.apply(f, false)
	}
	for _, f := range add {
		b.apply(f, true)
	}
	return b.finish(files, slotsOf(files), nil, nil)
}

// TestVersionIncrementalUnit: random add/remove sequences over summaries
// with vnodes across chunk boundaries equal a from-scratch build, and old
// Versions are not disturbed.
func TestVersionIncrementalUnit(t *testing.T) {
	r := physRand(t)
	mk := func(num uint64) *liveFile {
		var ops []physOp
		for range 1 + r.IntN(40) {
			table := uint32(r.IntN(3))
			vnode := uint16(r.IntN(4)) * 700
			if r.IntN(5) == 0 {
				vnode = math.MaxUint16 - uint16(r.IntN(2))
			}
			kind := pebble.InternalKeyKindSet
			if r.IntN(6) == 0 {
				kind = pebble.InternalKeyKindSingleDelete
			}
			ops = append(ops, physOp{key: physKey(table, vnode, uint64(r.IntN(50)), uint64(r.IntN(3)), byte(r.IntN(2))), kind: kind})
		}
		slices.SortStableFunc(ops, func(a, b physOp) int { return keys.Compare(a.key, b.key) })
		ops = slices.CompactFunc(ops, func(a, b physOp) bool { return keys.Compare(a.key, b.key) == 0 })
		return newLiveFile(FileInfo{FileNum: num, Summary: physCollect(t, ops), RawValueSize: uint64(r.IntN(10000))})
	}
	cur := &Version{}
	var live []*liveFile
	var history []*Version
	var histText []string
	next := uint64(1)
	for range 200 {
		var add, remove []*liveFile
		for range r.IntN(4) {
			add = append(add, mk(next))
			next++
		}
		for i := 0; i < len(live); i++ {
			if r.IntN(4) == 0 {
				remove = append(remove, live[i])
				live = slices.Delete(live, i, i+1)
				i--
			}
		}
		live = append(live, add...)
		cur = physVersionOf(cur, add, remove, slices.Clone(live))
		scratch := physVersionOf(&Version{}, live, nil, slices.Clone(live))
		require.NoError(t, DiffVersions(cur, scratch))
		history = append(history, cur)
		histText = append(histText, physFormatVersion(cur))
		// Sum over a bitmap equals the sum of Vnode.
		for _, id := range cur.Tables() {
			bm := roaring.New()
			var want sstsummary.Counts
			for _, vn := range cur.Vnodes(id) {
				if r.IntN(2) == 0 {
					bm.Add(uint32(vn))
					want.Add(cur.Vnode(id, vn))
				}
			}
			bm.Add(12345) // a vnode without data
			require.Equal(t, want, cur.Sum(id, bm))
			counts, _ := cur.Table(id)
			require.Equal(t, counts, cur.Sum(id, nil))
		}
	}
	for i, v := range history {
		require.Equal(t, histText[i], physFormatVersion(v), "version %d changed", i)
	}
}

// TestRangeBoundsUnit checks Range against the truth on summaries with
// strides well above 1 (many versions and prefixes per vnode).
func TestRangeBoundsUnit(t *testing.T) {
	r := physRand(t)
	var files []*liveFile
	var perFile [][]physOp
	for i := range 4 {
		ops := physRandomOps(r, 2, 2000+r.IntN(3000), 1+r.IntN(5))
		// Distinct versions per file: shift epochs.
		for j := range ops {
			dk, _ := keys.Decode(ops[j].key)
			ops[j].key = keys.AppendVersioned(nil, dk.Table, dk.Vnode, dk.PK, keys.MakeVersion(dk.Version.Epoch()+uint64(10*i), 0), dk.Kind)
		}
		perFile = append(perFile, ops)
		files = append(files, newLiveFile(FileInfo{FileNum: uint64(i + 1), Summary: physCollect(t, ops)}))
	}
	v := physVersionOf(&Version{}, files, nil, files)
	var maxWidth uint64
	queries := 2000
	if physRace {
		queries = 200
	}
	for range queries {
		vnode := uint16(r.IntN(2))
		var lo, hi []byte
		if r.IntN(5) != 0 {
			lo = physPK(uint64(r.IntN(16000)))
		}
		if r.IntN(5) != 0 {
			hi = physPK(uint64(r.IntN(16000)))
		}
		var tr physTruth
		if lo == nil || hi == nil || string(lo) < string(hi) {
			for _, ops := range perFile {
				ft := physRangeTruth(ops, vnode, lo, hi)
				tr.puts += ft.puts
				tr.deletes += ft.deletes
				tr.headPuts += ft.headPuts
				tr.prefixes += ft.prefixes
			}
		}
		rc := CountRange(v, 1, vnode, lo, hi)
		msg := fmt.Sprintf("v%d [%x, %x)", vnode, lo, hi)
		requireContains(t, rc.Puts, tr.puts, msg)
		requireContains(t, rc.Deletes, tr.deletes, msg)
		requireContains(t, rc.HeadPuts, tr.headPuts, msg)
		requireContains(t, rc.Prefixes, tr.prefixes, msg)
		requireContains(t, rc.Entries, tr.puts+tr.deletes, msg)
		maxWidth = max(maxWidth, rc.Entries.Hi-rc.Entries.Lo)
	}
	t.Logf("widest entries bound: %d (vnode entries %d)", maxWidth, v.Vnode(1, 0).Entries)
}

// physRangeTruth counts the sorted ops of one file of (1, vnode) with
// lo <= pk < hi.
func physRangeTruth(all []physOp, vnode uint16, lo, hi []byte) physTruth {
	var tr physTruth
	var last []byte
	for _, op := range all {
		dk, _ := keys.Decode(op.key)
		if dk.Vnode != vnode || (lo != nil && string(dk.PK) < string(lo)) || (hi != nil && string(dk.PK) >= string(hi)) {
			continue
		}
		if string(dk.PK) != string(last) {
			tr.prefixes++
			if dk.Kind == keys.KindPut {
				tr.headPuts++
			}
			last = dk.PK
		}
		if dk.Kind == keys.KindPut {
			tr.puts++
		} else {
			tr.deletes++
		}
	}
	return tr
}

// TestTrackerCorruptPayload ingests SSTs whose payload is damaged in every
// way the decoder knows (and one without the property): each is logged with
// its file number, rebuilt from its keys and listed in Rebuilt, and the
// counts equal a direct scan of the files.
func TestTrackerCorruptPayload(t *testing.T) {
	e := openPhys(t, nil)
	e.applyBatch(physParseOps(t, "put 1 0 1 1\nput 1 0 2 1\ndel 1 1 1 1"))
	require.NoError(t, e.db.Flush())
	modes := []string{"garbage", "truncate", "flip", "version", "empty", "lie", "none"}
	for i, mode := range modes {
		ops := physParseOps(t, fmt.Sprintf("put 1 %d 5 %d\nput 1 %d 6 %d\ndel 1 %d 7 %d\ngcdel 1 %d 1 1\nmeta m%d",
			i, 10+i, i, 10+i, i, 10+i, i, i))
		collectors := physCorrupting(mode)
		if mode == "none" {
			collectors = []func() pebble.BlockPropertyCollector{}
		}
		e.ingest(ops, collectors)
	}
	v := e.refresh()
	rebuilt := Rebuilt(v)
	require.Len(t, rebuilt, len(modes))
	logged := strings.Join(e.log.statsErrors(), "\n")
	for _, fe := range rebuilt {
		f, ok := File(v, fe.FileNum)
		require.True(t, ok)
		require.Equal(t, FromRebuild, f.Source)
		require.NoError(t, CheckFile(f))
		require.Contains(t, logged, fmt.Sprintf("sst %06d: unusable payload", fe.FileNum))
	}
	for _, fe := range rebuilt[:len(rebuilt)-1] {
		if !strings.Contains(fe.Err.Error(), "NumEntries") { // "lie" decodes but does not add up
			require.True(t, errors.Is(fe.Err, sstsummary.ErrCorruptPayload), "%v", fe.Err)
			require.True(t, errors.Is(fe.Err, lsmstats.ErrCorruption), "%v", fe.Err)
		}
	}
	require.True(t, physMatchesScan(t, e, v, "after ingest"))
	require.NoError(t, DiffVersions(v, must(e.tr.Recompute())))

	// Compaction rewrites the files with the collector.
	e.compactAll()
	v = e.refresh()
	require.Empty(t, Rebuilt(v))
	require.True(t, physMatchesScan(t, e, v, "after compaction"))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestRebuiltAfter: a refresh's rebuilt files are its base's, less the
// files that left, plus the arrivals that were rebuilt, in file order; the
// base's list is never written.
func TestRebuiltAfter(t *testing.T) {
	file := func(num uint64, rebuilt bool) *liveFile {
		f := newLiveFile(FileInfo{FileNum: num, Summary: &sstsummary.FileSummary{}})
		if rebuilt {
			f.rebuildErr = errors.Newf("sst %d: bad payload", num)
		}
		return f
	}
	nums := func(es []FileError) (out []uint64) {
		for _, e := range es {
			out = append(out, e.FileNum)
		}
		return out
	}
	base := []FileError{{FileNum: 3}, {FileNum: 7}, {FileNum: 9}}
	for _, c := range []struct {
		name           string
		removed, added []*liveFile
		want           []uint64
	}{
		{"nothing", nil, nil, []uint64{3, 7, 9}},
		{"clean files come and go", []*liveFile{file(4, false)}, []*liveFile{file(12, false)}, []uint64{3, 7, 9}},
		{"a rebuilt file leaves", []*liveFile{file(7, true), file(8, false)}, nil, []uint64{3, 9}},
		{"a rebuilt file arrives", nil, []*liveFile{file(5, true), file(6, false), file(11, true)}, []uint64{3, 5, 7, 9, 11}},
		{"both", []*liveFile{file(3, true), file(9, true)}, []*liveFile{file(10, true)}, []uint64{7, 10}},
	} {
		got := rebuiltAfter(base, c.removed, c.added)
		require.Equal(t, c.want, nums(got), c.name)
		require.Equal(t, []uint64{3, 7, 9}, nums(base), "%s: the base changed", c.name)
	}
}
