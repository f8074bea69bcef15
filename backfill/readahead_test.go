package backfill_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/bench/genjob"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// TestReadAhead: a job run by Run, whose actors read each barrier's
// snapshot rows ahead while the job commits the barrier before
// (Barrier.ReadAhead), takes the same rows at every checkpoint as the same
// job stepped by Step, whose actors read at the barrier. The workloads
// change the upstream during the backfill, so the rows read ahead come
// from the replicated table's uncommitted overlay as well as from the
// store.
func TestReadAhead(t *testing.T) {
	for _, name := range []string{"update-churn", "delete-churn", "insert-during"} {
		for _, order := range []backfill.SnapshotOrder{backfill.VnodeOrder, backfill.Interleaved} {
			t.Run(fmt.Sprintf("%s/%s", name, order), func(t *testing.T) {
				requireReadAheadSame(t, func(t *testing.T) *backfill.Job {
					// Smaller steps, spread over more of the backfill.
					p, g, s := smallPreset(t, name, func(p *workload.Params) { p.BatchRows, p.DuringSteps = 500, 12 })
					j, err := backfill.OpenJob(backfill.JobConfig{
						Store: s, Upstream: p.TableDef(1), MV: 2, State: 3, Meta: 4, KeepRecords: true,
						Actors: 3, ChunkSize: 16, BarrierRows: 60, SnapshotOrder: order,
						Source: genjob.Source{G: g},
						Score:  backfilltest.Oracles(genjob.Oracle{G: g}),
					})
					require.NoError(t, err)
					return j
				})
			})
		}
	}
}

// TestReadAheadJobKinds is TestReadAhead over the other job kinds: three
// upstream tables of other pk shapes and vnode counts (one actor's plan
// spans the tables), and a snapshot backfill of them (its actors read a
// pinned epoch, then forward the log store's changes).
func TestReadAheadJobKinds(t *testing.T) {
	for _, mode := range []backfill.JobMode{backfill.ModeArrangement, backfill.ModeSnapshot} {
		t.Run(mode.String(), func(t *testing.T) {
			requireReadAheadSame(t, func(t *testing.T) *backfill.Job {
				s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
				require.NoError(t, err)
				t.Cleanup(func() { _ = s.Close() })
				j, _, err := multiJobMode(s, snapshotParams(42, 0.1), backfill.JobConfig{Mode: mode, Actors: 2, BarrierRows: 80, KeepRecords: true})
				require.NoError(t, err)
				return j
			})
		})
	}
}

// runToEnd runs j to its end, by a Step loop up to the finished record or
// by Run (KeepRecords set), and returns its records once its MV equals
// its upstream.
func runToEnd(t *testing.T, j *backfill.Job, stepped bool) []backfill.Record {
	t.Helper()
	var recs []backfill.Record
	if stepped {
		for {
			rec, ok, err := j.Step(context.Background())
			require.NoError(t, err)
			if ok {
				recs = append(recs, rec)
				if rec.Finished {
					break
				}
			}
		}
	} else {
		res, err := j.Run(context.Background())
		require.NoError(t, err)
		require.True(t, res.Finished)
		require.Equal(t, len(res.Records), res.Checkpoints)
		recs = res.Records
	}
	require.NoError(t, j.Compare())
	return recs
}

// requireReadAheadSame runs the job open makes (on a store of its own,
// KeepRecords set) twice: by Run, whose actors read ahead, and by a Step
// loop, whose actors read at each barrier. Both must have the same phase,
// vnode states (cursors, row counts, finished) and truth at every
// checkpoint, and an MV equal to its upstream at the end.
func requireReadAheadSame(t *testing.T, open func(t *testing.T) *backfill.Job) {
	t.Helper()
	run := func(stepped bool) []backfill.Record {
		j := open(t)
		defer j.Close()
		return runToEnd(t, j, stepped)
	}
	ahead, stepped := run(false), run(true)
	require.Greater(t, len(stepped), 10, "checkpoints")
	require.GreaterOrEqual(t, len(ahead), len(stepped))
	for i, want := range stepped {
		got := ahead[i]
		require.Equal(t, want.Epoch, got.Epoch, "record %d", i)
		require.Equal(t, want.Phase, got.Phase, "record %d (epoch %d): phase", i, want.Epoch)
		require.Equal(t, want.Vnodes, got.Vnodes, "record %d (epoch %d): vnode states", i, want.Epoch)
		require.Equal(t, want.Truth, got.Truth, "record %d (epoch %d): truth", i, want.Epoch)
	}
}
