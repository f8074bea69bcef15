package bench

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

var (
	etaRows   = flag.Int("eta-rows", 60000, "rows of the ETA benchmark's workloads")
	etaLimit  = flag.Float64("eta-limit", 800, "the ETA benchmark's snapshot rate limit, rows/s over the job: well below what the job reads unlimited here (steady-unlimited reports it), so that the limit, not the machine, sets the rate")
	etaRecord = flag.String("eta-record", "", "a directory BenchmarkETA writes each job's checkpoints to, as the lines of a replay command of backfill/testdata/eta (WORKLOAD-RUN.txt)")
	etaLong   = flag.Bool("eta-long", false, "add BenchmarkETA's steady-long workload: a job of about 7 minutes at -eta-limit, to check the ETA never shows under a minute while more than five remain")
	etaFree   = flag.Int("eta-unlimited-rows", 1000000, "rows of BenchmarkETA's unlimited jobs with churn (the CLI's job: a checkpoint every 2,048 rows per actor, the churn spread over the backfill), make demo's 1M by default: at 400k a job lasted 1.3-2.5 s, and its p90 measured the last checkpoints' milliseconds more than the estimator")
)

// etaWorkload is one workload of BenchmarkETA.
type etaWorkload struct {
	name   string
	preset string
	// rows, if set, replaces *etaRows.
	rows int
	// unlimited: no rate limit (the machine sets the rate).
	unlimited bool
	// during: the churn during the backfill lasts this many steps (0: 40).
	during int
	// changes of the rate limit, in multiples of *etaLimit.
	changes []backfill.RateChange
	// restartAt, in checkpoints, and the actors after the restart.
	restartAt, rescaleTo int
	// cli: the lsmstats CLI's job (its defaults: a checkpoint every 2,048
	// snapshot rows per actor, the churn during the backfill spread over
	// about its length) on -eta-unlimited-rows rows, unlimited.
	cli bool
}

func etaWorkloads() []etaWorkload {
	ws := []etaWorkload{
		// No limit: the rate is what the machine gives, and its figures
		// measure the machine's noise as much as the estimator; reported
		// apart, and not held against the goals.
		{name: "steady-unlimited", preset: "uniform", unlimited: true},
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
		// The CLI's job without a limit, as make demo runs it: the mixed
		// workload (updates, deletes and inserts during the backfill,
		// spread over it), killed after 30% of its checkpoints and
		// reopened; and update churn without a crash. Held to the goals:
		// the rate is what the machine gives.
		{name: "demo-unlimited", preset: "mixed", cli: true, unlimited: true, restartAt: -30},
		// demo-unlimited's job without the crash: the difference between
		// the two is what the reopening costs the forecast (the reopened
		// process may read slower from its start; both jobs slow while a
		// memtable flush runs; docs/results.md, "What the crash costs the
		// forecast").
		{name: "mixed-unlimited", preset: "mixed", cli: true, unlimited: true},
		{name: "churn-unlimited", preset: "update-churn", cli: true, unlimited: true},
	}
	if *etaLong {
		// About 400 s at the limit: long enough that "under a minute while
		// more than five remain" can happen.
		ws = append(ws, etaWorkload{name: "steady-long", preset: "uniform", rows: int(400 * *etaLimit)})
	}
	return ws
}

// etaEstimators are the estimators BenchmarkETA replays every job through,
// by metric prefix: the job's own (backfill.ETA, whose forecasts the
// records carry: "eta") and the plain one ("plain").
var etaEstimators = []struct {
	prefix string
	new    func(*backfill.ETAOptions) ETAEstimator
}{
	{"plain", func(o *backfill.ETAOptions) ETAEstimator { return backfill.NewPlainETA(o) }},
}

