package lsm

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/livebuckets"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

var liveCostRows = flag.Int("livecost-rows", 1_000_000, "rows BenchmarkLiveStatsWrites loads (200k under -short)")

// writeCounter sums the bytes of the SSTs that Pebble's flushes and
// compactions write, and of those the part in the metadata table (the
// store cuts SSTs at tables, so an SST holds metadata keys only or none).
type writeCounter struct {
	mu                                             sync.Mutex
	flushed, compacted, metaFlushed, metaCompacted uint64
}

func (c *writeCounter) listener() *pebble.EventListener {
	meta := keys.MetaKey(nil)[:4]
	isMeta := func(t pebble.TableInfo) bool { return bytes.HasPrefix(t.Smallest.UserKey, meta) }
	return &pebble.EventListener{
		FlushEnd: func(info pebble.FlushInfo) {
			c.mu.Lock()
			defer c.mu.Unlock()
			for _, t := range info.Output {
				c.flushed += t.Size
				if isMeta(t) {
					c.metaFlushed += t.Size
				}
			}
		},
		CompactionEnd: func(info pebble.CompactionInfo) {
			c.mu.Lock()
			defer c.mu.Unlock()
			for _, t := range info.Output.Tables {
				c.compacted += t.Size
				if isMeta(t) {
					c.metaCompacted += t.Size
				}
			}
		},
	}
}

func (c *writeCounter) get() (flushed, compacted, metaFlushed, metaCompacted uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.flushed, c.compacted, c.metaFlushed, c.metaCompacted
}

