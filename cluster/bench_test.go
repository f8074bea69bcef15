package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/stretchr/testify/require"
)

var benchRows = 200000 // 10,000 under -short

// BenchmarkCluster runs the same job (mixed workload, 256 vnodes) on 1, 2
// and 3 node processes sharing a bucket of the real S3 server, in one
// run, and reports per cluster size: the job's rows/s (snapshot rows over
// its wall time, load included) and its ratio to one node's, the
// coordinator's progress CPU per checkpoint (summing the nodes' reports:
// its figure's whole cost, the nodes computing theirs in parallel; wall
// time of a computation that does no I/O), the nodes' stats estimator time
// per checkpoint, and, on 2 and 3 nodes, one move of a quarter of a node's
// vnodes at the middle checkpoint, its range compacted into the bucket
// first: its time (the compaction's included), the bytes it took by
// reference and the bytes it copied. The job's time is from the nodes'
// processes being up to its end. On 2 cores, 3 nodes share the 2 cores:
// the ratios measure what the coordination costs, not scaling. Each node
// backs its store up at every checkpoint (its mean time and bytes per
// backup reported); one node without backups, in the same run, says what
// they cost (rows/s-vs-no-backup).
func BenchmarkCluster(b *testing.B) {
	rows := benchRows
	if testing.Short() {
		rows = 10000
	}
	p, err := workload.Preset("mixed", rows, 256, 1)
	require.NoError(b, err)
	p.BatchRows = 10000
	var oneNode, unbacked float64
	for _, c := range []struct {
		n      int
		backup bool
	}{{1, false}, {1, true}, {2, true}, {3, true}} {
		n := c.n
		name := fmt.Sprintf("nodes=%d", n)
		if !c.backup {
			name += "/no-backup"
		}
		b.Run(name, func(b *testing.B) {
			var rowsPerS, coordNS, nodeNS, moveMS, shared, copied, backupMS, backupBytes float64
			for range b.N {
				nodes, _ := newTestCluster(b, n, io.Discard, c.backup)
				var ckpts int
				var coord, node, backup time.Duration
				var backups, backedUp int64
				moved := false
				cfg := CoordinatorConfig{
					Job:   JobSpec{Workload: p, Actors: 2, CheckpointEvery: 2, BarrierRows: 1024},
					Nodes: nodes, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
					OnCheckpoint: func(c Checkpoint) {
						ckpts++
						coord += time.Duration(c.ProgressNS)
						for _, r := range c.Nodes {
							node += time.Duration(r.ProgressNS) / time.Duration(len(c.Nodes))
							backup += time.Duration(r.BackupNS)
							backedUp += r.BackupBytes
							backups++
						}
					},
					OnStep: func(ctx context.Context, c *Coordinator, step uint64, checkpoint bool) error {
						if !checkpoint || moved || n == 1 || c.lastCkp == nil || c.lastCkp.Figures["stats"].Raw < 50 {
							return nil
						}
						moved = true
						r := c.Vnodes()["node-0"][0]
						r.Hi = r.Lo + (r.Hi-r.Lo)/4
						res, err := c.Move(ctx, "node-0", "node-1", r, MoveOptions{Compact: true})
						if err != nil {
							return err
						}
						moveMS += float64(res.Duration.Milliseconds())
						shared += float64(res.Stats.SharedBytes)
						copied += float64(res.Stats.CopiedBytes)
						return nil
					},
				}
				c, err := NewCoordinator(context.Background(), cfg)
				require.NoError(b, err)
				start := time.Now() // the nodes' processes are up
				last, err := c.Run(context.Background())
				require.NoError(b, err)
				wall := time.Since(start)
				require.NoError(b, c.Close())
				require.True(b, last.Finished)
				rowsPerS += float64(p.Rows) / wall.Seconds()
				coordNS += float64(coord.Nanoseconds()) / float64(ckpts)
				nodeNS += float64(node.Nanoseconds()) / float64(ckpts)
				if backups > 0 {
					backupMS += float64(backup.Milliseconds()) / float64(backups)
					backupBytes += float64(backedUp) / float64(backups)
				}
			}
			N := float64(b.N)
			b.ReportMetric(rowsPerS/N, "rows/s")
			switch {
			case !c.backup:
				unbacked = rowsPerS / N
			case n == 1:
				oneNode = rowsPerS / N
				if unbacked > 0 {
					b.ReportMetric(rowsPerS/N/unbacked, "rows/s-vs-no-backup")
				}
			case oneNode > 0:
				b.ReportMetric(rowsPerS/N/oneNode, "rows/s-vs-1-node")
			}
			b.ReportMetric(coordNS/N, "coord-progress-ns/ckpt")
			b.ReportMetric(nodeNS/N, "node-progress-ns/ckpt")
			if c.backup {
				b.ReportMetric(backupMS/N, "backup-ms")
				b.ReportMetric(backupBytes/N, "backup-bytes")
			}
			if n > 1 {
				b.ReportMetric(moveMS/N, "move-ms")
				b.ReportMetric(shared/N, "move-shared-bytes")
				b.ReportMetric(copied/N, "move-copied-bytes")
			}
		})
	}
}

// BenchmarkCoordinatorCheckpoint is the coordinator's whole progress work
// at a checkpoint (summing the nodes' reports into the job's figures,
// bounds and truth, the display rule, the ETA's observation and the
// metrics' copy) for 3 to 96 nodes. The nodes report sums, not vnodes: the
// cost grows with the nodes and not with the vnodes, which the vnodes
// metric shows (the reports of 256 or 4,096 vnodes are the same size).
func BenchmarkCoordinatorCheckpoint(b *testing.B) {
	for _, vnodes := range []int{256, 4096} {
		for _, nodes := range []int{3, 12, 96} {
			b.Run(fmt.Sprintf("vnodes=%d/nodes=%d", vnodes, nodes), func(b *testing.B) {
				c := &Coordinator{cfg: CoordinatorConfig{Truth: true}, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
					hwm: map[string]float64{}, eta: backfill.NewETA(nil)}
				reports := map[string]*Report{}
				for i := range nodes {
					name := fmt.Sprintf("node-%d", i)
					c.members = append(c.members, &member{name: name, vnodes: []Range{{i * vnodes / nodes, (i + 1) * vnodes / nodes}}})
					reports[name] = &Report{Checkpoint: true, Started: true, Vnodes: vnodes / nodes, Actors: 2,
						Figures:    []backfill.Figure{{Approach: "rowcount", Consumed: 100, Total: 1000}, {Approach: "stats", Consumed: 100, Total: 800}},
						StatsLower: 99, StatsUpper: 101, TruthBehind: 100, TruthTotal: 800}
				}
				start := time.Now()
				b.ResetTimer()
				for i := range b.N {
					for _, r := range reports {
						r.Figures[1].Consumed = float64(100 + i%700)
						r.SnapshotRows = uint64(100 * i)
					}
					c.checkpoint(uint64(i+1), reports)
				}
				b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N), "ns/checkpoint")
				b.ReportMetric(float64(vnodes), "vnodes")
			})
		}
	}
}