// BenchmarkETA runs the real backfill on each workload under a snapshot rate
// limit (-eta-limit, well below what the job reads unlimited, so that the
// workload's defined rate changes are what the ETA must follow, not the
// machine's load) and compares, at every checkpoint after 10% progress, the
// ETA with the time that actually remained until the job finished: the
// median and 90th percentile of |ETA − actual| / actual in percent
// (*-median-err-%, *-p90-err-%), how often the actual time lay inside the
// interval (*-coverage-%), and the checkpoints whose ETA was under a minute
// while more than five remained (*-under-1m). "eta" is the job's own ETA
// (backfill.ETA, the forecasts its records carry), "plain" the same
// records replayed through backfill.PlainETA. rows/s is the snapshot rate
// the job read, limit-share-% that over the limit, last-third-time-x the
// time the job took to read the last third of its rows over the time it
// took for the first (how its rate drifted). demo-unlimited,
// mixed-unlimited and churn-unlimited run the CLI's job without a limit; a
// restart's downtime is left out of the time that remained (ETAPoints).
// Every run counts: errors are pooled over b.N runs.
func BenchmarkETA(b *testing.B) {
	for _, w := range etaWorkloads() {
		b.Run("workload="+w.name, func(b *testing.B) {
			points := map[string][]ETAPoint{}
			var seconds, rows, readSecs, early, late float64
			limit := *etaLimit
			if w.unlimited {
				limit = 0
			}
			n := *etaRows
			if w.rows > 0 {
				n = w.rows
			}
			const vnodes, actors = 256, 2
			barrierRows := 512
			if w.cli {
				n, barrierRows = *etaFree, 2048
			}
			for i := range b.N {
				p, err := workload.Preset(w.preset, n, vnodes, uint64(11+i))
				require.NoError(b, err)
				p.DuringSteps = 40
				switch {
				case w.cli:
					p.DuringSteps = max(1, n/(actors*barrierRows)) // the CLI's default
				case w.during > 0:
					p.DuringSteps = w.during
				}
				cfg := Config{Dir: b.TempDir(), Workload: p, Actors: actors, ChunkSize: 256, BarrierRows: barrierRows,
					RateLimit: limit, Store: &lsm.Options{Logger: lsm.QuietLogger(nil)}, Truth: TruthConcurrent}
				for _, c := range w.changes {
					cfg.RateChanges = append(cfg.RateChanges, backfill.RateChange{AtPercent: c.AtPercent, Limit: c.Limit * limit})
				}
				if w.restartAt < 0 {
					// A share of the job's checkpoints: each reads
					// actors × barrierRows rows.
					cfg.RestartAt = -w.restartAt * n / (actors * barrierRows) / 100
				}
				start := time.Now()
				recs, restart, err := RunRescale(context.Background(), cfg, w.rescaleTo)
				require.NoError(b, err)
				seconds += time.Since(start).Seconds()
				// The rate read, over the first run's checkpoints.
				first := recs
				if restart >= 0 {
					first = recs[:restart]
				}
				if k := len(first) - 1; k > 0 {
					rows += float64(first[k].SnapshotRows - first[0].SnapshotRows)
					readSecs += first[k].Time.Sub(first[0].Time).Seconds()
				}
				pts, err := ETAPoints(recs)
				require.NoError(b, err)
				points["eta"] = append(points["eta"], pts...)
				e, l := thirds(recs)
				early, late = early+e, late+l
				after := actors
				if w.rescaleTo > 0 {
					after = w.rescaleTo
				}
				// The replay is faithful: the job's own estimator replayed
				// gives the forecasts its records carry.
				own, err := ReplayETA(recs, restart, actors, after, vnodes, cfg.RateChanges,
					func(o *backfill.ETAOptions) ETAEstimator { return backfill.NewETA(o) })
				require.NoError(b, err)
				for k := range own {
					// Equal but for rounding: the reopened job's ETA
					// resumes from its persisted state.
					got, want := own[k].ETA, recs[k].ETA
					require.Equal(b, want.Status, got.Status, "record %d replayed", k)
					for _, d := range [][2]time.Duration{{want.Remaining, got.Remaining}, {want.Low, got.Low}, {want.High, got.High}} {
						require.InDelta(b, d[0].Seconds(), d[1].Seconds(), 1e-6*max(1, d[0].Seconds()), "record %d replayed: %v, not %v", k, got, want)
					}
				}
				if *etaRecord != "" {
					var buf bytes.Buffer
					require.NoError(b, WriteETAReplay(&buf, recs, restart, actors, after, vnodes, cfg.RateChanges))
					require.NoError(b, os.WriteFile(filepath.Join(*etaRecord, fmt.Sprintf("%s-%d.txt", w.name, i)), buf.Bytes(), 0o644))
				}
				for _, e := range etaEstimators {
					rr, err := ReplayETA(recs, restart, actors, after, vnodes, cfg.RateChanges, e.new)
					require.NoError(b, err)
					pts, err := ETAPoints(rr)
					require.NoError(b, err)
					points[e.prefix] = append(points[e.prefix], pts...)
				}
			}
			for prefix, pts := range points {
				st := SummarizeETA(pts, 0.1)
				require.NotZero(b, st.N, "%s: no checkpoint with an ETA after 10%%", prefix)
				b.ReportMetric(100*st.MedianErr, prefix+"-median-err-%")
				b.ReportMetric(100*st.P90Err, prefix+"-p90-err-%")
				b.ReportMetric(100*st.Coverage, prefix+"-coverage-%")
				b.ReportMetric(float64(st.UnderMinute), prefix+"-under-1m")
				if prefix == "eta" {
					b.ReportMetric(float64(st.N), "checkpoints")
				}
			}
			if early > 0 {
				b.ReportMetric(late/early, "last-third-time-x")
			}
			if readSecs > 0 {
				b.ReportMetric(rows/readSecs, "rows/s")
				if limit > 0 {
					b.ReportMetric(100*rows/readSecs/limit, "limit-share-%")
				}
			}
			b.ReportMetric(seconds*1e9/float64(b.N), "ns/op")
		})
	}
}

