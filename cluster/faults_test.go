package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestClusterFaults runs a job over 2 node processes through the
// coordinator's three faults, one after another at checkpoints:
//
//   - a lost answer: the network loses a node's answer to a barrier
//     (an interceptor drops it after the node ran the step); the
//     coordinator asks again and the node answers the same report, the
//     step not run twice, nothing reopened;
//   - a slow node: a node stopped (SIGSTOP) for half the heartbeat
//     timeout; the checkpoint waits for it, no checkpoint is declared
//     meanwhile, and the node is not declared lost;
//   - a node that stops answering: stopped for good; its heartbeats stop,
//     its call is cancelled after the timeout, and it is killed and
//     started again on its directory, resuming from its last checkpoint.
//
// Each is a log line of the coordinator's; the job ends with the MV equal
// to the upstream on both nodes and Verify clean.
func TestClusterFaults(t *testing.T) {
	p, err := workload.Preset("mixed", 12000, 64, 7)
	require.NoError(t, err)
	p.BatchRows = p.Rows / 3
	lw := newTestLog(t)
	nodes, _ := testCluster(t, 2, lw)
	var loseNext atomic.Bool
	var lost atomic.Int32
	lose := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil && strings.HasSuffix(method, "/Barrier") && loseNext.CompareAndSwap(true, false) {
			lost.Add(1)
			return status.Error(codes.Unavailable, "the answer was lost on the network (test)")
		}
		return err
	}
	const timeout = 1500 * time.Millisecond
	ckpts := 0
	var stepsOfCkpt []uint64
	phase := 0
	var slowStep uint64
	var slowTook time.Duration
	cfg := CoordinatorConfig{
		Job:   JobSpec{Workload: p, Actors: 1, CheckpointEvery: 2, BarrierRows: 64},
		Nodes: nodes, Truth: true, HeartbeatTimeout: timeout, HeartbeatEvery: 100 * time.Millisecond,
		Log:         slog.New(slog.NewTextHandler(lw, nil)),
		DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(lose)},
		OnCheckpoint: func(c Checkpoint) {
			ckpts++
			stepsOfCkpt = append(stepsOfCkpt, c.Step)
		},
		OnStep: func(ctx context.Context, c *Coordinator, step uint64, checkpoint bool) error {
			node1 := nodes["node-1"].(*Process)
			switch {
			case phase == 0 && ckpts >= 2:
				phase++
				loseNext.Store(true)
			case phase == 1 && ckpts >= 4:
				phase++
				require.Equal(t, int32(1), lost.Load(), "an answer was lost")
				require.Equal(t, 1, c.Retries(), "and asked again")
				require.Empty(t, c.Losses(), "a lost answer reopens nothing")
				stop(t, node1)
				time.AfterFunc(timeout/2, func() { _ = node1.Signal(syscall.SIGCONT) })
				slowStep = step + 1
				start := time.Now()
				ck, err := c.Step(ctx) // the slow step, run here to time it
				slowTook = time.Since(start)
				require.NoError(t, err)
				_ = ck
			case phase == 2 && ckpts >= 6:
				phase++
				require.Empty(t, c.Losses(), "a slow node is not lost")
				stop(t, node1) // for good: the recovery kills it
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
	require.Equal(t, 3, phase, "every fault was injected")
	require.GreaterOrEqual(t, slowTook, timeout/2-50*time.Millisecond, "the slow step waited for the slow node")
	for i := 1; i < len(stepsOfCkpt); i++ {
		require.Greater(t, stepsOfCkpt[i], stepsOfCkpt[i-1])
	}
	losses := c.Losses()
	require.Len(t, losses, 1, "the node that stopped answering")
	require.Equal(t, "node-1", losses[0].Node)
	res, err := c.Check(context.Background())
	require.NoError(t, err)
	for name, r := range res {
		require.Empty(t, r.Problems, "node %s", name)
		require.True(t, r.MVMatches, "node %s", name)
	}
	// The coordinator's metrics are its last checkpoint's figures and its
	// events.
	reg := prometheus.NewRegistry()
	reg.MustRegister(c.Collector())
	mfs, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetValue()
			}
			got[key] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	require.Equal(t, 100.0, got["lsmstats_cluster_progress_percent,stats,shown"])
	require.Equal(t, last.Figures["stats"].Total, got["lsmstats_cluster_progress_rows,stats,total"])
	require.Equal(t, 1.0, got["lsmstats_cluster_events_total,node_loss"])
	require.Equal(t, 1.0, got["lsmstats_cluster_events_total,barrier_retry"])
	require.Equal(t, float64(p.VnodeCount), got["lsmstats_cluster_node_vnodes,node-0"]+got["lsmstats_cluster_node_vnodes,node-1"])
	log := lw.String()
	for _, line := range []string{"a barrier call failed as unavailable (its answer lost, or the node gone); asking once more", "node missed its heartbeats", "node recovered"} {
		require.Contains(t, log, line)
	}
	t.Logf("%d checkpoints; lost answer retried %d; slow step %d took %s; loss: %+v", ckpts, c.Retries(), slowStep, slowTook.Round(time.Millisecond), losses[0])
}

