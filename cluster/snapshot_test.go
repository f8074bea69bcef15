package cluster

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/stretchr/testify/require"
)

// TestClusterSnapshot runs a snapshot backfill (a snapshot at a pinned
// epoch, the upstream's changes meanwhile in a log store partitioned by
// vnode) over 3 node processes on the real S3 server, and moves a vnode
// range of all four of the job's tables (upstream, MV, state, log store)
// from a node in its log-store phase to another: the range's pending log
// rows move with it. Every checkpoint's summed figure is held to the truth
// (each node's scans at its pinned epoch and of its log store) and the
// displayed figure never goes down; after the move every node's Verify is
// clean and it holds rows of its own vnodes only; at the end every node's
// MV equals its upstream.
func TestClusterSnapshot(t *testing.T) {
	rows := 24000
	if raceEnabled {
		rows /= 3
	}
	p, err := workload.Preset("mixed", rows, 48, 5)
	require.NoError(t, err)
	p.BatchRows, p.DuringSteps = rows/3, 40
	lw := newTestLog(t)
	nodes, _ := testCluster(t, 3, lw)
	var moved *MoveResult
	var movedPhase string
	var errs, shown []float64
	phases := map[string]bool{}
	cfg := CoordinatorConfig{
		Job:   JobSpec{Workload: p, Mode: "snapshot", Actors: 1, CheckpointEvery: 2, BarrierRows: max(16, rows/(3*2*30))},
		Nodes: nodes, Truth: true, HeartbeatTimeout: time.Second,
		Log: slog.New(slog.NewTextHandler(lw, nil)),
		OnCheckpoint: func(c Checkpoint) {
			st := c.Figures["stats"]
			errs = append(errs, abs(st.Raw-c.Truth))
			shown = append(shown, st.Shown)
			for _, r := range c.Nodes {
				phases[r.Phase] = true
			}
		},
		OnStep: func(ctx context.Context, c *Coordinator, step uint64, checkpoint bool) error {
			if !checkpoint || moved != nil || c.lastCkp == nil {
				return nil
			}
			for _, name := range sortedKeys(c.lastCkp.Nodes) {
				if c.lastCkp.Nodes[name].Phase != "log store" || len(c.Vnodes()[name]) == 0 {
					continue
				}
				to := "node-0"
				if name == to {
					to = "node-1"
				}
				r := c.Vnodes()[name][0]
				r.Hi = r.Lo + max(1, (r.Hi-r.Lo)/2)
				res, err := c.Move(ctx, name, to, r, MoveOptions{})
				require.NoError(t, err)
				moved, movedPhase = &res, c.lastCkp.Nodes[name].Phase
				checks, err := c.Check(ctx)
				require.NoError(t, err)
				for node, r := range checks {
					require.Empty(t, r.Problems, "after the move: node %s", node)
				}
				t.Logf("moved %v %s → %s in its log-store phase: %+v", r, name, to, res.Stats)
				return nil
			}
			return nil
		},
	}
	c, err := NewCoordinator(context.Background(), cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	last, err := c.Run(context.Background())
	require.NoError(t, err)
	require.True(t, last.Finished)
	require.NotNil(t, moved, "no node reached its log-store phase with vnodes")
	require.Equal(t, "log store", movedPhase)
	require.True(t, phases["snapshot"] && phases["log store"] && phases["joined"], "phases seen: %v", phases)
	checks, err := c.Check(context.Background())
	require.NoError(t, err)
	for name, r := range checks {
		require.Empty(t, r.Problems, "node %s", name)
		require.True(t, r.MVMatches, "node %s", name)
	}
	var mean, worst float64
	for i, e := range errs {
		mean += e / float64(len(errs))
		worst = max(worst, e)
		if i > 0 {
			require.GreaterOrEqual(t, shown[i], shown[i-1], "displayed figure went down at checkpoint %d", i+1)
		}
	}
	t.Logf("%d checkpoints; stats error mean %.3f pp, max %.3f pp", len(errs), mean, worst)
	require.LessOrEqual(t, mean, 0.2)
	require.LessOrEqual(t, worst, 1.0)
}
