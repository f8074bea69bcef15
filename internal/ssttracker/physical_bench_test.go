package ssttracker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/sstsummary"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// physBenchValue returns a 100-byte row of lowercase letters and digits
// (about 5.2 bits of entropy per byte: compresses like text, not like
// zeros).
func physBenchValue(r *rand.Rand, buf []byte) []byte {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	buf = buf[:0]
	for range 100 {
		buf = append(buf, alphabet[r.IntN(len(alphabet))])
	}
	return buf
}

// physSyntheticVersion builds a Version over nFiles files of one table with
// vnodes vnodes: sorted runs (like L6 files) or files that each span every
// vnode (like L0 files).
func physSyntheticVersion(b testing.TB, totalKeys, nFiles, vnodes int, l0 bool) (*Version, []*liveFile) {
	var files []*liveFile
	perFile := totalKeys / nFiles
	for i := range nFiles {
		c := sstsummary.NewScanCollector()
		if l0 {
			for v := range vnodes {
				for k := range perFile / vnodes {
					c.Add(keys.AppendVersioned(nil, 1, uint16(v), keys.AppendUint64(nil, uint64(k*nFiles+i)), keys.MakeVersion(uint64(i+1), 0), keys.KindPut), pebble.InternalKeyKindSet)
				}
			}
		} else {
			start := i * perFile
			for k := start; k < start+perFile; k++ {
				v := k * vnodes / totalKeys
				c.Add(keys.AppendVersioned(nil, 1, uint16(v), keys.AppendUint64(nil, uint64(k)), keys.MakeVersion(1, 0), keys.KindPut), pebble.InternalKeyKindSet)
			}
		}
		// Through the payload codec, as the tracker reads it.
		s, err := sstsummary.DecodeSummary(c.Summary().Encode())
		require.NoError(b, err)
		files = append(files, newLiveFile(FileInfo{FileNum: uint64(i + 1), Summary: s, RawValueSize: uint64(perFile) * 100, NumEntries: uint64(perFile)}))
	}
	return physVersionOf(&Version{}, files, nil, files), files
}

// BenchmarkVersionVnode: reading one (table, vnode)'s counts (1M keys in
// 1,000 files; 100k under -short).
func BenchmarkVersionVnode(b *testing.B) {
	v, _ := physSyntheticVersion(b, testutil.BenchSize(1_000_000, 100_000), 1000, 256, false)
	tr := NewTracker(TrackerConfig{})
	tr.current.Store(v)
	var sink uint64
	i := 0
	for b.Loop() {
		sink += tr.Current().Vnode(1, uint16(i&255)).Entries
		i++
	}
	if sink == 0 {
		b.Fatal("no entries")
	}
}

// BenchmarkVersionRange: a pk-range query of one vnode (1M keys in 64
// files; 100k under -short).
func BenchmarkVersionRange(b *testing.B) {
	for _, l0 := range []bool{false, true} {
		b.Run(fmt.Sprintf("l0-shaped=%t", l0), func(b *testing.B) {
			v, _ := physSyntheticVersion(b, testutil.BenchSize(1_000_000, 100_000), 64, 256, l0)
			lo, hi := keys.AppendUint64(nil, 100), keys.AppendUint64(nil, 900_000)
			i := 0
			for b.Loop() {
				_ = CountRange(v, 1, uint16(i&255), lo, hi)
				i++
			}
			b.ReportMetric(float64(len(v.vnodeState(1, 7).files)), "files/vnode")
		})
	}
}

// BenchmarkStatsMemory: heap held by a Version per million keys, of a
// Version of 1M keys (100k under -short).
func BenchmarkStatsMemory(b *testing.B) {
	total := testutil.BenchSize(1_000_000, 100_000)
	for _, shape := range []struct {
		files int
		l0    bool
	}{{16, false}, {64, false}, {16, true}} {
		b.Run(fmt.Sprintf("files=%d/l0-shaped=%t", shape.files, shape.l0), func(b *testing.B) {
			var perM float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				v, files := physSyntheticVersion(b, total, shape.files, 256, shape.l0)
				runtime.GC()
				runtime.ReadMemStats(&after)
				perM = float64(after.HeapAlloc-before.HeapAlloc) / (float64(total) / 1e6)
				runtime.KeepAlive(v)
				runtime.KeepAlive(files)
			}
			b.ReportMetric(perM, "stats-bytes/Mkeys")
		})
	}
}

