package stats_test

// Benchmarks of acceptance 5 on a real store: reading one (table, vnode)'s
// statistics, one EstimateRows, the consumed-rows estimate of a backfill
// over 256 vnodes that are all in progress, and the memory the statistics
// hold per million keys. The collector's overhead on Pebble's own flushes
// and compactions is BenchmarkCollectorOverhead (collector_overhead_test.go).

import (
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/livebuckets"
	"github.com/lsmstats/lsmstats/internal/lsminternal"
	"github.com/lsmstats/lsmstats/internal/ssttracker"
	"github.com/lsmstats/lsmstats/internal/statsinternal"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/lsmstats/lsmstats/stats"
	"github.com/stretchr/testify/require"
)

// benchStore is a store with one table of vnodes vnodes and rowsPerVnode
// rows in each, loaded over several checkpoints by an unchecked writer, with
// automatic compactions off (one SST per checkpoint until a manual
// compaction).
type benchStore struct {
	e       *storeEnv
	def     lsm.TableDef
	pks     [][]uint64          // per vnode, sorted
	pk      func(uint64) []byte // the pk of each number in pks
	row     []byte              // every row's value
	entries uint64
	epoch   uint64 // the last committed
}

const benchTable = 1

// pkShape is a benchStore's pk schema and the pk of each number, in the
// numbers' order.
type pkShape struct {
	schema keys.Schema
	pk     func(uint64) []byte
}

var (
	pkU64 = pkShape{keys.Schema{keys.Uint64}, pk64}
	// pkPrefixed is a 26-byte pk (bytes, u64): a 16-byte string shared by
	// every row (a tenant or path prefix), then an id.
	pkPrefixed = pkShape{keys.Schema{keys.Bytes, keys.Uint64}, func(n uint64) []byte {
		return keys.AppendUint64(keys.AppendBytes(nil, []byte("tenant-00042/ord")), n)
	}}
)

func newBenchStore(b *testing.B, vnodes, rowsPerVnode, checkpoints int, shape pkShape) *benchStore {
	e := openStore(b, uncompacted())
	require.NoError(b, e.s.CreateTable(lsm.TableDef{ID: benchTable, VnodeCount: vnodes, PK: shape.schema}))
	def, err := e.s.Table(benchTable)
	require.NoError(b, err)
	bs := &benchStore{e: e, def: def, pk: shape.pk}
	pk := shape.pk
	w, err := e.s.NewWriter(benchTable, nil, &lsm.WriterOptions{Unchecked: true})
	require.NoError(b, err)
	e.writers[benchTable] = w
	r := rand.New(rand.NewPCG(1, 2))
	row := randRow(r, 32)
	bs.row = row
	bs.pks = make([][]uint64, vnodes)
	total := rowsPerVnode * vnodes
	order := r.Perm(total)
	per := (total + checkpoints - 1) / checkpoints
	for c := range checkpoints {
		epoch := uint64(c + 1)
		for _, i := range order[c*per : min(total, (c+1)*per)] {
			n := uint64(i)*16 + uint64(r.IntN(16))
			v := bs.def.VnodeOf(pk(n))
			bs.pks[v] = append(bs.pks[v], n)
			require.NoError(b, w.Insert(epoch, v, pk(n), row))
		}
		e.commit(epoch)
		bs.epoch = epoch
	}
	for _, ps := range bs.pks {
		slices.Sort(ps)
	}
	bs.entries = e.s.Stats().Physical.Table(benchTable).TotalKeyCount
	return bs
}

