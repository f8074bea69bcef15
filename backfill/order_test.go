package backfill_test

import (
	"context"
	"encoding/json"
	"math"
	"testing"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/bench/genjob"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// orderViolation returns the first vnode that breaks VnodeOrder's shape
// within an actor's contiguous range (JobConfig.Actors): finished vnodes,
// then at most one in progress, then vnodes not started. -1: none.
func orderViolation(states []backfill.VnodeState, vnodes, actors int) int {
	for i := range actors {
		lo, hi := i*vnodes/actors, (i+1)*vnodes/actors
		seen := 0 // 0: finished so far, 1: one in progress, 2: not started
		for _, st := range states {
			if int(st.Vnode) < lo || int(st.Vnode) >= hi {
				continue
			}
			rank := 0
			switch {
			case st.Finished:
			case st.Started():
				rank = 1
			default:
				rank = 2
			}
			if rank < seen || (rank == 1 && seen == 1) {
				return int(st.Vnode)
			}
			seen = rank
		}
	}
	return -1
}

// TestVnodeOrder runs every preset with VnodeOrder: each actor has at most
// one vnode in progress at every checkpoint, the vnodes before it finished,
// the MV equals the upstream at the end, and the stats figure stays as
// close to the truth as in the interleaved order (TestJobSmall).
func TestVnodeOrder(t *testing.T) {
	const vnodes, actors = 16, 3
	run := func(t *testing.T, name string, order backfill.SnapshotOrder) []backfill.Record {
		p, g, s := smallPreset(t, name)
		j, err := backfill.OpenJob(backfill.JobConfig{
			Store: s, Upstream: p.TableDef(1), MV: 2, State: 3, Meta: 4, KeepRecords: true,
			Actors: actors, ChunkSize: 32, BarrierRows: 100, SnapshotOrder: order,
			Source: genjob.Source{G: g},
			Score:  backfilltest.Oracles(genjob.Oracle{G: g}),
		})
		require.NoError(t, err)
		defer j.Close()
		res, err := j.Run(context.Background())
		require.NoError(t, err)
		require.True(t, res.Finished)
		require.NoError(t, j.Compare())
		return res.Records
	}
	for _, name := range workload.PresetNames() {
		t.Run(name, func(t *testing.T) {
			recs := run(t, name, backfill.VnodeOrder)
			var maxErr float64
			for _, r := range recs {
				require.Equal(t, -1, orderViolation(r.Vnodes, vnodes, actors), "barrier %d: vnode out of order in %+v", r.Barrier, r.Vnodes)
				maxErr = max(maxErr, math.Abs(r.Figure("stats").Raw-r.Truth))
			}
			require.Equal(t, 100.0, recs[len(recs)-1].Figure("stats").Pct)
			t.Logf("%s: %d checkpoints, stats max err %.3f pp", name, len(recs), maxErr)
			require.LessOrEqual(t, maxErr, 2.0, "stats max error (pp)")
		})
	}
	// The check above can fail: the interleaved order has every vnode in
	// progress at once.
	t.Run("interleaved", func(t *testing.T) {
		broken := false
		for _, r := range run(t, "uniform", backfill.Interleaved) {
			broken = broken || orderViolation(r.Vnodes, vnodes, actors) >= 0
		}
		require.True(t, broken, "the interleaved order never had two vnodes of an actor in progress")
	})
}

// TestSnapshotOrderSwitch: a job restarted with the other order and
// another actor count goes on from its cursors; vnodes in progress under
// the interleaved order are finished one after another, and the MV equals
// the upstream at the end.
func TestSnapshotOrderSwitch(t *testing.T) {
	p, err := workload.Preset("mixed", 4000, 16, 7)
	require.NoError(t, err)
	p.BatchRows = 1000
	p.DuringSteps = 12
	dir := t.TempDir()
	open := func(order backfill.SnapshotOrder, actors int) (*lsm.Store, *backfill.Job) {
		s, err := lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger(nil)})
		require.NoError(t, err)
		g, err := workload.New(p)
		require.NoError(t, err)
		j, err := backfill.OpenJob(backfill.JobConfig{
			Store: s, Upstream: p.TableDef(1), MV: 2, State: 3, Meta: 4, KeepRecords: true,
			Actors: actors, ChunkSize: 32, BarrierRows: 60, SnapshotOrder: order,
			Source: genjob.Source{G: g}, Score: backfilltest.Oracles(genjob.Oracle{G: g}),
		})
		require.NoError(t, err)
		return s, j
	}
	inProgress := func(r backfill.Record) int {
		n := 0
		for _, st := range r.Vnodes {
			if st.Started() && !st.Finished {
				n++
			}
		}
		return n
	}
	s, j := open(backfill.Interleaved, 2)
	var last backfill.Record
	for last.Barrier < 4 {
		rec, ok, err := j.Step(context.Background())
		require.NoError(t, err)
		if ok {
			last = rec
		}
	}
	require.Greater(t, inProgress(last), 3, "the interleaved order advances every vnode")
	require.NoError(t, j.Close())
	require.NoError(t, s.Close())

	s, j = open(backfill.VnodeOrder, 3)
	defer s.Close()
	defer j.Close()
	require.NotNil(t, j.Initial())
	require.Equal(t, inProgress(last), inProgress(*j.Initial()), "the cursors survive the restart")
	res, err := j.Run(context.Background())
	require.NoError(t, err)
	require.True(t, res.Finished)
	require.NoError(t, j.Compare())
	// Every actor finishes the vnode it is on before it starts another:
	// the vnodes in progress never grow in number.
	prev := inProgress(*j.Initial())
	for _, r := range res.Records {
		n := inProgress(r)
		require.LessOrEqual(t, n, prev, "barrier %d", r.Barrier)
		prev = n
	}
}

func TestSnapshotOrderInvalid(t *testing.T) {
	_, err := backfill.ParseSnapshotOrder("random")
	require.ErrorContains(t, err, `unknown snapshot order "random"`)
	for _, o := range []backfill.SnapshotOrder{backfill.Interleaved, backfill.VnodeOrder} {
		got, err := backfill.ParseSnapshotOrder(o.String())
		require.NoError(t, err)
		require.Equal(t, o, got)
		// The text form (flags, JSON) is the String form.
		b, err := json.Marshal(struct{ O backfill.SnapshotOrder }{o})
		require.NoError(t, err)
		require.JSONEq(t, `{"O":"`+o.String()+`"}`, string(b))
		var back struct{ O backfill.SnapshotOrder }
		require.NoError(t, json.Unmarshal(b, &back))
		require.Equal(t, o, back.O)
	}
	_, err = json.Marshal(backfill.SnapshotOrder(9))
	require.ErrorContains(t, err, "invalid snapshot order 9")
	var o backfill.SnapshotOrder
	require.ErrorContains(t, json.Unmarshal([]byte(`"random"`), &o), `unknown snapshot order "random"`)
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	defer s.Close()
	p, err := workload.Preset("uniform", 100, 4, 1)
	require.NoError(t, err)
	g, err := workload.New(p)
	require.NoError(t, err)
	_, err = backfill.OpenJob(backfill.JobConfig{Store: s, Upstream: p.TableDef(1), MV: 2, State: 3, Meta: 4,
		SnapshotOrder: 9, Source: genjob.Source{G: g}})
	require.ErrorContains(t, err, "invalid snapshot order 9")
}
