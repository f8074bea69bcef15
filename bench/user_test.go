package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// stream is a user's upstream for TestRunUserJob: step k inserts 40 rows
// (name k%5, id k*1000+i), then updates step k-1's even rows and deletes
// its rows i%7 == 1, in the checked forms. A step depends on k alone.
type stream struct {
	def  lsm.TableDef
	step uint64
}

func (s *stream) pk(k uint64, i int) []byte {
	return keys.AppendUint64(keys.AppendBytes(nil, fmt.Appendf(nil, "name%d", k%5)), k*1000+uint64(i))
}

func (s *stream) op(kind backfill.OpKind, pk []byte, row string) backfill.RowOp {
	return backfill.RowOp{Kind: kind, Vnode: s.def.VnodeOf(pk), PK: pk, Row: []byte(row)}
}

func (s *stream) Resume(at backfill.Position) error { s.step = at.Step; return nil }
func (s *stream) Step() uint64                      { return s.step }
func (s *stream) BackfillStep() uint64              { return 20 }
func (s *stream) Finished(uint64)                   {}
func (s *stream) Next(context.Context) ([]backfill.RowOp, error) {
	s.step++
	k := s.step
	var ops []backfill.RowOp
	for i := range 40 {
		ops = append(ops, s.op(backfill.Insert, s.pk(k, i), "v"))
	}
	for i := 0; k > 1 && i < 40; i++ {
		switch {
		case i%2 == 0:
			ops = append(ops, s.op(backfill.CheckedUpdate, s.pk(k-1, i), fmt.Sprintf("u%d", k)))
		case i%7 == 1:
			ops = append(ops, s.op(backfill.CheckedDelete, s.pk(k-1, i), ""))
		}
	}
	return ops, nil
}

// TestRunUserJob runs bench's driver over a user's table (pk (bytes, u64))
// with the user's source and a scan oracle, restarting it after 4
// checkpoints: the load steps run before the backfill, every checkpoint
// has its truth, the display rules hold across the restart, and the MV
// equals the upstream at the end. The raw-Pebble pipeline refuses it.
func TestRunUserJob(t *testing.T) {
	def := lsm.TableDef{ID: 2, Name: "orders", VnodeCount: 16, PK: keys.Schema{keys.Bytes, keys.Uint64}, DistKeyColumns: 1}
	cfg := Config{Dir: t.TempDir(), Actors: 2, ChunkSize: 32, BarrierRows: 40, CheckpointEvery: 2, RestartAt: 4,
		Store: &lsm.Options{Logger: lsm.QuietLogger(nil)},
		User: &UserJob{Table: def, New: func(s *lsm.Store) (backfill.Source, backfilltest.Oracle) {
			return &stream{def: def}, backfilltest.ScanOracle{Store: s, Table: def.ID}
		}}}
	sum, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	require.True(t, sum.MVMatches, sum.MVError)
	require.Greater(t, len(sum.Records), 6)
	require.NoError(t, backfilltest.CheckDisplay(sum.Records))
	// The 19 load steps: 40 inserts each, and from the second on 20
	// updates and 3 deletes (i = 1, 15, 29) of the step before.
	require.Equal(t, uint64(19*40+18*(20+3)), sum.LoadOps)
	for i, r := range sum.Records {
		require.GreaterOrEqual(t, r.Truth, 0.0)
		// The run times the stats figure of every record, the reopened
		// job's first too (the job does not time its estimators itself).
		require.Positive(t, r.Figure("stats").Time, "record %d", i)
	}
	require.Positive(t, sum.Errors["stats"].N)
	require.Positive(t, sum.ProgressWallNanos["stats"])
	require.Positive(t, sum.Restart, "the reopened job's first record")
	require.Less(t, sum.Restart, len(sum.Records))
	_, err = RunRaw(context.Background(), cfg)
	require.ErrorContains(t, err, "raw-Pebble")
}
