package backfill_test

import (
	"context"
	"math"
	"testing"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/bench/genjob"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// bothOracles checks the generator's model against a scan at every call.
type bothOracles struct {
	t    *testing.T
	fast backfilltest.Oracle
	scan backfilltest.Oracle
}

func (o bothOracles) Rows(epoch uint64, v uint16, cursor []byte) (int64, int64, error) {
	b1, t1, err := o.fast.Rows(epoch, v, cursor)
	require.NoError(o.t, err)
	b2, t2, err := o.scan.Rows(epoch, v, cursor)
	require.NoError(o.t, err)
	require.Equal(o.t, [2]int64{b2, t2}, [2]int64{b1, t1}, "model oracle vs scan, vnode %d cursor %x", v, cursor)
	return b1, t1, nil
}

// smallPreset returns a preset workload of 3,000 rows in 16 vnodes (seed
// 42, 1,000 rows a step, 10 steps during the backfill), its generator and
// an empty store, closed when the test ends: the small job of the tests
// that run every preset or order. tweak, if given, changes the parameters
// before the generator is made.
func smallPreset(t *testing.T, name string, tweak ...func(*workload.Params)) (workload.Params, *workload.Generator, *lsm.Store) {
	p, err := workload.Preset(name, 3000, 16, 42)
	require.NoError(t, err)
	p.BatchRows = 1000
	p.DuringSteps = 10
	for _, f := range tweak {
		f(&p)
	}
	g, err := workload.New(p)
	require.NoError(t, err)
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return p, g, s
}

func TestJobSmall(t *testing.T) {
	for _, name := range workload.PresetNames() {
		t.Run(name, func(t *testing.T) {
			p, g, s := smallPreset(t, name)
			j, err := backfill.OpenJob(backfill.JobConfig{
				Store: s, Upstream: p.TableDef(1), MV: 2, State: 3, Meta: 4, KeepRecords: true,
				Actors: 2, ChunkSize: 32, BarrierRows: 100, CheckpointEvery: 2,
				Source: genjob.Source{G: g},
				Score:  backfilltest.Oracles(bothOracles{t, genjob.Oracle{G: g}, backfilltest.ScanOracle{Store: s, Table: 1}}),
			})
			require.NoError(t, err)
			res, err := j.Run(context.Background())
			require.NoError(t, err)
			require.True(t, res.Finished)
			require.NoError(t, j.Compare())
			require.NotEmpty(t, res.Records)
			var maxErr float64
			for _, r := range res.Records {
				st := r.Figure("stats")
				maxErr = max(maxErr, math.Abs(st.Raw-r.Truth))
				if !r.Finished {
					// Never 100% before the job finished.
					require.Less(t, r.Figure("rowcount").Pct, 100.0, "rowcount at barrier %d", r.Barrier)
					require.Less(t, st.Pct, 100.0, "stats at barrier %d", r.Barrier)
				}
			}
			last := res.Records[len(res.Records)-1]
			require.Equal(t, len(res.Records), res.Checkpoints)
			require.Equal(t, last.Barrier, res.Last.Barrier)
			require.Equal(t, 100.0, last.Figure("rowcount").Pct)
			require.Equal(t, 100.0, last.Figure("stats").Pct)
			t.Logf("%s: %d checkpoints, stats max err %.3f pp", name, len(res.Records), maxErr)
			// Observed 0.5-1.0 pp on every preset.
			require.LessOrEqual(t, maxErr, 2.0, "stats max error (pp)")
			require.NoError(t, j.Close())
		})
	}
}

// TestRunKeepsLastRecord: without KeepRecords, Run returns the last
// checkpoint's record and their count, not every record (which hold every
// vnode's state and grow with the table).
func TestRunKeepsLastRecord(t *testing.T) {
	p, err := workload.Preset("uniform", 2000, 16, 7)
	require.NoError(t, err)
	p.BatchRows = 1000
	g, err := workload.New(p)
	require.NoError(t, err)
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	defer s.Close()
	seen := 0
	j, err := backfill.OpenJob(backfill.JobConfig{
		Store: s, Upstream: p.TableDef(1), MV: 2, State: 3, Meta: 4,
		Actors: 2, ChunkSize: 32, BarrierRows: 100, Source: genjob.Source{G: g},
		OnCheckpoint: func(backfill.Record) { seen++ },
	})
	require.NoError(t, err)
	res, err := j.Run(context.Background())
	require.NoError(t, err)
	require.True(t, res.Finished)
	require.Nil(t, res.Records)
	require.Equal(t, seen, res.Checkpoints)
	require.Greater(t, res.Checkpoints, 5)
	require.True(t, res.Last.Finished)
	require.Equal(t, 100.0, res.Last.Figure("stats").Pct)
	require.Len(t, res.Last.Vnodes, 16)
	require.NoError(t, j.Close())
}
