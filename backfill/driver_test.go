package backfill_test

import (
	"context"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// driverJob is the job of the driver's tests: a user's table loaded by
// the source's first 8 steps (a backfill.Loader), which keeps writing
// (inserts, checked updates and deletes) until step 40, scored against a
// scan of the table.
func driverJob(s *lsm.Store, src backfill.Source) backfill.JobConfig {
	return backfill.JobConfig{Store: s, Upstream: userTable(1), Name: "orders_mv", Actors: 2, ChunkSize: 8, BarrierRows: 10,
		Source: src, KeepRecords: true, Score: backfilltest.Oracles(backfilltest.ScanOracle{Store: s, Table: 1})}
}

func newDriverSource() *userSource {
	return &userSource{def: userTable(1), rows: 20, load: 8, last: 40}
}

// TestDriverRestarts runs a job with a Driver that restarts it twice, when
// its figure reaches 30% and 60%, in each way (close, cancel, crash), the
// second time with 3 actors: each opening is told how the one before
// ended and gets the store still open (close, cancel) or none (crash);
// after each restart OnCheckpoint gets the reopened job's figure, marked,
// the same as the checkpoint the job stopped at; the source resumes at
// that checkpoint's step; the display rules hold over every record, each
// scored; the MV equals its upstream at the end; and the Result sums the
// openings.
func TestDriverRestarts(t *testing.T) {
	for _, kind := range []backfill.RestartKind{backfill.RestartClose, backfill.RestartCancel, backfill.RestartCrash} {
		t.Run(kind.String(), func(t *testing.T) {
			dir := t.TempDir()
			opts := &lsm.Options{Logger: lsm.QuietLogger(nil)}
			s, err := lsm.Open(dir, opts)
			require.NoError(t, err)
			defer func() { _ = s.Close() }()
			src := newDriverSource()
			var openings []backfill.Opening
			var recs, stoppedAt []backfill.Record
			thresholds := []float64{30, 60}
			d := backfill.Driver{
				Open: func(o backfill.Opening) (backfill.JobConfig, error) {
					openings = append(openings, o)
					if o.Restart != nil && o.Restart.Kind == backfill.RestartCrash {
						var err error
						if s, err = lsm.Open(dir, opts); err != nil {
							return backfill.JobConfig{}, err
						}
					}
					return driverJob(s, src), nil
				},
				OnCheckpoint: func(r backfill.Record) { recs = append(recs, r) },
				Restart: func(r backfill.Record) (backfill.Restart, bool) {
					n := len(stoppedAt)
					if n == len(thresholds) || r.Displayed().Raw < thresholds[n] {
						return backfill.Restart{}, false
					}
					stoppedAt = append(stoppedAt, r)
					rs := backfill.Restart{Kind: kind}
					if n == 1 {
						rs.Actors = 3
					}
					return rs, true
				},
				OnEnd: func(j *backfill.Job) error { return j.Compare() },
			}
			res, err := d.Run(context.Background())
			require.NoError(t, err)

			require.Len(t, openings, 3)
			for i, o := range openings {
				require.Equal(t, i, o.N)
				if i == 0 {
					require.Nil(t, o.Restart)
					require.Nil(t, o.Store)
					continue
				}
				require.Equal(t, kind, o.Restart.Kind)
				require.Equal(t, map[int]int{1: 0, 2: 3}[i], o.Restart.Actors)
				if kind == backfill.RestartCrash {
					require.Nil(t, o.Store, "the crashed store is closed")
				} else {
					require.NotNil(t, o.Store, "the store stays open")
				}
			}
			require.Len(t, stoppedAt, 2)
			var reopened []int
			for i, r := range recs {
				require.GreaterOrEqual(t, r.Truth, 0.0, "record %d is scored", i)
				if r.Reopened {
					reopened = append(reopened, i)
				}
			}
			require.Len(t, reopened, 2, "a reopened figure after each restart")
			for k, i := range reopened {
				before, r := recs[i-1], recs[i]
				require.Equal(t, stoppedAt[k].Barrier, before.Barrier, "the reopened figure follows the restart's checkpoint")
				require.Equal(t, before.Barrier, r.Barrier)
				require.Equal(t, before.Step, r.Step)
				require.Equal(t, before.Displayed().Shown, r.Displayed().Shown, "the figure survives the restart")
				require.Equal(t, r.Step, src.resumed[k+1], "the source resumes at the restart's checkpoint")
			}
			require.Equal(t, []uint64{0}, src.resumed[:1])
			require.Greater(t, recs[0].Step, src.load, "the load steps come before the backfill (Loader)")
			require.NoError(t, backfilltest.CheckDisplay(recs))
			t.Logf("%d records, restarts at %s and %s", len(recs), stoppedAt[0].Displayed().Shown, stoppedAt[1].Displayed().Shown)
			require.Equal(t, recs, res.Records, "Result.Records: every record, reopened ones included")
			require.Equal(t, len(recs)-2, res.Checkpoints)
			require.Equal(t, recs[len(recs)-1], res.Last)
			require.True(t, res.Finished)
			require.True(t, res.Last.Finished)
			require.Equal(t, s.CommittedEpoch(), res.Epoch)
			require.NotZero(t, src.done, "the source heard of the finish (FinishListener)")

			// Run again: the job reopens finished, shows its figure and
			// runs its tail steps.
			recs = nil
			res, err = d.Run(context.Background())
			require.NoError(t, err)
			require.True(t, recs[0].Reopened)
			require.Equal(t, "100.00%", recs[0].Displayed().Shown[:7])
		})
	}
}

// TestDriverCallerCancel: a Run whose context the caller cancels returns
// the cancellation with the job closed and the store open; the next Run
// delivers the reopened figure first, the figure of the last checkpoint
// delivered, and finishes the job.
func TestDriverCallerCancel(t *testing.T) {
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	src := newDriverSource()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var recs []backfill.Record
	d := backfill.Driver{
		Open: func(backfill.Opening) (backfill.JobConfig, error) { return driverJob(s, src), nil },
		OnCheckpoint: func(r backfill.Record) {
			if recs = append(recs, r); len(recs) == 3 {
				cancel()
			}
		},
	}
	_, err = d.Run(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, recs, 3)
	last := recs[2]

	res, err := d.Run(context.Background())
	require.NoError(t, err)
	require.True(t, recs[3].Reopened, "the next Run's first record")
	require.Equal(t, last.Barrier, recs[3].Barrier)
	require.Equal(t, last.Displayed().Shown, recs[3].Displayed().Shown)
	require.Equal(t, last.Step, src.resumed[1])
	require.NoError(t, backfilltest.CheckDisplay(recs))
	require.True(t, res.Finished)
	require.Equal(t, recs[3:], res.Records)
}

// TestDriverErrors: a Driver without Open, an Open, OnOpen or OnEnd that
// fails, and a rescale the job refuses end Run with a clear error, and
// leave no writer behind (the job opens again).
func TestDriverErrors(t *testing.T) {
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	ctx := context.Background()
	_, err = (&backfill.Driver{}).Run(ctx)
	require.ErrorContains(t, err, "Driver.Open is required")

	boom := errors.New("boom")
	_, err = (&backfill.Driver{Open: func(backfill.Opening) (backfill.JobConfig, error) { return backfill.JobConfig{}, boom }}).Run(ctx)
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, "opening 0 of the job")

	src := newDriverSource()
	open := func(backfill.Opening) (backfill.JobConfig, error) { return driverJob(s, src), nil }
	_, err = (&backfill.Driver{Open: open, OnOpen: func(*backfill.Job) error { return boom }}).Run(ctx)
	require.ErrorIs(t, err, boom)

	// 17 actors for the 16 vnodes of the table: the reopened job is refused.
	d := backfill.Driver{Open: open, Restart: func(backfill.Record) (backfill.Restart, bool) {
		return backfill.Restart{Kind: backfill.RestartClose, Actors: 17}, true
	}}
	_, err = d.Run(ctx)
	require.ErrorContains(t, err, "17 actors for 16 vnodes")

	d = backfill.Driver{Open: open, Restart: func(backfill.Record) (backfill.Restart, bool) {
		return backfill.Restart{Kind: 9}, true
	}}
	_, err = d.Run(ctx)
	require.ErrorContains(t, err, "unknown restart kind 9")

	res, err := (&backfill.Driver{Open: open, OnEnd: func(*backfill.Job) error { return boom }}).Run(ctx)
	require.ErrorIs(t, err, boom)
	require.True(t, res.Finished)
	require.NoError(t, backfilltest.CheckDisplay(res.Records))
}

// TestObserveForwardsOptional: a wrapped source keeps its BackfillStep and
// hears of the finish; a minimal one wrapped starts the backfill at once.
func TestObserveForwardsOptional(t *testing.T) {
	src := newDriverSource()
	w := backfilltest.Observe(src)
	require.Equal(t, src.load+1, w.(backfill.Loader).BackfillStep())
	w.(backfill.FinishListener).Finished(7)
	require.Equal(t, uint64(7), src.done)
	require.Zero(t, backfilltest.Observe(&orders{}).(backfill.Loader).BackfillStep())
	require.Equal(t, "RestartKind(7)", backfill.RestartKind(7).String())
}
