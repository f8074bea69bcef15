package backfill_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/bench/genjob"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/compaction"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/lsmstats/lsmstats/stats"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// TestConcurrentProgress computes backfill progress while the job runs:
// upstream writes, spills, commits, actors reading snapshots and writing the
// MV and their state, a compaction policy running GC and manual compactions
// in the background, Pebble's own compactions. A goroutine loads the
// committed vnode states and computes both estimators' figures from the
// statistics (what a progress reporter outside the job does), another
// scrapes the metrics and queries estimates and partitions. Under -race
// this is the data-race test of the whole pipeline; every figure must stay
// within [0, total]. Bounded in time (a couple of seconds).
func TestConcurrentProgress(t *testing.T) {
	seed := testSeed(t)
	p, err := workload.Preset("mixed", 3000, 16, seed)
	require.NoError(t, err)
	p.BatchRows = 600
	p.DuringSteps = 20
	g, err := workload.New(p)
	require.NoError(t, err)
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil), MemoryWatermark: 64 << 10})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	const upstream, state = 1, 3
	j, err := backfill.OpenJob(backfill.JobConfig{
		Store: s, Upstream: p.TableDef(upstream), MV: 2, State: state, Meta: 4,
		Actors: 3, ChunkSize: 32, BarrierRows: 60, Source: genjob.Source{G: g},
	})
	require.NoError(t, err)
	var logMu sync.Mutex
	var policyErrs []string
	pol, err := compaction.New(compaction.Config{Store: s, Thresholds: compaction.Thresholds{MinGarbage: 32},
		Interval: 5 * time.Millisecond, Rate: -1, Tables: []uint32{upstream, 2, state},
		Logf: func(format string, args ...any) {
			logMu.Lock()
			defer logMu.Unlock()
			policyErrs = append(policyErrs, fmt.Sprintf(format, args...))
		}})
	require.NoError(t, err)
	require.NoError(t, pol.Start())

	def, err := s.Table(upstream)
	require.NoError(t, err)
	all := roaring.New()
	all.AddRange(0, uint64(def.VnodeCount))
	vnodes := make([]uint16, def.VnodeCount)
	for i := range vnodes {
		vnodes[i] = uint16(i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	var figures, scrapes int
	wg.Add(2)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			st := s.Stats()
			states, err := backfill.LoadStates(s, state, def, vnodes)
			if err != nil {
				errs <- err
				return
			}
			in := backfill.Input{Epoch: st.CommittedEpoch, Upstream: upstream, Vnodes: states, Stats: st}
			for _, e := range []backfill.Estimator{backfill.StatsEstimator{}, backfill.RowCountEstimator{}} {
				consumed, total := e.Estimate(in)
				if consumed < 0 || total < 0 || (e.Name() == "stats" && consumed > total+1e-6) {
					errs <- fmt.Errorf("%s at epoch %d: consumed %f of %f", e.Name(), st.CommittedEpoch, consumed, total)
					return
				}
			}
			_ = j.ProgressTracker().HighWater()
			figures++
		}
	}()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(stats.NewMetrics(s.Stats, nil))
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			st := s.Stats()
			for v := range def.VnodeCount {
				est := st.EstimateRows(upstream, uint16(v), nil, nil)
				if live := st.Live.Vnode(upstream, uint16(v)).Rows; est.Lower > live || est.Upper < live {
					errs <- fmt.Errorf("vnode %d: estimate %+v of all %d rows", v, est, live)
					return
				}
			}
			var rows int64
			for _, r := range st.Partition(upstream, all, 4) {
				rows += r.Rows
			}
			if want := st.Live.Table(upstream).Rows; rows != want {
				errs <- fmt.Errorf("partitions hold %d rows, the table %d", rows, want)
				return
			}
			if _, err := reg.Gather(); err != nil {
				errs <- err
				return
			}
			scrapes++
		}
	}()

	deadline := time.Now().Add(2 * time.Second)
	finished := false
	var steps int
	for !finished && time.Now().Before(deadline) && len(errs) == 0 {
		rec, ok, err := j.Step(context.Background())
		require.NoError(t, err)
		steps++
		finished = ok && rec.Finished
	}
	cancel()
	wg.Wait()
	pol.Stop()
	logMu.Lock()
	require.Empty(t, policyErrs, "the policy's rounds failed")
	require.Zero(t, pol.Counters().Errors, "the policy's rounds failed")
	logMu.Unlock()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	t.Logf("steps %d (finished %t), progress computations %d, scrapes %d, policy %+v, store %+v",
		steps, finished, figures, scrapes, pol.Counters(), s.Metrics())
	require.Positive(t, figures)
	require.Positive(t, scrapes)
	if finished {
		require.NoError(t, j.Compare())
	}
	require.NoError(t, j.Close())
	rep, err := s.Verify()
	require.NoError(t, err)
	require.Empty(t, rep.Differences)
}
