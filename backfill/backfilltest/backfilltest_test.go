package backfilltest_test

import (
	"context"
	"testing"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestScanOracleEpoch writes a vnode's rows over two committed epochs and
// asks the oracle about each: it answers for the epoch it is told, not the
// latest; an epoch above the committed one is an error.
func TestScanOracleEpoch(t *testing.T) {
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	defer s.Close()
	def := lsm.TableDef{ID: 1, VnodeCount: 1, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	w, err := s.NewWriter(1, nil, nil)
	require.NoError(t, err)
	pk := func(i uint64) []byte { return keys.AppendUint64(nil, i) }
	for i := range uint64(10) {
		require.NoError(t, w.Insert(1, 0, pk(i), []byte("a")))
	}
	require.NoError(t, w.Seal(1))
	require.NoError(t, s.Commit(1))
	for i := range uint64(4) {
		require.NoError(t, w.Delete(2, 0, pk(i), []byte("a")))
	}
	require.NoError(t, w.Insert(2, 0, pk(20), []byte("b")))
	require.NoError(t, w.Seal(2))
	require.NoError(t, s.Commit(2))
	require.NoError(t, w.Close())

	o := backfilltest.ScanOracle{Store: s, Table: 1}
	for _, c := range []struct {
		epoch         uint64
		cursor        []byte
		behind, total int64
	}{
		{1, pk(4), 5, 10},
		{2, pk(4), 1, 7},
		{1, nil, 0, 10},
		{2, pk(30), 7, 7},
	} {
		behind, total, err := o.Rows(c.epoch, 0, c.cursor)
		require.NoError(t, err)
		require.Equal(t, [2]int64{c.behind, c.total}, [2]int64{behind, total}, "epoch %d cursor %x", c.epoch, c.cursor)
	}
	_, _, err = o.Rows(3, 0, nil)
	require.ErrorIs(t, err, lsm.ErrEpochUnavailable)
}

func rec(barrier uint64, finished bool, pcts ...float64) backfill.Record {
	r := backfill.Record{Barrier: barrier, Finished: finished}
	for i, p := range pcts {
		r.Figures = append(r.Figures, backfill.Figure{Approach: []string{"stats", "rowcount"}[i], Pct: p})
	}
	return r
}

// TestDisplay checks the display rule checker on sequences that keep the
// rules and on each way to break them.
func TestDisplay(t *testing.T) {
	ok := []backfill.Record{rec(1, false, 10, 5), rec(2, false, 10, 7), rec(2, false, 99.99, 50), rec(3, true, 100, 100)}
	require.NoError(t, backfilltest.CheckDisplay(ok))
	for name, seq := range map[string][]backfill.Record{
		"decreasing":         {rec(1, false, 10, 5), rec(2, false, 9.99, 6), rec(3, true, 100, 100)},
		"100 before the end": {rec(1, false, 100, 5), rec(3, true, 100, 100)},
		"finished below 100": {rec(1, false, 10, 5), rec(3, true, 100, 99)},
		"not finished":       {rec(1, false, 10, 5)},
		"unfinished again":   {rec(1, true, 100, 100), rec(2, false, 100, 100)},
		"empty":              nil,
		"no figure":          {{Barrier: 1}},
		"above 100":          {rec(1, true, 100.5, 100)},
	} {
		require.ErrorIs(t, backfilltest.CheckDisplay(seq), backfilltest.ErrDisplay, name)
	}
}

// TestModelFreshStore resumes a model on a store that never committed
// (epoch 0) and at a committed epoch: it answers from the table's rows.
func TestModelFreshStore(t *testing.T) {
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	defer s.Close()
	def := lsm.TableDef{ID: 1, VnodeCount: 1, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	m := backfilltest.NewModel(1)
	require.NoError(t, m.Resume(backfill.Position{Epoch: s.CommittedEpoch(), Store: s, Upstream: def}))
	behind, total, err := m.Rows(0, 0, keys.AppendUint64(nil, 5))
	require.NoError(t, err)
	require.Equal(t, [2]int64{0, 0}, [2]int64{behind, total})

	w, err := s.NewWriter(1, nil, nil)
	require.NoError(t, err)
	for i := range uint64(8) {
		require.NoError(t, w.Insert(1, 0, keys.AppendUint64(nil, i), []byte("r")))
	}
	require.NoError(t, w.Seal(1))
	require.NoError(t, s.Commit(1))
	require.NoError(t, w.Close())
	require.NoError(t, m.Resume(backfill.Position{Step: 1, Epoch: 1, Store: s, Upstream: def}))
	behind, total, err = m.Rows(1, 0, keys.AppendUint64(nil, 5))
	require.NoError(t, err)
	require.Equal(t, [2]int64{6, 8}, [2]int64{behind, total})
	require.NoError(t, m.Apply([]backfill.RowOp{{Kind: backfill.CheckedDelete, Vnode: 0, PK: keys.AppendUint64(nil, 2)}}))
	behind, total, err = m.Rows(1, 0, keys.AppendUint64(nil, 5))
	require.NoError(t, err)
	require.Equal(t, [2]int64{5, 7}, [2]int64{behind, total})
}

// TestModelOfUpstream checks a model of the second upstream of a job over
// two tables: it resumes from its own table and applies its table's ops
// alone.
func TestModelOfUpstream(t *testing.T) {
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	defer s.Close()
	a := lsm.TableDef{ID: 1, VnodeCount: 1, PK: keys.Schema{keys.Uint64}}
	b := lsm.TableDef{ID: 2, VnodeCount: 1, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(a))
	require.NoError(t, s.CreateTable(b))
	w, err := s.NewWriter(2, nil, nil)
	require.NoError(t, err)
	for i := range uint64(6) {
		require.NoError(t, w.Insert(1, 0, keys.AppendUint64(nil, i), []byte("r")))
	}
	require.NoError(t, w.Seal(1))
	require.NoError(t, s.Commit(1))
	require.NoError(t, w.Close())
	m := backfilltest.NewModelOf(1, 1)
	require.NoError(t, m.Resume(backfill.Position{Step: 1, Epoch: 1, Store: s, Upstream: a, Upstreams: []lsm.TableDef{a, b}}))
	behind, total, err := m.Rows(1, 0, keys.AppendUint64(nil, 2))
	require.NoError(t, err)
	require.Equal(t, [2]int64{3, 6}, [2]int64{behind, total})
	require.NoError(t, m.Apply([]backfill.RowOp{
		{Kind: backfill.Insert, Upstream: 0, Vnode: 0, PK: keys.AppendUint64(nil, 0)}, // the other table's
		{Kind: backfill.Delete, Upstream: 1, Vnode: 0, PK: keys.AppendUint64(nil, 0)},
	}))
	behind, total, err = m.Rows(1, 0, keys.AppendUint64(nil, 2))
	require.NoError(t, err)
	require.Equal(t, [2]int64{2, 5}, [2]int64{behind, total})
	require.Error(t, backfilltest.NewModelOf(2, 1).Resume(backfill.Position{Epoch: 1, Store: s, Upstream: a, Upstreams: []lsm.TableDef{a, b}}))
}

// fixedOracle answers every vnode alike.
type fixedOracle struct{ behind, total int64 }

func (o fixedOracle) Rows(uint64, uint16, []byte) (int64, int64, error) {
	return o.behind, o.total, nil
}

// TestTruthScore scores a record of two upstream tables: the truth sums
// the tables' rows (a finished vnode has all its rows behind, one not
// started none), each table's is beside it, and the per-vnode error is the
// stats estimate's against the oracle. An oracle per table is required.
func TestTruthScore(t *testing.T) {
	rec := backfill.Record{
		Vnodes: []backfill.VnodeState{
			{Upstream: 0, Vnode: 0, Cursor: []byte{1}},
			{Upstream: 0, Vnode: 1, Finished: true},
			{Upstream: 1, Vnode: 0},
		},
		Estimates: []backfill.VnodeEstimate{{Consumed: 30}, {Consumed: 100}, {}},
		Upstreams: []backfill.UpstreamProgress{{Truth: -1}, {Truth: -1}},
	}
	truth := backfilltest.Truth{Oracles: []backfilltest.Oracle{fixedOracle{40, 100}, fixedOracle{0, 200}}}
	require.NoError(t, truth.Score(context.Background(), &rec))
	require.InDelta(t, 100*140.0/400, rec.Truth, 1e-9)
	require.InDelta(t, 70.0, rec.Upstreams[0].Truth, 1e-9)
	require.InDelta(t, 0.0, rec.Upstreams[1].Truth, 1e-9)
	require.InDelta(t, 10.0, rec.VnodeErrMean, 1e-9)
	require.InDelta(t, 10.0, rec.VnodeErrMax, 1e-9)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, truth.Score(ctx, &rec), context.Canceled)
	truth.Oracles = truth.Oracles[:1]
	require.ErrorContains(t, truth.Score(context.Background(), &rec), "1 oracles for a job of 2 upstream tables")
}
