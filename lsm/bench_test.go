package lsm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// The benchmarks compare the store with raw Pebble doing the same work on the
// same bytes, side by side in one run, and report the ratio as x-of-pebble.
// Raw Pebble uses the store's own Pebble options (comparer, collectors, L0
// settings) and writes the same versioned keys and values.

const benchVnodes = 16

func benchStore(b *testing.B) *Store {
	s, err := Open(b.TempDir(), &Options{Logger: QuietLogger(nil)})
	require.NoError(b, err)
	require.NoError(b, s.CreateTable(TableDef{ID: 1, VnodeCount: benchVnodes, PK: keys.Schema{keys.Uint64}}))
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// rawPebble opens raw Pebble with the store's Pebble options, less the
// store's event listeners and its compaction scheduler, which serves the
// store's DB: pebble.Open makes raw Pebble a scheduler of its own, with the
// same policy (Pebble's default; see compactionScheduler).
func rawPebble(b *testing.B, s *Store) *pebble.DB {
	o := s.popts.Clone()
	o.Experimental.CompactionScheduler = nil
	o.EventListener = &pebble.EventListener{}
	var stalls int64
	o.EventListener.WriteStallBegin = func(pebble.WriteStallBeginInfo) { stalls++ }
	db, err := pebble.Open(b.TempDir(), o)
	require.NoError(b, err)
	b.Cleanup(func() { _ = db.Close() })
	return db
}

// BenchmarkCommit measures checkpoints of rows with 100-byte values: the
// store (writer ops, seal, commit: merge, SSTs, one ingestion, statistics)
// against raw Pebble (a batch of the same keys committed with Sync, then a
// flush, so both end in SSTs). Each iteration does one checkpoint of each.
func BenchmarkCommit(b *testing.B) {
	for _, rows := range []int{1000, 20000} {
		for _, checked := range []bool{false, true} {
			b.Run(fmt.Sprintf("rows=%d/checked=%t", rows, checked), func(b *testing.B) {
				s := benchStore(b)
				raw := rawPebble(b, s)
				w, err := s.NewWriter(1, nil, &WriterOptions{Unchecked: !checked})
				require.NoError(b, err)
				def, _ := s.table(1)
				value := make([]byte, 100)
				r := rand.New(rand.NewPCG(1, 2))
				var ours, theirs time.Duration
				epoch := uint64(0)
				next := uint64(0)
				b.SetBytes(int64(rows * (len(value) + 8)))
				b.ResetTimer()
				for range b.N {
					epoch++
					base := next
					next += uint64(rows)
					start := time.Now()
					for i := range rows {
						pk := keys.AppendUint64(nil, base+uint64(i))
						fillRandom(r, value)
						if err := w.Insert(epoch, def.VnodeOf(pk), pk, value); err != nil {
							b.Fatal(err)
						}
					}
					require.NoError(b, w.Seal(epoch))
					require.NoError(b, s.Commit(epoch))
					ours += time.Since(start)

					start = time.Now()
					batch := raw.NewBatch()
					for i := range rows {
						pk := keys.AppendUint64(nil, base+uint64(i))
						fillRandom(r, value)
						k := keys.AppendVersioned(nil, 1, def.VnodeOf(pk), pk, keys.MakeVersion(epoch, 0), keys.KindPut)
						require.NoError(b, batch.Set(k, value, nil))
					}
					require.NoError(b, batch.Commit(pebble.Sync))
					require.NoError(b, raw.Flush())
					theirs += time.Since(start)
				}
				b.StopTimer()
				total := float64(rows * b.N)
				b.ReportMetric(total/ours.Seconds(), "rows/s")
				b.ReportMetric(total/theirs.Seconds(), "pebble-rows/s")
				b.ReportMetric(theirs.Seconds()/ours.Seconds(), "x-of-pebble")
				m := s.counters()
				b.ReportMetric(float64(m.CommitStalls+m.PebbleWriteStalls), "write-stalls")
				b.ReportMetric(float64(m.CommitStallTime.Milliseconds()), "stall-ms")
				b.ReportMetric(float64(m.L0Sublevels), "l0-sublevels")
			})
		}
	}
}

// loadBench commits n rows (one version each) spread over several
// checkpoints and compacts, so reads see a settled LSM.
func loadBench(b *testing.B, s *Store, n int) {
	w, err := s.NewWriter(1, nil, &WriterOptions{Unchecked: true})
	require.NoError(b, err)
	def, _ := s.table(1)
	value := make([]byte, 100)
	const perEpoch = 20000
	for epoch := uint64(1); int(epoch-1)*perEpoch < n; epoch++ {
		for i := (epoch - 1) * perEpoch; i < epoch*perEpoch && int(i) < n; i++ {
			pk := keys.AppendUint64(nil, i)
			require.NoError(b, w.Insert(epoch, def.VnodeOf(pk), pk, value))
		}
		require.NoError(b, w.Seal(epoch))
		require.NoError(b, s.Commit(epoch))
	}
	require.NoError(b, w.Close())
	lo, hi := keys.TableSpan(1)
	require.NoError(b, s.db.Compact(context.Background(), lo, hi, true))
}

// BenchmarkGet compares a point read at the committed epoch (find the newest
// version at or below the epoch) with raw Pebble's Get of the exact
// versioned key, on the same database. Each iteration reads one pk both
// ways, in alternating order: whichever goes first warms the CPU cache with
// the index and data blocks for the second.
func BenchmarkGet(b *testing.B) {
	const n = 200000
	s := benchStore(b)
	loadBench(b, s, n)
	def, _ := s.table(1)
	r := rand.New(rand.NewPCG(3, 4))
	pks := make([][]byte, 1024)
	exact := make([][]byte, len(pks))
	vnodes := make([]uint16, len(pks))
	for i := range pks {
		pk := uint64(r.IntN(n))
		pks[i] = keys.AppendUint64(nil, pk)
		vnodes[i] = def.VnodeOf(pks[i])
		exact[i] = keys.AppendVersioned(nil, 1, vnodes[i], pks[i], keys.MakeVersion(pk/20000+1, 0), keys.KindPut)
	}
	var ours, theirs time.Duration
	get := func(j int) {
		start := time.Now()
		_, ok, err := s.Get(1, vnodes[j], pks[j])
		ours += time.Since(start)
		if err != nil || !ok {
			b.Fatalf("get %x: %v %v", pks[j], ok, err)
		}
	}
	pebbleGet := func(j int) {
		start := time.Now()
		_, closer, err := s.db.Get(exact[j])
		theirs += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		_ = closer.Close()
	}
	b.ResetTimer()
	for i := range b.N {
		j := i % len(pks)
		inTurn(i, func() { get(j) }, func() { pebbleGet(j) })
	}
	b.StopTimer()
	b.ReportMetric(float64(ours.Nanoseconds())/float64(b.N), "ns/get")
	b.ReportMetric(float64(theirs.Nanoseconds())/float64(b.N), "pebble-ns/get")
	b.ReportMetric(float64(ours)/float64(theirs), "x-of-pebble")
}

// BenchmarkScan compares iterating one vnode's live rows with raw Pebble
// iterating the same key range, on the same database, in alternating order
// as BenchmarkGet does.
func BenchmarkScan(b *testing.B) {
	const n = 200000
	s := benchStore(b)
	loadBench(b, s, n)
	var ours, theirs time.Duration
	var rows, rawRows int
	scan := func(v uint16) {
		start := time.Now()
		it, err := s.NewIter(1, v, nil, nil)
		require.NoError(b, err)
		for ok := it.First(); ok; ok = it.Next() {
			rows++
		}
		require.NoError(b, it.Close())
		ours += time.Since(start)
	}
	pebbleScan := func(v uint16) {
		start := time.Now()
		lo, hi := keys.VnodeSpan(1, v)
		rit, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		require.NoError(b, err)
		for ok := rit.First(); ok; ok = rit.Next() {
			_ = rit.Value()
			rawRows++
		}
		require.NoError(b, rit.Close())
		theirs += time.Since(start)
	}
	b.ResetTimer()
	for i := range b.N {
		v := uint16(i % benchVnodes)
		inTurn(i, func() { scan(v) }, func() { pebbleScan(v) })
	}
	b.StopTimer()
	require.Equal(b, rawRows, rows)
	b.ReportMetric(float64(rows)/ours.Seconds(), "rows/s")
	b.ReportMetric(float64(rawRows)/theirs.Seconds(), "pebble-rows/s")
	b.ReportMetric(theirs.Seconds()/ours.Seconds(), "x-of-pebble")
}

// inTurn runs both sides of a side-by-side comparison, ours first on even
// iterations and Pebble's first on odd ones, so that neither always reads
// what the other has just brought into the CPU cache.
func inTurn(i int, ours, pebbles func()) {
	if i%2 == 0 {
		ours()
		pebbles()
	} else {
		pebbles()
		ours()
	}
}

func fillRandom(r *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}