// BenchmarkRefresh: a real DB with about 1,000 live SSTs (256 under
// -short); each iteration
// writes a batch into one vnode, flushes (1 new file) and refreshes, then
// compacts that vnode (2-3 files out, 1 in) and refreshes from the changes
// the events report. ns/changed-file divides the refreshes' time by the
// files that changed. listing-ns is a refresh that lists and finds nothing
// changed (list + diff). ns/op is a whole round: b.Loop runs rounds until
// they have taken -benchtime. (With the rest of the round outside the
// timer, the timed microseconds per round made b.Loop run ever more rounds,
// each tens of milliseconds of flushing and compacting: at -benchtime 2s
// millions, hours of them, and make bench stalled here.)
func BenchmarkRefresh(b *testing.B) {
	tables := testutil.BenchSize(4, 1)
	e, r := openRefreshStore(b, tables)
	var refreshNs time.Duration
	var changed int
	for b.Loop() {
		for _, c := range refreshRound(b, e, r, tables, nil) {
			refreshNs += c.took
			changed += c.changed
		}
	}
	b.ReportMetric(float64(refreshNs.Nanoseconds())/float64(max(changed, 1)), "ns/changed-file")
	b.ReportMetric(idleRefresh(b, e, nil), "listing-ns")
	b.ReportMetric(float64(e.tr.Current().NumFiles()), "live-files")
	v := e.tr.Current()
	rv, err := e.tr.Recompute()
	require.NoError(b, err)
	require.NoError(b, DiffVersions(v, rv))
}

// BenchmarkRefreshGrowth: whether a refresh's cost per changed file stays
// flat as the LSM grows. It builds stores of 256 and 4,096 live SSTs in one
// run and times, in each, the refreshes of BenchmarkRefresh's rounds (which
// follow the changes the events report) per changed file, as medians (one
// GC pause would be most of a mean), and the listing of the live SSTs (a
// refresh with nothing changed that lists), which a refresh needs only when
// the changes do not add up. Every timed refresh follows a 64 MiB sweep of
// the CPU caches, as a refresh after a flush or a compaction meets them.
// x-of-256-files is the larger store's figure per changed file over the
// smaller's: 1 is flat; listing-x-of-256-files the same for the listing
// (16 if it grows with the files). Under -short: 256 and 1,024 live SSTs,
// 8 rounds.
func BenchmarkRefreshGrowth(b *testing.B) {
	rounds := testutil.BenchSize(64, 8)
	sizes := []int{1, testutil.BenchSize(16, 4)}
	var perFile, listing [2]float64
	sweep := make([]byte, 64<<20)
	for b.Loop() {
		for i, tables := range sizes {
			e, r := openRefreshStore(b, tables)
			var took []refreshTiming
			for range rounds {
				took = append(took, refreshRound(b, e, r, tables, sweep)...)
			}
			var per []float64
			for _, c := range took {
				if c.changed > 0 {
					per = append(per, float64(c.took.Nanoseconds())/float64(c.changed))
				}
			}
			require.NotEmpty(b, per)
			perFile[i] = testutil.Median(per)
			listing[i] = idleRefresh(b, e, sweep)
			b.ReportMetric(listing[i], fmt.Sprintf("listing-ns-%d-files", tables*256))
		}
	}
	b.ReportMetric(perFile[0], fmt.Sprintf("ns/changed-file-%d-files", sizes[0]*256))
	b.ReportMetric(perFile[1], fmt.Sprintf("ns/changed-file-%d-files", sizes[1]*256))
	b.ReportMetric(perFile[1]/perFile[0], "x-of-256-files")
	b.ReportMetric(listing[1]/listing[0], "listing-x-of-256-files")
}

