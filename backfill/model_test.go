package backfill_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// TestModelOracle runs a backfill over a user table, preloaded by the
// test's writer, whose source writes checked updates and deletes, with
// backfilltest's incremental model as the oracle beside the scan oracle:
// they must agree at every checkpoint, before and after a restart in the
// middle (which rebuilds the model from the table, without a replay).
func TestModelOracle(t *testing.T) {
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	defer s.Close()
	def := userTable(1)
	require.NoError(t, s.CreateTable(def))
	w, err := s.NewWriter(1, nil, nil)
	require.NoError(t, err)
	for i := range uint64(500) {
		pk := namePK(fmt.Sprintf("pre%d", i%3), i)
		require.NoError(t, w.Insert(1, def.VnodeOf(pk), pk, []byte("pre")))
	}
	require.NoError(t, w.Seal(1))
	require.NoError(t, s.Commit(1))
	require.NoError(t, w.Close())

	checkpoints := 0
	open := func() *backfill.Job {
		m := backfilltest.NewModel(def.VnodeCount)
		src := backfilltest.Observe(&userSource{def: def, rows: 30, load: 2, last: 60}, m)
		j, err := backfill.OpenJob(backfill.JobConfig{Store: s, Upstream: def, MV: 2, State: 3, Meta: 4,
			Actors: 2, BarrierRows: 25, CheckpointEvery: 2, Source: src,
			Score:        backfilltest.Oracles(bothOracles{t, m, backfilltest.ScanOracle{Store: s, Table: 1}}),
			OnCheckpoint: func(backfill.Record) { checkpoints++ }})
		require.NoError(t, err)
		return j
	}
	j := open()
	for range 12 {
		_, _, err := j.Step(context.Background())
		require.NoError(t, err)
	}
	require.NoError(t, j.Close())
	j = open()
	require.NotNil(t, j.Initial())
	res, err := j.Run(context.Background())
	require.NoError(t, err)
	require.True(t, res.Finished)
	require.NoError(t, j.Compare())
	require.NoError(t, j.Close())
	require.Greater(t, checkpoints, 4)

	// The model refuses ops that contradict it.
	m := backfilltest.NewModel(def.VnodeCount)
	pk := namePK("x", 1)
	op := backfill.RowOp{Kind: backfill.CheckedDelete, Vnode: def.VnodeOf(pk), PK: pk}
	require.ErrorContains(t, m.Apply([]backfill.RowOp{op}), "not live")
	op.Kind = backfill.Insert
	require.NoError(t, m.Apply([]backfill.RowOp{op}))
	require.ErrorContains(t, m.Apply([]backfill.RowOp{op}), "insert of live pk")
}
