package backfill_test

import (
	"context"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/bench/genjob"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// TestJobETA runs a small rate-limited job whose limit is halved at 30%
// (RateChanges), drops it unclosed after a few checkpoints and reopens it
// with another number of actors: the records carry the ETA (warming first,
// then shown, finished at the end), the limit in force (halved once the
// figure reached 30%, and still halved after the restart), and the
// reopened job shows an ETA from its first figure, carried over from the
// metadata row. The measured rate follows the limit.
func TestJobETA(t *testing.T) {
	p, err := workload.Preset("insert-during", 4000, 16, 5)
	require.NoError(t, err)
	p.BatchRows = 2000
	p.DuringSteps = 10
	dir := t.TempDir()
	// Rows/s over the job, well below what the job reads unlimited (about
	// 10,000 rows/s here, with a commit at every barrier): about 2 s.
	const limit = 3000
	open := func(actors int) (*lsm.Store, *backfill.Job) {
		g, err := workload.New(p)
		require.NoError(t, err)
		s, err := lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger(nil)})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		j, err := backfill.OpenJob(backfill.JobConfig{
			Store: s, Upstream: p.TableDef(1), MV: 2, State: 3, Meta: 4, KeepRecords: true,
			Actors: actors, ChunkSize: 32, BarrierRows: 100, RateLimit: limit,
			RateChanges: []backfill.RateChange{{AtPercent: 30, Limit: limit / 2}},
			Source:      genjob.Source{G: g}, Score: backfilltest.Oracles(genjob.Oracle{G: g}),
		})
		require.NoError(t, err)
		return s, j
	}
	s, j := open(2)
	ctx := context.Background()
	var recs []backfill.Record
	for len(recs) < 12 {
		r, ok, err := j.Step(ctx)
		require.NoError(t, err)
		if ok {
			recs = append(recs, r)
		}
	}
	require.Equal(t, backfill.ETAWarming, recs[0].ETA.Status, "no ETA from the first checkpoint")
	shown := 0
	for _, r := range recs {
		if r.ETA.Shown() {
			shown++
		}
		if r.Figure("stats").Raw < 30 {
			require.Equal(t, float64(limit), r.RateLimit, "barrier %d", r.Barrier)
		}
	}
	require.NotZero(t, shown, "an ETA after 12 checkpoints")
	last := recs[len(recs)-1]
	require.Greater(t, last.Figure("stats").Raw, 30.0, "the job must pass the rate change before the restart")
	require.Equal(t, float64(limit/2), last.RateLimit)
	require.Equal(t, float64(limit/2), j.RateLimit())
	// The limit holds: the rows read never run ahead of it by more than
	// the limiters' bursts (a second of each actor's share: one second of
	// the job's limit). How far below it the job reads depends on the
	// machine: no lower bound is asserted.
	for _, r := range recs {
		read := float64(r.SnapshotRows - recs[0].SnapshotRows)
		require.LessOrEqual(t, read, limit*(r.Time.Sub(recs[0].Time).Seconds()+1)+200, "rows read by barrier %d", r.Barrier)
	}
	require.Positive(t, last.ETA.Rate)
	// Dropped unclosed: a crash.
	require.NoError(t, s.Close())

	s, j = open(3)
	require.Equal(t, float64(limit/2), j.RateLimit(), "the limit in force survives the restart")
	init := j.Initial()
	require.NotNil(t, init)
	require.True(t, init.ETA.Shown(), "the reopened job shows the carried ETA at once: %v", init.ETA)
	require.Greater(t, init.ETA.Remaining, time.Duration(0))
	res, err := j.Run(ctx)
	require.NoError(t, err)
	require.True(t, res.Finished)
	require.NoError(t, j.Compare())
	end := res.Records[len(res.Records)-1]
	require.Equal(t, backfill.ETAFinished, end.ETA.Status)
	require.Zero(t, end.ETA.Remaining)
	for _, r := range res.Records {
		require.Equal(t, float64(limit/2), r.RateLimit)
		if !r.Finished && r.ETA.Shown() {
			require.LessOrEqual(t, r.ETA.Low, r.ETA.Remaining)
			require.LessOrEqual(t, r.ETA.Remaining, r.ETA.High)
		}
	}
	require.NoError(t, j.Close())
}

