package backfill_test

import (
	"context"
	"testing"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// TestNamedTables runs two jobs in one store, each over a user table found
// by its name, with their tables named after the job and their ids
// allocated by the catalog: the ids differ from each other and from the
// user's, a reopened job finds the same tables by name, and each MV equals
// its upstream. Misuse is refused with an error that says what was wrong.
func TestNamedTables(t *testing.T) {
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	defer s.Close()
	orders, payments := userTable(7), userTable(9)
	payments.Name = "payments"
	require.NoError(t, s.CreateTable(orders))
	require.NoError(t, s.CreateTable(payments))

	open := func(name, upstream string, def lsm.TableDef) *backfill.Job {
		j, err := backfill.OpenJob(backfill.JobConfig{Store: s, Name: name, Upstream: lsm.TableDef{Name: upstream},
			Actors: 2, BarrierRows: 40, Source: &userSource{def: def, rows: 20, load: 2, last: 20}})
		require.NoError(t, err)
		return j
	}
	seen := map[uint32]string{7: "orders", 9: "payments"}
	jobs := map[string][4]uint32{}
	for _, c := range []struct {
		name, upstream string
		def            lsm.TableDef
	}{{"orders_mv", "orders", orders}, {"payments_mv", "payments", payments}} {
		j := open(c.name, c.upstream, c.def)
		up, mv, state, meta := j.Tables()
		require.Equal(t, c.def.ID, up)
		for _, id := range []uint32{mv, state, meta} {
			require.NotContains(t, seen, id, "id %d of job %s is taken", id, c.name)
			seen[id] = c.name
		}
		jobs[c.name] = [4]uint32{up, mv, state, meta}
		for range 5 {
			_, _, err := j.Step(context.Background())
			require.NoError(t, err)
		}
		require.NoError(t, j.Close())
	}
	for name, ids := range jobs {
		upstream := map[string]string{"orders_mv": "orders", "payments_mv": "payments"}[name]
		def, _ := s.Table(ids[0])
		j := open(name, upstream, def)
		up, mv, state, meta := j.Tables()
		require.Equal(t, ids, [4]uint32{up, mv, state, meta}, "job %s reopened", name)
		require.True(t, j.Started())
		res, err := j.Run(context.Background())
		require.NoError(t, err)
		require.True(t, res.Finished)
		require.NoError(t, j.Compare())
		require.NoError(t, j.Close())
		mvDef, err := s.Table(mv)
		require.NoError(t, err)
		require.Equal(t, name, mvDef.Name)
	}

	_, err = backfill.OpenJob(backfill.JobConfig{Store: s, Name: "x", MV: 3, Upstream: orders, Source: &userSource{def: orders}})
	require.ErrorContains(t, err, "must be 0")
	_, err = backfill.OpenJob(backfill.JobConfig{Store: s, Name: "x", Upstream: lsm.TableDef{Name: "nope"}, Source: &userSource{def: orders}})
	require.ErrorIs(t, err, lsm.ErrUnknownTable)
	require.NoError(t, s.CreateTable(lsm.TableDef{ID: 100, Name: "taken", VnodeCount: 1, PK: keys.Schema{keys.Uint64}}))
	_, err = backfill.OpenJob(backfill.JobConfig{Store: s, Name: "taken", Upstream: orders, Source: &userSource{def: orders}})
	require.ErrorContains(t, err, `table "taken"`)
}