// thirds returns the running time (a restart's downtime left out, as
// ETAPoints does) the job took to read the first and the last third of its
// rows (by its truth): how the rate drifted over the job.
func thirds(recs []backfill.Record) (first, last float64) {
	var down time.Duration
	var t1, t2 time.Time
	for i, r := range recs {
		if r.Reopened && i > 0 {
			down += r.Time.Sub(recs[i-1].Time)
		}
		t := r.Time.Add(-down)
		switch {
		case i == 0:
			t1 = t
		case t2.IsZero() && r.Truth >= 100.0/3:
			first, t2 = t.Sub(t1).Seconds(), t
		case r.Truth >= 200.0/3 && last == 0:
			t1 = t
			last = -1
		case r.Finished:
			return first, t.Sub(t1).Seconds()
		}
	}
	return 0, 0
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

	// A restart between 60 s and 70 s (the reopened job's first figure):
	// its 10 s of downtime are left out of the time that remained before
	// it, and the ETA at 60 s (40 s, of which 30 s were running) is exact.
	recs = []backfill.Record{
		rec(20, 20, 80*time.Second, 70*time.Second, 90*time.Second, backfill.ETARunning),
		rec(60, 60, 30*time.Second, 25*time.Second, 35*time.Second, backfill.ETARunning),
		rec(70, 60, 30*time.Second, 25*time.Second, 35*time.Second, backfill.ETARunning),
		rec(100, 100, 0, 0, 0, backfill.ETAFinished),
	}
	recs[2].Reopened = true
	recs[3].Finished = true
	pts, err = ETAPoints(recs)
	require.NoError(t, err)
	require.Len(t, pts, 3)
	for i, want := range []time.Duration{70 * time.Second, 30 * time.Second, 30 * time.Second} {
		require.Equal(t, want, pts[i].Actual, "point %d", i)
	}
	require.Zero(t, pts[1].RelErr())
}