// BenchmarkStoreStats measures the statistics reads of a backfill on a store
// of 256 vnodes × 4,000 rows (1,024,000 keys; 400 rows under -short):
//
//	read=vnode            Store.Stats().Vnode(table, vnode)      goal ≤ 200 ns
//	read=estimate-rows    one Stats.EstimateRows of a pk range   goal ≤ 2 µs
//	read=consumed-256     Store.Stats(), then Σ of the estimates of [nil,
//	                      cursor] over 256 vnodes all in progress, asked
//	                      together (AppendEstimates)             goal ≤ 100 µs
//	read=consumed-256-cold  cold-ns/op: the same after a commit that touched
//	                      every vnode, with the CPU caches swept; and
//	                      cold-each-ns/op, the same asked one query at a time
//	memory/lsm=...        heap held by the physical statistics (a Version
//	                      recomputed from the SSTs) and the live buckets (reloaded
//	                      from their metadata), per million keys, as loaded
//	                      (one SST per checkpoint) and after a full compaction
func BenchmarkStoreStats(b *testing.B) {
	bs := newBenchStore(b, keys.DefaultVnodeCount, testutil.BenchSize(4000, 400), 8, pkU64)
	s := bs.e.s
	b.Logf("%d keys in %d SSTs; %d live buckets", bs.entries, s.Stats().Physical.NumFiles(), statsinternal.LiveOf(s.Stats().Live).BucketCount())
	r := rand.New(rand.NewPCG(3, 4))

	b.Run("read=vnode", func(b *testing.B) {
		bs.e.t = b
		var sink int64
		i := 0
		for b.Loop() {
			vs := s.Stats().Vnode(benchTable, uint16(i&255))
			sink += vs.Live.Rows + int64(vs.Physical.Entries)
			i++
		}
		require.Positive(b, sink)
	})

	b.Run("read=estimate-rows", func(b *testing.B) {
		bs.e.t = b
		st := s.Stats()
		type q struct {
			v      uint16
			lo, hi []byte
		}
		qs := make([]q, 1024)
		for i := range qs {
			v := uint16(r.IntN(256))
			ps := bs.pks[v]
			a, c := ps[r.IntN(len(ps))], ps[r.IntN(len(ps))]
			if a > c {
				a, c = c, a
			}
			qs[i] = q{v, bs.pk(a), bs.pk(c + 1)}
		}
		var sink float64
		i := 0
		for b.Loop() {
			x := &qs[i&1023]
			sink += st.EstimateRows(benchTable, x.v, x.lo, x.hi).Rows
			i++
		}
		require.Positive(b, sink)
	})

	// A backfill over every vnode, all in progress: each cursor is a live
	// pk, and the consumed rows are those with pk <= cursor.
	cursors, truth := bs.cursors(r)
	b.Run("read=consumed-256", func(b *testing.B) {
		bs.e.t = b
		var consumed float64
		for b.Loop() {
			consumed = consumedRows(s, cursors)
		}
		total := s.Stats().Live.Table(benchTable).Rows
		b.ReportMetric(100*(consumed-float64(truth))/float64(total), "err-pp")
	})

	// The second memory case compacts the store.
	for _, compacted := range []bool{false, true} {
		name := "memory/lsm=as-loaded"
		if compacted {
			name = "memory/lsm=compacted"
		}
		b.Run(name, func(b *testing.B) {
			bs.e.t = b
			if compacted {
				bs.e.compact()
			}
			var phys, live float64
			for b.Loop() {
				phys, live = statsMemory(b, bs.e)
			}
			mk := float64(bs.entries) / 1e6
			b.Logf("%d SSTs: physical %.0f bytes, live %.0f bytes for %.3fM keys", s.Stats().Physical.NumFiles(), phys, live, mk)
			b.ReportMetric((phys+live)/mk, "stats-bytes/Mkeys")
			b.ReportMetric(phys/mk, "physical-bytes/Mkeys")
			b.ReportMetric(live/mk, "live-bytes/Mkeys")
		})
	}

	// Last, as it commits: the consumed rows as a running job meets them.
	b.Run("read=consumed-256-cold", func(b *testing.B) {
		bs.e.t = b
		bs.consumedCold(b, cursors)
	})
}

// BenchmarkConsumedCold4096 is read=consumed-256-cold on a table of 4096
// vnodes of 250 rows (1,024,000 keys; 25 under -short), all in progress:
// goal ≤ 1 ms. With
// pk=u64 the pks are 8-byte integers, whose 8-byte keys decide every
// comparison; with pk=string they share their first 16 bytes (pkPrefixed),
// so the 8-byte keys of a vnode's whole bounds are all equal: the queries
// compare each cursor with the vnode's shared prefix (keyView.prefix) and
// search by the keys of the bytes past it.
func BenchmarkConsumedCold4096(b *testing.B) {
	for _, c := range []struct {
		name  string
		shape pkShape
	}{{"u64", pkU64}, {"string", pkPrefixed}} {
		b.Run("pk="+c.name, func(b *testing.B) {
			bs := newBenchStore(b, 4096, testutil.BenchSize(250, 25), 8, c.shape)
			b.Logf("%d keys in %d SSTs; %d live buckets", bs.entries, bs.e.s.Stats().Physical.NumFiles(), statsinternal.LiveOf(bs.e.s.Stats().Live).BucketCount())
			cursors, _ := bs.cursors(rand.New(rand.NewPCG(3, 4)))
			bs.consumedCold(b, cursors)
		})
	}
}

// cursors returns a cursor at a random live pk of every vnode, and the
// rows at or below them.
func (bs *benchStore) cursors(r *rand.Rand) ([][]byte, int64) {
	cursors := make([][]byte, len(bs.pks))
	var truth int64
	for v := range cursors {
		i := r.IntN(len(bs.pks[v]))
		cursors[v] = bs.pk(bs.pks[v][i])
		truth += int64(i + 1)
	}
	return cursors, truth
}