// TestJobSetRateLimit changes the limit while Run runs, from another
// goroutine (run with -race), and checks bad limits are refused at open.
func TestJobSetRateLimit(t *testing.T) {
	p, err := workload.Preset("uniform", 3000, 8, 3)
	require.NoError(t, err)
	g, err := workload.New(p)
	require.NoError(t, err)
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	cfg := backfill.JobConfig{Store: s, Upstream: p.TableDef(1), MV: 2, State: 3, Meta: 4, KeepRecords: true,
		Actors: 2, ChunkSize: 32, BarrierRows: 100, RateLimit: 20000, Source: genjob.Source{G: g}}
	for _, bad := range []backfill.JobConfig{
		func() backfill.JobConfig { c := cfg; c.RateLimit = -1; return c }(),
		func() backfill.JobConfig {
			c := cfg
			c.RateChanges = []backfill.RateChange{{AtPercent: 10, Limit: -5}}
			return c
		}(),
	} {
		_, err := backfill.OpenJob(bad)
		require.ErrorContains(t, err, "rate")
	}
	j, err := backfill.OpenJob(cfg)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 20; i++ {
			j.SetRateLimit(float64(10000 + 5000*(i%3)))
			time.Sleep(2 * time.Millisecond)
		}
		j.SetRateLimit(0)
	}()
	res, err := j.Run(context.Background())
	<-done
	require.NoError(t, err)
	require.True(t, res.Finished)
	require.Zero(t, j.RateLimit())
	require.NoError(t, j.Compare())
	require.NoError(t, j.Close())
}

// TestJobETASchedule checks that a job gives its ETA the rate changes it has
// scheduled: with the limit to halve at 50%, the ETA before 50% is the rows
// to 50% at the rate read plus the rest at half of it (or at the new limit,
// on a machine too slow for the old one to hold the rate), not the rows
// ahead over the rate read.
func TestJobETASchedule(t *testing.T) {
	p, err := workload.Preset("uniform", 6000, 16, 7)
	require.NoError(t, err)
	g, err := workload.New(p)
	require.NoError(t, err)
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	const limit = 3000
	j, err := backfill.OpenJob(backfill.JobConfig{Store: s, Upstream: p.TableDef(1), MV: 2, State: 3, Meta: 4,
		Actors: 2, ChunkSize: 32, BarrierRows: 100, RateLimit: limit,
		RateChanges: []backfill.RateChange{{AtPercent: 50, Limit: limit / 2}},
		Source:      genjob.Source{G: g}})
	require.NoError(t, err)
	checked := 0
	for !j.Finished() {
		r, ok, err := j.Step(context.Background())
		require.NoError(t, err)
		pct := r.Figure("stats").Raw
		if !ok || r.ETA.Status != backfill.ETARunning || pct < 10 || pct > 45 {
			continue
		}
		// After 50%: half the rate while the limit holds it (the job reads
		// at 85% of it or more), else the rate up to the new limit.
		after := min(r.ETA.Rate, limit/2)
		if r.ETA.Rate >= 0.85*limit {
			after = r.ETA.Rate / 2
		}
		plain := r.ETA.Ahead / r.ETA.Rate
		want := plain * ((50 - pct) + (100-50)*r.ETA.Rate/after) / (100 - pct)
		require.InEpsilon(t, want, r.ETA.Remaining.Seconds(), 0.1,
			"at %.1f%%: ETA %v, want %.1fs (%.1fs without the schedule)", pct, r.ETA, want, plain)
		checked++
	}
	require.NotZero(t, checked, "no ETA shown between 10% and 45%")
	require.Equal(t, float64(limit/2), j.RateLimit())
	require.NoError(t, j.Close())
}
