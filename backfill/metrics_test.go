package backfill_test

import (
	"context"
	"testing"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// TestProgressAndCollector checks Job.Progress and the job's Prometheus
// collector at every checkpoint of a run over a user table: Progress is the
// checkpoint's record, and a scrape shows its figures, with the job's label,
// and each vnode's account, whose sum is the stats figure's consumed rows.
// Before the backfill's first checkpoint neither has anything to show.
func TestProgressAndCollector(t *testing.T) {
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	defer s.Close()
	def := userTable(1)
	src := &userSource{def: def, rows: 40, load: 3, last: 30}
	var j *backfill.Job
	reg := prometheus.NewRegistry()
	scrape := func() map[string][]*dto.Metric {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		out := map[string][]*dto.Metric{}
		for _, mf := range mfs {
			out[mf.GetName()] = mf.GetMetric()
		}
		return out
	}
	checkpoints := 0
	j, err = backfill.OpenJob(backfill.JobConfig{Store: s, Upstream: def, MV: 2, State: 3, Meta: 4, Actors: 2, BarrierRows: 30,
		Source: src, Score: backfilltest.Oracles(backfilltest.ScanOracle{Store: s, Table: 1}),
		OnCheckpoint: func(r backfill.Record) {
			checkpoints++
			p, ok := j.Progress()
			require.True(t, ok)
			require.Equal(t, r.Barrier, p.Barrier)
			require.Equal(t, r.Figures, p.Figures)
			require.Len(t, p.Estimates, len(p.Vnodes))
			m := scrape()
			disp := p.Displayed()
			require.Equal(t, "stats", disp.Approach)
			var shown float64
			for _, x := range m["lsmstats_backfill_displayed_progress_ratio"] {
				require.Equal(t, "orders_mv", labelOf(x, "job"))
				if labelOf(x, "approach") == "stats" {
					shown = x.GetGauge().GetValue()
				}
			}
			require.Equal(t, disp.Pct/100, shown)
			require.Len(t, m["lsmstats_backfill_vnode_consumed_rows"], def.VnodeCount)
			require.Len(t, m["lsmstats_backfill_vnode_upper_rows"], def.VnodeCount)
			var sum, lower, upper float64
			for i, x := range m["lsmstats_backfill_vnode_consumed_rows"] {
				sum += x.GetGauge().GetValue()
				lower += m["lsmstats_backfill_vnode_lower_rows"][i].GetGauge().GetValue()
				upper += m["lsmstats_backfill_vnode_upper_rows"][i].GetGauge().GetValue()
			}
			require.InDelta(t, disp.Consumed, sum, 1e-6)
			require.LessOrEqual(t, lower, sum+1e-6)
			require.GreaterOrEqual(t, upper, sum-1e-6)
			require.Equal(t, float64(p.Barrier), m["lsmstats_backfill_checkpoint_barrier"][0].GetGauge().GetValue())
		},
	})
	require.NoError(t, err)
	reg.MustRegister(backfill.NewCollector(j, &backfill.CollectorOptions{ConstLabels: prometheus.Labels{"job": "orders_mv"}, Vnodes: true}))
	_, ok := j.Progress()
	require.False(t, ok)
	require.Empty(t, scrape())
	res, err := j.Run(context.Background())
	require.NoError(t, err)
	require.True(t, res.Finished)
	require.Greater(t, checkpoints, 3)
	p, ok := j.Progress()
	require.True(t, ok)
	require.True(t, p.Finished)
	require.Equal(t, 100.0, p.Displayed().Pct)
	require.Equal(t, 1.0, scrape()["lsmstats_backfill_finished"][0].GetGauge().GetValue())
	require.NoError(t, j.Close())
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestCollectorPhasesAndUpstreams scrapes the collector of a snapshot
// backfill over two upstream tables at every checkpoint: each table's
// figure, the phase and the log rows are the record's.
func TestCollectorPhasesAndUpstreams(t *testing.T) {
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	defer s.Close()
	reg := prometheus.NewRegistry()
	var j *backfill.Job
	phases := map[string]bool{}
	j, _, err = multiJobMode(s, snapshotParams(3, 0.05)[:2], backfill.JobConfig{Mode: backfill.ModeSnapshot, Actors: 2, BarrierRows: 40,
		OnCheckpoint: func(r backfill.Record) {
			mfs, err := reg.Gather()
			require.NoError(t, err)
			m := map[string][]*dto.Metric{}
			for _, mf := range mfs {
				m[mf.GetName()] = mf.GetMetric()
			}
			require.Len(t, m["lsmstats_backfill_upstream_progress_ratio"], 4) // 2 tables x 2 approaches
			for _, x := range m["lsmstats_backfill_upstream_progress_ratio"] {
				l := map[string]string{}
				for _, p := range x.GetLabel() {
					l[p.GetName()] = p.GetValue()
				}
				u := map[string]int{"1": 0, "2": 1}[l["upstream"]]
				require.InDelta(t, backfill.FigureOf(r.Upstreams[u].Figures, l["approach"]).Raw/100, x.GetGauge().GetValue(), 1e-12)
			}
			require.Len(t, m["lsmstats_backfill_phase"], 1)
			require.Equal(t, r.Phase, m["lsmstats_backfill_phase"][0].GetLabel()[0].GetValue())
			require.Equal(t, float64(r.LogPending), m["lsmstats_backfill_log_pending_rows"][0].GetGauge().GetValue())
			require.Equal(t, float64(r.LogConsumed), m["lsmstats_backfill_log_consumed_rows"][0].GetGauge().GetValue())
			phases[r.Phase] = true
		}})
	require.NoError(t, err)
	reg.MustRegister(backfill.NewCollector(j, nil))
	_, err = j.Run(context.Background())
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"snapshot": true, "log store": true, "joined": true}, phases)
	require.NoError(t, j.Close())
}