// consumedCold measures the consumed rows as a running job meets them. The
// commit before each checkpoint touched every vnode (one update each:
// fresh copies of every vnode's buckets), and the job's other work evicted
// them from the CPU caches (a 64 MiB sweep). A fixed number of such
// rounds (100; 10 under -short), timed apart; the medians are reported as
// cold-ns/op and cold-each-ns/op, since one round on a shared machine may
// be interrupted (the loop then times the warm estimate again).
func (bs *benchStore) consumedCold(b *testing.B, cursors [][]byte) {
	rounds := testutil.BenchSize(100, 10)
	s := bs.e.s
	sweep := make([]byte, 64<<20)
	w := bs.e.writers[benchTable]
	var cold, each []time.Duration
	for round := range rounds {
		bs.epoch++
		for v := range bs.pks {
			pk := bs.pk(bs.pks[v][0])
			require.NoError(b, w.Update(bs.epoch, uint16(v), pk, bs.row, bs.row))
		}
		bs.e.commit(bs.epoch)
		testutil.SweepCaches(sweep)
		// One way per round, alternating: the second would meet some of
		// the first's cache lines warm.
		start := time.Now()
		if round%2 == 0 {
			consumedRows(s, cursors)
			cold = append(cold, time.Since(start))
		} else {
			consumedRowsEach(s, cursors)
			each = append(each, time.Since(start))
		}
	}
	for b.Loop() {
		consumedRows(s, cursors)
	}
	median := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Nanoseconds())
	}
	b.ReportMetric(median(cold), "cold-ns/op")
	b.ReportMetric(median(each), "cold-each-ns/op")
}

// statsMemory measures the heap that the store's statistics hold: a Version
// recomputed from the live SSTs' payloads, and live statistics reloaded from
// their persisted buckets (both as the store builds them at open).
func statsMemory(b *testing.B, e *storeEnv) (physical, live float64) {
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	o := &pebble.Options{Comparer: keys.Comparer}
	o.EnsureDefaults()
	cfg := ssttracker.TrackerConfig{DB: lsminternal.DB(e.s), Dir: e.dir + "/db", ReaderOptions: o.MakeReaderOptions(), Logger: lsm.QuietLogger(io.Discard)}
	before := heap()
	v, err := ssttracker.Recompute(cfg)
	require.NoError(b, err)
	after := heap()
	physical = float64(after) - float64(before)

	var entries [][2][]byte
	for _, span := range livebuckets.Spans() {
		it, err := lsminternal.DB(e.s).NewIter(&pebble.IterOptions{LowerBound: span[0], UpperBound: span[1]})
		require.NoError(b, err)
		for ok := it.First(); ok; ok = it.Next() {
			entries = append(entries, [2][]byte{append([]byte(nil), it.Key()...), append([]byte(nil), it.Value()...)})
		}
		require.NoError(b, it.Close())
	}
	before = heap()
	ls := livebuckets.NewState()
	for _, def := range e.s.Tables() {
		ls.AddTable(def.ID, def.VnodeCount)
	}
	for _, kv := range entries {
		require.NoError(b, ls.Load(kv[0], kv[1]))
	}
	ls.FinishLoad()
	after = heap()
	live = float64(after) - float64(before)
	loaded := ls.Current().Table(benchTable)
	require.Equal(b, e.s.Stats().Live.Table(benchTable), stats.LiveCounts{Rows: loaded.Rows, Bytes: loaded.Bytes})
	runtime.KeepAlive(ls)
	runtime.KeepAlive(v)
	runtime.KeepAlive(entries)
	return physical, live
}

// consumedRows is the stats approach's consumed rows: the estimates of
// [nil, cursor] over the vnodes, asked together, on the store's current
// statistics.
func consumedRows(s *lsm.Store, cursors [][]byte) (consumed float64) {
	qs := make([]stats.RangeQuery, len(cursors))
	for v := range cursors {
		qs[v] = stats.RangeQuery{Vnode: uint16(v), Hi: cursors[v], HiInclusive: true}
	}
	for _, e := range s.Stats().AppendEstimates(make([]stats.RowEstimate, 0, len(qs)), benchTable, qs) {
		consumed += e.Mean
	}
	return consumed
}

// consumedRowsEach is consumedRows asked one query at a time.
func consumedRowsEach(s *lsm.Store, cursors [][]byte) (consumed float64) {
	st := s.Stats()
	var out [1]stats.RowEstimate
	for v := range cursors {
		q := [1]stats.RangeQuery{{Vnode: uint16(v), Hi: cursors[v], HiInclusive: true}}
		consumed += st.AppendEstimates(out[:0], benchTable, q[:])[0].Mean
	}
	return consumed
}
