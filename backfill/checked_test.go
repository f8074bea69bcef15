package backfill_test

import (
	"context"
	"testing"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// TestCheckedOps runs a backfill over a user table whose source writes its
// updates and deletes in the checked form (no old row), with a checked and
// a blind upstream writer: the MV must equal the upstream table, the job
// must have told the source it finished, and a checked op on a pk without
// a live row must fail the step with lsm.ErrInconsistentOp.
func TestCheckedOps(t *testing.T) {
	for _, unchecked := range []bool{false, true} {
		s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
		require.NoError(t, err)
		def := userTable(1)
		src := &userSource{def: def, rows: 60, load: 4, last: 40}
		j, err := backfill.OpenJob(backfill.JobConfig{Store: s, Upstream: def, MV: 2, State: 3, Meta: 4, KeepRecords: true,
			Actors: 2, BarrierRows: 50, Source: src, Score: backfilltest.Oracles(backfilltest.ScanOracle{Store: s, Table: 1}), Unchecked: unchecked})
		require.NoError(t, err)
		res, err := j.Run(context.Background())
		require.NoError(t, err)
		require.True(t, res.Finished)
		require.NoError(t, j.Compare())
		require.NotZero(t, src.done, "the source was not told the job finished")
		last := res.Records[len(res.Records)-1]
		require.Equal(t, 100.0, last.Truth)
		// Rows were updated and deleted: the table holds fewer rows than
		// were inserted.
		require.Less(t, s.Stats().Live.Table(1).Rows, int64(src.rows)*int64(src.step))
		require.NoError(t, j.Close())

		// A checked delete of a pk never inserted.
		bad := &badSource{userSource{def: def, rows: 1, load: 1, last: 3}}
		j, err = backfill.OpenJob(backfill.JobConfig{Store: s, Upstream: userTable(11), MV: 12, State: 13, Meta: 14, Source: bad})
		require.NoError(t, err)
		_, err = j.Run(context.Background())
		require.ErrorIs(t, err, lsm.ErrInconsistentOp)
		require.Contains(t, err.Error(), "no live row")
		require.NoError(t, j.Close())
		require.NoError(t, s.Close())
	}
}

type badSource struct{ userSource }

func (s *badSource) Next(ctx context.Context) ([]backfill.RowOp, error) {
	ops, err := s.userSource.Next(ctx)
	if s.step == 2 {
		ops = append(ops, s.op(backfill.CheckedDelete, s.pk(99, 0), nil))
	}
	return ops, err
}
