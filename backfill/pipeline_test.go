package backfill_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/bench/genjob"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/stretchr/testify/require"
)

// stepCounter is a job's source that counts the steps it gave.
type stepCounter struct {
	genjob.Source
	steps *uint64
}

func (s stepCounter) Next(ctx context.Context) ([]backfill.RowOp, error) {
	*s.steps++
	return s.Source.Next(ctx)
}

// TestPipelinedCommits: Run without JobConfig.Score commits each
// checkpoint beside the next step (the record comes once the source gave
// that step), and ends with the records a Step loop gives the same job,
// whose every checkpoint commits before the next step: the same epochs,
// steps, barriers, vnode states and live-statistics figures, the last one
// finished, and an MV equal to its upstream. With CheckpointEvery 2 the
// commit runs beside a barrier that is no checkpoint.
func TestPipelinedCommits(t *testing.T) {
	for _, name := range []string{"update-churn", "insert-during"} {
		for _, order := range []backfill.SnapshotOrder{backfill.VnodeOrder, backfill.Interleaved} {
			for _, every := range []int{1, 2} {
				t.Run(fmt.Sprintf("%s/%s/every=%d", name, order, every), func(t *testing.T) {
					run := func(stepped bool) (recs []backfill.Record, late int) {
						p, g, s := smallPreset(t, name, func(p *workload.Params) { p.BatchRows, p.DuringSteps = 500, 12 })
						var steps uint64
						j, err := backfill.OpenJob(backfill.JobConfig{
							Store: s, Upstream: p.TableDef(1), MV: 2, State: 3, Meta: 4, KeepRecords: true,
							Actors: 3, ChunkSize: 16, BarrierRows: 60 / every, SnapshotOrder: order, CheckpointEvery: every,
							Source: stepCounter{genjob.Source{G: g}, &steps},
							OnCheckpoint: func(r backfill.Record) {
								if steps > r.Step {
									late++ // the source gave the next step before this record
								}
							},
						})
						require.NoError(t, err)
						defer j.Close()
						return runToEnd(t, j, stepped), late
					}
					piped, late := run(false)
					stepped, steppedLate := run(true)
					require.Zero(t, steppedLate, "a Step's record comes at its own step")
					require.Greater(t, len(stepped), 10, "checkpoints")
					require.Greater(t, late, len(stepped)/2, "Run's records that came one step late (pipelined)")
					require.GreaterOrEqual(t, len(piped), len(stepped))
					for i, want := range stepped {
						got := piped[i]
						require.Equal(t, want.Epoch, got.Epoch, "record %d", i)
						require.Equal(t, want.Step, got.Step, "record %d (epoch %d): step", i, want.Epoch)
						require.Equal(t, want.Barrier, got.Barrier, "record %d (epoch %d): barrier", i, want.Epoch)
						require.Equal(t, want.Vnodes, got.Vnodes, "record %d (epoch %d): vnode states", i, want.Epoch)
						require.Equal(t, want.Finished, got.Finished, "record %d (epoch %d): finished", i, want.Epoch)
						require.Equal(t, approachFigure(t, want, "stats"), approachFigure(t, got, "stats"), "record %d (epoch %d): stats figure", i, want.Epoch)
					}
					require.True(t, piped[len(stepped)-1].Finished)
				})
			}
		}
	}
}

// approachFigure returns the figure of an approach in a record.
func approachFigure(t *testing.T, r backfill.Record, approach string) backfill.Figure {
	t.Helper()
	for _, f := range r.Figures {
		if f.Approach == approach {
			return f
		}
	}
	require.Failf(t, "no figure", "record of epoch %d has no %q figure", r.Epoch, approach)
	return backfill.Figure{}
}