// TestClusterMoveCrash kills a move's source with SIGKILL between the
// destination's import and the source's drop (lsm/move.go: each step is
// atomic, a crash between them leaves the range on both stores): the
// coordinator gives the range to the destination, and the source, started
// again on its directory, drops it before its job reopens. Every node then
// holds rows of its own vnodes only (Check), Verify is clean, and the job
// ends with the MV equal to the upstream on both nodes.
func TestClusterMoveCrash(t *testing.T) {
	p, err := workload.Preset("mixed", 12000, 32, 11)
	require.NoError(t, err)
	p.BatchRows = p.Rows / 3
	lw := newTestLog(t)
	nodes, _ := testCluster(t, 2, lw)
	ckpts, moved := 0, false
	var res MoveResult
	cfg := CoordinatorConfig{
		Job:   JobSpec{Workload: p, Actors: 1, CheckpointEvery: 2, BarrierRows: 64},
		Nodes: nodes, Truth: true, HeartbeatTimeout: time.Second,
		Log:          slog.New(slog.NewTextHandler(lw, nil)),
		OnCheckpoint: func(Checkpoint) { ckpts++ },
		OnStep: func(ctx context.Context, c *Coordinator, step uint64, checkpoint bool) error {
			if !checkpoint || moved || ckpts < 3 {
				return nil
			}
			moved = true
			c.afterImport = func(from, _ string) { require.NoError(t, c.Kill(from)) }
			var err error
			res, err = c.Move(ctx, "node-0", "node-1", Range{Lo: 4, Hi: 12}, MoveOptions{})
			c.afterImport = nil
			require.NoError(t, err)
			return nil
		},
	}
	c, err := NewCoordinator(context.Background(), cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	last, err := c.Run(context.Background())
	require.NoError(t, err)
	require.True(t, last.Finished)
	require.True(t, res.DropDeferred, "the source died before its drop")
	require.Len(t, c.Losses(), 1)
	require.Equal(t, []Range{{0, 4}, {12, 16}}, c.Vnodes()["node-0"])
	require.Equal(t, []Range{{4, 12}, {16, 32}}, c.Vnodes()["node-1"])
	checks, err := c.Check(context.Background())
	require.NoError(t, err)
	for name, r := range checks {
		require.Empty(t, r.Problems, "node %s", name)
		require.True(t, r.MVMatches, "node %s", name)
	}
	require.Contains(t, lw.String(), "a move's deferred drop done")
	t.Logf("move %+v; loss %+v", res.Stats, c.Losses()[0])
}

// stop stops a node's process (SIGSTOP) and waits until the kernel says it
// is stopped: the signal lands asynchronously, and a step can run in
// between on a busy machine.
func stop(t *testing.T, p *Process) {
	t.Helper()
	require.NoError(t, p.Signal(syscall.SIGSTOP))
	p.mu.Lock()
	pid := p.cmd.Process.Pid
	p.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		require.NoError(t, err)
		for _, l := range strings.Split(string(st), "\n") {
			if strings.HasPrefix(l, "State:") && strings.Contains(l, "T (stopped)") {
				return
			}
		}
		require.True(t, time.Now().Before(deadline), "node process %d not stopped 5s after SIGSTOP", pid)
		time.Sleep(time.Millisecond)
	}
}

