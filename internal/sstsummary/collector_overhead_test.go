//go:build unix

package sstsummary

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// cpuTime returns the CPU time (user + system) of the whole process. Pebble
// flushes and compacts on background goroutines, so the process's CPU over
// the call that waits for them is their cost (plus whatever else runs then,
// which in these benchmarks is nothing but the Go runtime).
func cpuTime(t testing.TB) time.Duration {
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCollectorOverhead is acceptance 5's overhead-%: the collector's
// CPU per key ÷ Pebble's CPU per key for flushing and compacting the same
// data, both measured in the same run.
//
// Pebble: a DB on disk without our collector takes the keys (256 vnodes,
// 100-byte values) in two halves of alternating keys, each flushed into L0
// (two overlapping files, so that the manual compaction that follows must
// merge and rewrite every key instead of moving a file down). The process
// CPU time (getrusage) over each Flush and over the Compact is Pebble's cost.
// Collector: the same key sequences fed to the collector directly, cut into
// as many SSTs as Pebble wrote (one collector and one FinishTable, with its
// s2 payload, per SST), timed on its one goroutine with each SST's keys
// in cache (see collectRuns). Reported: the raw ns
// per key of each, and their ratios for flush, compaction, and both.
// Wall-clock A/B runs of whole compactions with and without the collector
// vary by more than the effect (identical 2M-key compactions took 1.6 to
// 3.9 s on these machines), which is why the costs are measured apart.
func BenchmarkCollectorOverhead(b *testing.B) {
	n := testutil.BenchSize(1_000_000, 100_000)
	for _, shape := range []struct{ keys, versions int }{{n, 1}, {n, 3}} {
		b.Run(fmt.Sprintf("keys=%d/vnodes=256/versions=%d", shape.keys, shape.versions), func(b *testing.B) {
			r := rand.New(rand.NewPCG(7, uint64(shape.versions)))
			ks, vals := physBenchKeys(r, shape.keys, 256, shape.versions)
			var halves [2][]int
			for i := range ks {
				halves[i%2] = append(halves[i%2], i)
			}
			var flushCPU, compactCPU, collFlushCPU, collCompactCPU time.Duration
			var flushFiles, compactFiles int
			for b.Loop() {
				b.StopTimer()
				dir := b.TempDir()
				opts := &pebble.Options{
					Comparer:                    keys.Comparer,
					FormatMajorVersion:          pebble.FormatNewest,
					DisableAutomaticCompactions: true,
					MemTableSize:                512 << 20,
					L0StopWritesThreshold:       1000,
					Logger:                      &physLogger{},
				}
				opts.EnsureDefaults()
				db, err := pebble.Open(dir, opts)
				require.NoError(b, err)
				b.StartTimer()
				flushFiles = 0
				for _, half := range halves {
					b.StopTimer()
					for start := 0; start < len(half); start += 10_000 {
						batch := db.NewBatch()
						for _, i := range half[start:min(start+10_000, len(half))] {
							require.NoError(b, batch.Set(ks[i], vals[i], nil))
						}
						require.NoError(b, batch.Commit(pebble.NoSync))
					}
					before := db.Metrics().Levels[0].TablesCount
					runtime.GC() // nobody's garbage but the measured code's
					b.StartTimer()
					c0 := cpuTime(b)
					require.NoError(b, db.Flush())
					flushCPU += cpuTime(b) - c0
					flushFiles += int(db.Metrics().Levels[0].TablesCount - before)
				}
				b.StopTimer()
				runtime.GC()
				b.StartTimer()
				c0 := cpuTime(b)
				require.NoError(b, db.Compact(context.Background(), []byte{0}, []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF}, false))
				compactCPU += cpuTime(b) - c0
				m := db.Metrics()
				compactFiles = 0
				for l := range m.Levels {
					compactFiles += int(m.Levels[l].TablesCount)
				}
				b.StopTimer()
				require.NoError(b, db.Close())
				runtime.GC()
				b.StartTimer()

				// The collector over the flushes' inputs: each half cut into
				// its share of the flushed files; then over the compaction's
				// output.
				for _, half := range halves {
					collFlushCPU += collectRuns(b, func(i int) []byte { return ks[half[i]] }, len(half), max(1, flushFiles/2))
				}
				collCompactCPU += collectRuns(b, func(i int) []byte { return ks[i] }, len(ks), compactFiles)
			}
			n := float64(b.N) * float64(len(ks))
			perKey := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / n }
			b.ReportMetric(perKey(flushCPU), "pebble-flush-ns/key")
			b.ReportMetric(perKey(compactCPU), "pebble-compact-ns/key")
			b.ReportMetric(perKey(collFlushCPU), "collector-flush-ns/key")
			b.ReportMetric(perKey(collCompactCPU), "collector-compact-ns/key")
			b.ReportMetric(100*float64(collFlushCPU)/float64(flushCPU), "flush-overhead-%")
			b.ReportMetric(100*float64(collCompactCPU)/float64(compactCPU), "compact-overhead-%")
			b.ReportMetric(100*float64(collFlushCPU+collCompactCPU)/float64(flushCPU+compactCPU), "overhead-%")
			b.ReportMetric(float64(flushFiles), "flush-ssts")
			b.ReportMetric(float64(compactFiles), "compact-ssts")
		})
	}
}

// collectRuns feeds n sorted keys to the collector as files SSTs of equal
// key counts, finishing each (payload encoding included), and returns the
// time spent in the collector. Each SST's keys are first copied into one
// contiguous buffer, untimed: inside Pebble the writer has just encoded the
// key the collector is handed, so its bytes are in cache, and the cache
// misses of fetching them belong to Pebble's side of the ratio. The
// collector runs on this goroutine alone, so its wall time is its CPU time
// (getrusage ticks are too coarse for one SST).
func collectRuns(b *testing.B, key func(int) []byte, n, files int) time.Duration {
	per := (n + files - 1) / files
	var total time.Duration
	var buf []byte
	var ks [][]byte
	for start := 0; start < n; start += per {
		buf, ks = buf[:0], ks[:0]
		for i := start; i < min(n, start+per); i++ {
			buf = append(buf, key(i)...)
		}
		off := 0
		for i := start; i < min(n, start+per); i++ {
			l := len(key(i))
			ks = append(ks, buf[off:off+l:off+l])
			off += l
		}
		t0 := time.Now()
		c := NewCollector()
		for _, k := range ks {
			if err := c.AddPointKey(pebble.MakeInternalKey(k, 0, pebble.InternalKeyKindSet), nil); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := c.FinishTable([]byte{0}); err != nil {
			b.Fatal(err)
		}
		total += time.Since(t0)
	}
	return total
}
