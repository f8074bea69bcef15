package bench

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/bench/genjob"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

var (
	benchRows   = flag.Int("bench-rows", 200000, "rows of the benchmark workloads")
	benchVnodes = flag.Int("bench-vnodes", 256, "vnodes of the benchmark workloads")
)

// canonical is the canonical run of the backfill issue: 2 actors, a
// checkpoint every 2,048 snapshot rows per actor.
func canonical(b *testing.B, name string, approach []string) Config {
	p, err := workload.Preset(name, *benchRows, *benchVnodes, 7)
	require.NoError(b, err)
	p.DuringSteps = 40
	return Config{Dir: b.TempDir(), Workload: p, Actors: 2, ChunkSize: 256, BarrierRows: 2048,
		Approaches: approach, Store: &lsm.Options{Logger: lsm.QuietLogger(nil)}}
}

// BenchmarkBackfill runs each workload once per approach and reports how
// far the approach's raw figure was from the truth, what it persisted and
// what its progress computation cost per checkpoint. Each iteration also
// runs the raw-Pebble pipeline (RunRaw) on the same workload, before or
// after the store in turn, and the throughputs are reported side by side:
// rows/s and raw-rows/s of the backfill's snapshot, load-rows/s and
// raw-load-rows/s of the load, and their ratios x-of-raw-pebble and
// load-x-of-raw-pebble.
func BenchmarkBackfill(b *testing.B) {
	for _, name := range []string{"uniform", "skew", "update-churn", "delete-churn", "tombstone-prefix", "insert-during"} {
		for _, approach := range []string{"rowcount", "stats"} {
			b.Run(fmt.Sprintf("workload=%s/approach=%s", name, approach), func(b *testing.B) {
				// Every run counts: means over the runs, the largest
				// error of any, rows/s over all of them. ns/op is the
				// backfill's time (Summary.Backfill), without loading
				// the table or comparing the MV.
				var meanPP, maxPP, stateBytes, progressNs, progressWallNs float64
				var t throughput
				for i := range b.N {
					cfg := canonical(b, name, []string{approach})
					var sum Summary
					inTurn(i, func() {
						var err error
						sum, err = Run(context.Background(), cfg)
						require.NoError(b, err)
						require.True(b, sum.MVMatches, sum.MVError)
					}, func() { t.addRaw(b, cfg) })
					t.add(sum)
					e := sum.Errors[approach]
					meanPP += e.MeanPP
					maxPP = max(maxPP, e.MaxPP)
					stateBytes += sum.StateBytesPerBarrier
					progressNs += sum.ProgressNanos[approach]
					progressWallNs += sum.ProgressWallNanos[approach]
				}
				n := float64(b.N)
				b.ReportMetric(meanPP/n, "err-mean-pp")
				b.ReportMetric(maxPP, "err-max-pp")
				b.ReportMetric(stateBytes/n, "state-bytes/barrier")
				b.ReportMetric(progressNs/n, "progress-cpu-ns/barrier")
				b.ReportMetric(progressWallNs/n, "progress-wall-ns/barrier")
				t.report(b)
				b.ReportMetric(t.store.Backfill.Seconds()*1e9/n, "ns/op")
			})
		}
	}
}

// throughput adds up the store's and the raw pipeline's runs of a
// benchmark.
type throughput struct {
	store Summary
	raw   RawResult
}

func (t *throughput) add(s Summary) {
	t.store.SnapshotRows += s.SnapshotRows
	t.store.Backfill += s.Backfill
	t.store.LoadOps += s.LoadOps
	t.store.Load += s.Load
}

// addRaw runs the raw-Pebble pipeline on cfg's workload in a directory of
// its own.
func (t *throughput) addRaw(b *testing.B, cfg Config) {
	cfg.Dir = b.TempDir()
	r, err := RunRaw(context.Background(), cfg)
	require.NoError(b, err)
	t.raw.SnapshotRows += r.SnapshotRows
	t.raw.Backfill += r.Backfill
	t.raw.LoadOps += r.LoadOps
	t.raw.Load += r.Load
}

// report reports both sides' rows/s and their ratios.
func (t *throughput) report(b *testing.B) {
	b.ReportMetric(t.store.SnapshotRate(), "rows/s")
	b.ReportMetric(t.raw.SnapshotRate(), "raw-rows/s")
	b.ReportMetric(t.store.SnapshotRate()/t.raw.SnapshotRate(), "x-of-raw-pebble")
	b.ReportMetric(t.store.LoadRate(), "load-rows/s")
	b.ReportMetric(t.raw.LoadRate(), "raw-load-rows/s")
	b.ReportMetric(t.store.LoadRate()/t.raw.LoadRate(), "load-x-of-raw-pebble")
}