// openRefreshStore opens a DB holding one ingested SST of 100 rows for each
// vnode of tables tables of 256 vnodes, and its tracker.
func openRefreshStore(b testing.TB, tables int) (*physEnv, *rand.Rand) {
	e := openPhys(b, func(o *pebble.Options) { o.L0StopWritesThreshold = 100000 })
	const vnodes, perSST = 256, 100
	r := rand.New(rand.NewPCG(5, 5))
	var paths []string
	val := physBenchValue(r, nil)
	for t := range tables {
		for v := range vnodes {
			var ops []physOp
			for pk := range perSST {
				ops = append(ops, physOp{key: physKey(uint32(t+1), uint16(v), uint64(pk), 1, keys.KindPut), kind: pebble.InternalKeyKindSet, val: val})
			}
			e.ingests++
			path := e.fs.PathJoin(e.scratch, fmt.Sprintf("bench-%d.sst", e.ingests))
			e.writeSST(path, ops, nil)
			paths = append(paths, path)
		}
	}
	require.NoError(b, e.db.Ingest(context.Background(), paths))
	e.epoch = 1 // the ingested rows' version
	v := e.refresh()
	b.Logf("%d live files", v.NumFiles())
	return e, r
}

// refreshTiming is one refresh: its time and the files it found changed.
type refreshTiming struct {
	took    time.Duration
	changed int
}

// refreshRound writes a batch into one vnode of one of tables tables,
// flushes it and refreshes, then compacts the vnode and refreshes, and
// returns the two refreshes (RefreshSignalled: from the changes the events
// report). Before each, it writes sweep (if any) to evict the CPU caches.
func refreshRound(b testing.TB, e *physEnv, r *rand.Rand, tables int, sweep []byte) []refreshTiming {
	t, vn := uint32(1+r.IntN(tables)), uint16(r.IntN(256))
	e.epoch++
	val := physBenchValue(r, nil)
	batch := e.db.NewBatch()
	for pk := range 20 {
		require.NoError(b, batch.Set(physKey(t, vn, uint64(pk*5), e.epoch, keys.KindPut), val, nil))
	}
	require.NoError(b, batch.Commit(pebble.NoSync))
	require.NoError(b, e.db.Flush())
	timed := func() refreshTiming {
		before := e.tr.Current()
		testutil.SweepCaches(sweep)
		start := time.Now()
		require.NoError(b, e.tr.RefreshSignalled())
		took := time.Since(start)
		return refreshTiming{took, physChanged(before, e.tr.Current())}
	}
	flushed := timed()
	lo, hi := keys.VnodeSpan(t, vn)
	require.NoError(b, e.db.Compact(context.Background(), lo, hi, false))
	return []refreshTiming{flushed, timed()}
}

// idleRefresh returns the median time of a refresh that finds nothing
// changed: the listing. Refreshes that meet a change (Pebble compacting
// the rounds' flushes in the background) are not counted.
func idleRefresh(b *testing.B, e *physEnv, sweep []byte) float64 {
	var idle []float64
	for range 1000 {
		before := e.tr.Current()
		testutil.SweepCaches(sweep)
		start := time.Now()
		require.NoError(b, e.tr.Refresh())
		took := time.Since(start)
		if physChanged(before, e.tr.Current()) > 0 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if idle = append(idle, float64(took.Nanoseconds())); len(idle) == 32 {
			break
		}
	}
	require.NotEmpty(b, idle, "every refresh found a change")
	return testutil.Median(idle)
}

func physChanged(a, b *Version) int {
	seen := map[uint64]bool{}
	for _, f := range Files(a) {
		seen[f.FileNum] = true
	}
	n := 0
	for _, f := range Files(b) {
		if !seen[f.FileNum] {
			n++
		}
		delete(seen, f.FileNum)
	}
	return n + len(seen)
}