// BenchmarkLiveStatsWrites measures what the live statistics cost a load:
// -livecost-rows hashed 16-byte pks with 100-byte rows, 20,000 a
// checkpoint, into a table of 256 vnodes (BenchmarkScale's uniform load),
// through an unchecked writer, against raw Pebble (the store's Pebble
// options) writing the same keys in one synced batch a checkpoint, in the
// same run. Then 30% of the rows are updated with rows of the same size,
// both ways. It reports each phase's rows per second and the ratio to raw
// Pebble, the bytes Pebble flushed and compacted for each, the share of
// the store's that are SSTs of metadata (the live statistics' rows, with
// the few rows of the checkpoint marks), the live buckets and their heap
// per million keys.
func BenchmarkLiveStatsWrites(b *testing.B) {
	rows := *liveCostRows
	if testing.Short() {
		rows = 200_000
	}
	const perCommit, vnodes, rowBytes = 20_000, 256, 100
	for range b.N {
		var ours, theirs writeCounter
		s, err := Open(b.TempDir(), &Options{Logger: QuietLogger(nil), EventListener: ours.listener()})
		require.NoError(b, err)
		require.NoError(b, s.CreateTable(TableDef{ID: 1, VnodeCount: vnodes, PK: keys.Schema{keys.Uint64, keys.Uint64}}))
		o := s.popts.Clone()
		o.Experimental.CompactionScheduler = nil
		o.EventListener = theirs.listener()
		raw, err := pebble.Open(b.TempDir(), o)
		require.NoError(b, err)
		def, _ := s.table(1)
		w, err := s.NewWriter(1, nil, &WriterOptions{Unchecked: true})
		require.NoError(b, err)

		pk := func(id uint64) []byte {
			return keys.AppendUint64(keys.AppendUint64(nil, id*0x9E3779B97F4A7C15^0x5bd1e995), id)
		}
		value := make([]byte, rowBytes)
		r := rand.New(rand.NewPCG(1, 2))
		epoch := uint64(0)
		var oursLoad, theirsLoad, oursUpd, theirsUpd time.Duration
		phase := func(ids func(i int) uint64, n int, update bool) (time.Duration, time.Duration) {
			var ot, tt time.Duration
			for base := 0; base < n; base += perCommit {
				epoch++
				end := min(base+perCommit, n)
				start := time.Now()
				for i := base; i < end; i++ {
					p := pk(ids(i))
					fillRandom(r, value)
					if update {
						require.NoError(b, w.Update(epoch, def.VnodeOf(p), p, value, value))
					} else {
						require.NoError(b, w.Insert(epoch, def.VnodeOf(p), p, value))
					}
				}
				require.NoError(b, w.Seal(epoch))
				require.NoError(b, s.Commit(epoch))
				ot += time.Since(start)

				start = time.Now()
				batch := raw.NewBatch()
				for i := base; i < end; i++ {
					p := pk(ids(i))
					fillRandom(r, value)
					k := keys.AppendVersioned(nil, 1, def.VnodeOf(p), p, keys.MakeVersion(epoch, 0), keys.KindPut)
					require.NoError(b, batch.Set(k, value, nil))
				}
				require.NoError(b, batch.Commit(pebble.Sync))
				require.NoError(b, batch.Close())
				tt += time.Since(start)
			}
			return ot, tt
		}
		// settle flushes both memtables and waits for the compactions, so
		// that a phase's bytes are all of its writes.
		settle := func() {
			require.NoError(b, s.db.Flush())
			require.NoError(b, raw.Flush())
			for _, db := range []*pebble.DB{s.db, raw} {
				for db.Metrics().Compact.NumInProgress > 0 {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}
		oursLoad, theirsLoad = phase(func(i int) uint64 { return uint64(i) }, rows, false)
		settle()
		f0, c0, mf0, mc0 := ours.get()
		rf0, rc0, _, _ := theirs.get()
		perm := r.Perm(rows)
		oursUpd, theirsUpd = phase(func(i int) uint64 { return uint64(perm[i]) }, rows*3/10, true)
		settle()
		f1, c1, mf1, mc1 := ours.get()
		rf1, rc1, _, _ := theirs.get()

		// The live statistics' heap: their metadata rows loaded into a new
		// state, as Open loads them.
		var entries [][2][]byte
		for _, span := range livebuckets.Spans() {
			it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: span[0], UpperBound: span[1]})
			require.NoError(b, err)
			for ok := it.First(); ok; ok = it.Next() {
				entries = append(entries, [2][]byte{bytes.Clone(it.Key()), bytes.Clone(it.Value())})
			}
			require.NoError(b, it.Close())
		}
		const copies = 4
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		var states []*livebuckets.State
		for range copies {
			ls := livebuckets.NewState()
			ls.AddTable(1, vnodes)
			for _, e := range entries {
				require.NoError(b, ls.Load(e[0], e[1]))
			}
			ls.FinishLoad()
			states = append(states, ls)
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		liveHeap := (float64(m1.HeapAlloc) - float64(m0.HeapAlloc)) / copies
		buckets := states[0].Current().BucketCount()
		runtime.KeepAlive(states)

		require.NoError(b, w.Close())
		require.NoError(b, s.Close())
		require.NoError(b, raw.Close())

		mb := func(x uint64) float64 { return float64(x) / 1e6 }
		b.ReportMetric(float64(rows)/oursLoad.Seconds(), "load-rows/s")
		b.ReportMetric(float64(rows)/theirsLoad.Seconds(), "raw-load-rows/s")
		b.ReportMetric(theirsLoad.Seconds()/oursLoad.Seconds(), "load-x-of-raw")
		b.ReportMetric(theirsUpd.Seconds()/oursUpd.Seconds(), "update-x-of-raw")
		b.ReportMetric(mb(f0+c0), "load-written-MB")
		b.ReportMetric(mb(rf0+rc0), "raw-load-written-MB")
		b.ReportMetric(mb(mf0+mc0), "load-meta-written-MB")
		b.ReportMetric(100*float64(mf0+mc0)/float64(max(f0+c0, 1)), "load-meta-%")
		b.ReportMetric(mb(f1-f0+c1-c0), "update-written-MB")
		b.ReportMetric(mb(rf1-rf0+rc1-rc0), "raw-update-written-MB")
		b.ReportMetric(100*float64(mf1-mf0+mc1-mc0)/float64(max(f1-f0+c1-c0, 1)), "update-meta-%")
		b.ReportMetric(float64(len(entries)), "live-meta-rows")
		b.ReportMetric(float64(buckets), "buckets")
		b.ReportMetric(liveHeap/1e6/(float64(rows)/1e6), "live-heap-MB/Mrows")
		b.Logf("rows %d: load %s (raw %s), update %s (raw %s); flushed+compacted load %s+%s MB (meta %s+%s), raw %s+%s",
			rows, oursLoad.Round(time.Millisecond), theirsLoad.Round(time.Millisecond), oursUpd.Round(time.Millisecond), theirsUpd.Round(time.Millisecond),
			fmt.Sprint(mb(f0)), fmt.Sprint(mb(c0)), fmt.Sprint(mb(mf0)), fmt.Sprint(mb(mc0)), fmt.Sprint(mb(rf0)), fmt.Sprint(mb(rc0)))
	}
}