// TestClusterDiskLoss kills a node with SIGKILL mid-job and deletes its
// directory: its WAL, MANIFEST and catalog are gone, its SSTs are in the
// bucket. The coordinator starts it again on the empty directory, where
// the node restores its last backup (lsm.Restore: every checkpoint it
// committed was backed up before it answered), catches up and, with
// ReassignLost, leaves at the next checkpoint: its vnodes go to the live
// node by reference. Nothing committed is lost: the job ends with the MV
// equal to the upstream, Verify clean, the figure monotone.
func TestClusterDiskLoss(t *testing.T) {
	p, err := workload.Preset("mixed", 12000, 32, 13)
	require.NoError(t, err)
	p.BatchRows = p.Rows / 3
	lw := newTestLog(t)
	nodes, _ := testCluster(t, 2, lw)
	ckpts, killed := 0, false
	var killedAt uint64
	var backupBytes, backupNS, backups int64
	shown := 0.0
	cfg := CoordinatorConfig{
		Job:   JobSpec{Workload: p, Actors: 1, CheckpointEvery: 2, BarrierRows: 64},
		Nodes: nodes, Truth: true, HeartbeatTimeout: time.Second, ReassignLost: true,
		Log: slog.New(slog.NewTextHandler(lw, nil)),
		OnCheckpoint: func(c Checkpoint) {
			ckpts++
			f := c.Figures["stats"]
			require.GreaterOrEqual(t, f.Shown, shown, "the figure went down at step %d", c.Step)
			shown = f.Shown
			for _, r := range c.Nodes {
				require.Positive(t, r.BackupBytes, "a checkpoint without its backup")
				backupBytes += r.BackupBytes
				backupNS += r.BackupNS
				backups++
			}
		},
		OnStep: func(ctx context.Context, c *Coordinator, step uint64, checkpoint bool) error {
			if !checkpoint || killed || ckpts < 3 {
				return nil
			}
			killed, killedAt = true, step
			require.NoError(t, c.Kill("node-1"))
			dir := nodeDir(nodes["node-1"].(*Process))
			require.NotEmpty(t, dir)
			require.NoError(t, os.RemoveAll(dir))
			return nil
		},
	}
	c, err := NewCoordinator(context.Background(), cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	last, err := c.Run(context.Background())
	require.NoError(t, err)
	require.True(t, last.Finished)
	require.True(t, killed)
	require.Len(t, c.Losses(), 1)
	require.Equal(t, "node-1", c.Losses()[0].Node)
	require.Equal(t, killedAt, c.Losses()[0].Resumed, "node-1 resumed from the checkpoint it was killed after")
	require.Empty(t, c.Vnodes()["node-1"], "node-1's vnodes were reassigned")
	checks, err := c.Check(context.Background())
	require.NoError(t, err)
	for name, r := range checks {
		require.Empty(t, r.Problems, "node %s", name)
		require.True(t, r.MVMatches, "node %s", name)
	}
	log := lw.String()
	require.Contains(t, log, "store restored from its backup")
	i := strings.Index(log, "store restored from its backup")
	line := log[i : i+strings.IndexByte(log[i:], '\n')]
	t.Logf("%d checkpoints, %d backups of %d bytes and %s on average; loss %+v; %s", ckpts, backups, backupBytes/max(1, backups),
		time.Duration(backupNS/max(1, backups)), c.Losses()[0], line)
}
