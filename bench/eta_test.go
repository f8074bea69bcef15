package bench

import (
	"context"
	"flag"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

var (
	etaRows  = flag.Int("eta-rows", 60000, "rows of the ETA benchmark's workloads")
	etaLimit = flag.Float64("eta-limit", 3000, "the ETA benchmark's snapshot rate limit, rows/s over the job (below what the job reads unlimited here, so that it holds)")
)

// etaWorkload is one workload of BenchmarkETA.
type etaWorkload struct {
	name   string
	preset string
	// during: the churn during the backfill lasts this many steps (0: 40).
	during int
	// changes of the rate limit, in multiples of *etaLimit.
	changes []backfill.RateChange
	// restartAt, in checkpoints, and the actors after the restart.
	restartAt, rescaleTo int
}

func etaWorkloads() []etaWorkload {
	return []etaWorkload{
		{name: "steady", preset: "uniform"},
		// The limit halves at 30% and doubles back at 60%.
		{name: "rate-halve-double", preset: "uniform",
			changes: []backfill.RateChange{{AtPercent: 30, Limit: 0.5}, {AtPercent: 60, Limit: 1}}},
		// 50% more rows inserted over the first 20 steps of the backfill.
		{name: "insert-burst", preset: "insert-during", during: 20},
		// Zipf-skewed vnodes: one actor has most of the rows and finishes
		// last.
		{name: "skewed-vnodes", preset: "skew"},
		// Killed (dropped unclosed) after 40% of the checkpoints, reopened
		// with 3 actors.
		{name: "crash-rescale", preset: "update-churn", restartAt: -40, rescaleTo: 3},
	}
}

// BenchmarkETA runs the real backfill on each workload under a snapshot rate
// limit and compares, at every checkpoint after 10% progress, the ETA the
// record carried with the time that actually remained until the job
// finished: the median and 90th percentile of |ETA − actual| / actual in
// percent (eta-median-err-%, eta-p90-err-%), how often the actual time lay
// inside the interval (eta-coverage-%), and how many checkpoints that is
// over all runs. Every run counts: errors are pooled over b.N runs.
func BenchmarkETA(b *testing.B) {
	for _, w := range etaWorkloads() {
		b.Run("workload="+w.name, func(b *testing.B) {
			var points []ETAPoint
			var seconds float64
			for i := range b.N {
				p, err := workload.Preset(w.preset, *etaRows, 256, uint64(11+i))
				require.NoError(b, err)
				p.DuringSteps = 40
				if w.during > 0 {
					p.DuringSteps = w.during
				}
				cfg := Config{Dir: b.TempDir(), Workload: p, Actors: 2, ChunkSize: 256, BarrierRows: 512,
					RateLimit: *etaLimit, Store: &lsm.Options{Logger: lsm.QuietLogger{}}}
				for _, c := range w.changes {
					cfg.RateChanges = append(cfg.RateChanges, backfill.RateChange{AtPercent: c.AtPercent, Limit: c.Limit * *etaLimit})
				}
				if w.restartAt < 0 {
					// A share of the job's checkpoints: each reads
					// 2 × 512 rows.
					cfg.RestartAt = -w.restartAt * *etaRows / (2 * 512) / 100
				}
				start := time.Now()
				recs, err := RunRescale(context.Background(), cfg, w.rescaleTo)
				require.NoError(b, err)
				seconds += time.Since(start).Seconds()
				pts, err := ETAPoints(recs)
				require.NoError(b, err)
				points = append(points, pts...)
			}
			st := SummarizeETA(points, 0.1)
			require.NotZero(b, st.N, "no checkpoint with an ETA after 10%")
			b.ReportMetric(100*st.MedianErr, "eta-median-err-%")
			b.ReportMetric(100*st.P90Err, "eta-p90-err-%")
			b.ReportMetric(100*st.Coverage, "eta-coverage-%")
			b.ReportMetric(float64(st.N), "checkpoints")
			b.ReportMetric(seconds*1e9/float64(b.N), "ns/op")
		})
	}
}

// TestETAPoints checks the pairing of checkpoints with the time that
// remained, and the statistics over them, on hand-made records.
func TestETAPoints(t *testing.T) {
	t0 := time.Unix(1000, 0)
	rec := func(s int, truth float64, eta, lo, hi time.Duration, status backfill.ETAStatus) backfill.Record {
		return backfill.Record{Time: t0.Add(time.Duration(s) * time.Second), Truth: truth,
			ETA: backfill.ETAForecast{Status: status, Remaining: eta, Low: lo, High: hi}}
	}
	recs := []backfill.Record{
		rec(0, 0, 0, 0, 0, backfill.ETAWarming),
		rec(10, 5, 200*time.Second, 100*time.Second, 300*time.Second, backfill.ETARunning), // before 10%
		rec(20, 20, 80*time.Second, 70*time.Second, 90*time.Second, backfill.ETARunning),   // actual 80: err 0, in
		rec(60, 60, 60*time.Second, 45*time.Second, 70*time.Second, backfill.ETARunning),   // actual 40: err 0.5, out
		rec(90, 90, 11*time.Second, 9*time.Second, 12*time.Second, backfill.ETARunning),    // actual 10: err 0.1, in
		rec(100, 100, 0, 0, 0, backfill.ETAFinished),
	}
	recs[len(recs)-1].Finished = true
	pts, err := ETAPoints(recs)
	require.NoError(t, err)
	require.Len(t, pts, 4)
	require.Equal(t, 90*time.Second, pts[0].Actual)
	st := SummarizeETA(pts, 0.1)
	require.Equal(t, 3, st.N)
	require.InDelta(t, 0.1, st.MedianErr, 1e-9)
	require.InDelta(t, 0.1+0.8*0.4, st.P90Err, 1e-9)
	require.InDelta(t, 2.0/3, st.Coverage, 1e-9)
	_, err = ETAPoints(recs[:3])
	require.Error(t, err, "a job that did not finish")
}
