package soak

import (
	"context"
	"io"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// TestRunJobReportsCommittedSteps: every step OnStep reports is committed.
// With a checkpoint every second barrier, the step that starts the backfill
// (its first barrier) commits nothing; OnStep reported it, and a run that
// ended right after it (here: cancelled then) left the soak believing a
// step committed that a reopen did not find (make soak's finding
// "committed step 7, but the worker reported step 8 committed").
func TestRunJobReportsCommittedSteps(t *testing.T) {
	dir := t.TempDir()
	spec := jobSpec(1, 0)
	spec.CheckpointEvery = 2
	g0, err := workload.New(spec.Workload)
	require.NoError(t, err)
	start := g0.BackfillStep()
	require.Greater(t, start, uint64(2), "a load of several steps")

	s, err := lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger(io.Discard)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var reported uint64
	_, err = RunJob(ctx, s, spec, 2, Hooks{
		OnStep: func(step uint64) {
			reported = max(reported, step)
			if step >= start {
				cancel() // end the run right after the step that starts the backfill
			}
		},
		OnCheckpoint: func(backfill.Record) { cancel() },
	})
	require.True(t, err == nil || errors.Is(err, context.Canceled), "%v", err)
	require.NoError(t, s.Close())
	require.Positive(t, reported)

	s, err = lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger(io.Discard)})
	require.NoError(t, err)
	defer s.Close()
	g, err := workload.New(spec.Workload)
	require.NoError(t, err)
	j, err := backfill.OpenJob(jobConfig(s, spec, 1, g, Hooks{}))
	require.NoError(t, err)
	defer j.Close()
	require.GreaterOrEqual(t, g.Step(), reported, "OnStep reported a step that is not committed")
}