// inTurn runs both sides of a side-by-side comparison, the store first on
// even iterations and raw Pebble first on odd ones, so that neither always
// runs on the caches (and the compaction debt) the other left.
func inTurn(i int, store, raw func()) {
	if i%2 == 0 {
		store()
		raw()
	} else {
		raw()
		store()
	}
}

// halfDone builds a store holding a job stopped halfway through the
// backfill and returns its config.
func halfDone(b *testing.B, approach []string) Config {
	cfg := canonical(b, "update-churn", approach)
	s, err := Open(cfg)
	require.NoError(b, err)
	for !s.Job.Started() {
		_, _, err := s.Job.Step(context.Background())
		require.NoError(b, err)
	}
	for range *benchRows / (2 * 2048) / 2 {
		_, _, err := s.Job.Step(context.Background())
		require.NoError(b, err)
	}
	require.NoError(b, s.Close())
	return cfg
}

// BenchmarkRecovery measures the time from reopening a store with a job
// halfway through its backfill until the first progress figure: opening the
// store, resuming the workload model from the committed upstream table,
// loading every vnode's state and computing the figure. Resuming the model
// is this harness's stand-in for an upstream that resumes on its own, so
// the same loop also times building the model and resuming it alone, on
// the reopened store (ms/model-resume), and reports the difference
// (ms/first-figure-excl-model): an estimate of the rest, since the
// standalone resume runs on warmer caches than the one inside the reopen.
func BenchmarkRecovery(b *testing.B) {
	for _, approach := range []string{"rowcount", "stats"} {
		b.Run("approach="+approach, func(b *testing.B) {
			cfg := halfDone(b, []string{approach})
			var total, model time.Duration
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				s, err := Open(cfg)
				require.NoError(b, err)
				require.NotNil(b, s.Initial())
				total += time.Since(start)
				start = time.Now()
				g, err := workload.New(cfg.Workload)
				require.NoError(b, err)
				require.NoError(b, genjob.Source{G: g}.Resume(backfill.Position{Step: s.Gen.Step(),
					Epoch: s.Store.CommittedEpoch(), Store: s.Store, Upstream: g.Params().TableDef(UpstreamTable)}))
				model += time.Since(start)
				require.NoError(b, s.Close())
			}
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 / float64(b.N) }
			b.ReportMetric(ms(total), "ms/first-figure")
			b.ReportMetric(ms(model), "ms/model-resume")
			b.ReportMetric(ms(total-model), "ms/first-figure-excl-model")
			// ns/op: reopening to the first figure, without the Close and
			// the standalone resume the loop also runs.
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/op")
		})
	}
}

// BenchmarkProgressVsScan compares the stats approach's progress
// computation with an exact counting scan of the same table (the rows behind
// each cursor and all rows), at a checkpoint where every vnode is in
// progress. An op is one of each, so ns/op is nearly all scan; the figures
// are stats-ns, scan-ns and their ratio.
func BenchmarkProgressVsScan(b *testing.B) {
	cfg := halfDone(b, nil)
	s, err := Open(cfg)
	require.NoError(b, err)
	defer s.Close()
	rec := s.Initial()
	require.NotNil(b, rec)
	in := backfill.Input{Epoch: rec.Epoch, Upstream: UpstreamTable, Vnodes: rec.Vnodes, Stats: s.Store.Stats()}
	scan := backfilltest.ScanOracle{Store: s.Store, Table: UpstreamTable}
	var stats, scanned time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		backfill.StatsEstimator{}.Estimate(in)
		stats += time.Since(start)
		start = time.Now()
		for _, v := range rec.Vnodes {
			_, _, err := scan.Rows(rec.Epoch, v.Vnode, v.Cursor)
			require.NoError(b, err)
		}
		scanned += time.Since(start)
	}
	b.ReportMetric(float64(stats.Nanoseconds())/float64(b.N), "stats-ns")
	b.ReportMetric(float64(scanned.Nanoseconds())/float64(b.N), "scan-ns")
	b.ReportMetric(float64(scanned)/float64(stats), "x-faster-than-scan")
}
