package bench

import (
	"context"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

func smallConfig(t *testing.T, name string) Config {
	p, err := workload.Preset(name, 3000, 16, 3)
	require.NoError(t, err)
	p.BatchRows = 700
	p.DuringSteps = 4
	return Config{Dir: t.TempDir(), Workload: p, Actors: 2, ChunkSize: 64, BarrierRows: 128,
		Approaches: []string{"stats"}, Store: &lsm.Options{Logger: lsm.QuietLogger(nil)}}
}

// TestRawPipelines runs both raw-Pebble pipelines and the store on the same
// small workloads, with churn before and during the backfill: each ends with
// its MV equal to its upstream (RunRaw checks its own and fails otherwise),
// the loads write the same ops, the scans read every live row once, and the
// times and commit latencies are filled in.
func TestRawPipelines(t *testing.T) {
	for _, name := range []string{"uniform", "mixed"} {
		t.Run(name, func(t *testing.T) {
			cfg := smallConfig(t, name)
			sum, err := Run(context.Background(), cfg)
			require.NoError(t, err)
			require.True(t, sum.MVMatches, sum.MVError)
			require.Positive(t, sum.Load)
			require.Positive(t, sum.Backfill)
			require.NotEmpty(t, sum.LoadCommits)
			require.NotEmpty(t, sum.BackfillCommits)

			g, err := workload.New(cfg.Workload)
			require.NoError(t, err)
			g.Replay(g.BackfillStep() - 1)
			live := uint64(g.LiveRows())

			for _, run := range []func(context.Context, Config) (RawResult, error){RunRaw, RunRawInterleaved} {
				rcfg := cfg
				rcfg.Dir = t.TempDir()
				raw, err := run(context.Background(), rcfg)
				require.NoError(t, err)
				require.Equal(t, sum.LoadOps, raw.LoadOps, "the same load")
				require.Positive(t, raw.Load)
				require.Positive(t, raw.Backfill)
				if name == "uniform" {
					// Without churn every live row is a snapshot row, in both.
					require.Equal(t, live, raw.SnapshotRows)
					require.Equal(t, live, sum.SnapshotRows)
				} else {
					require.Positive(t, raw.SnapshotRows)
				}
			}
		})
	}
}

// TestRawCompare: the raw pipeline's final check finds an MV that differs
// from its upstream.
func TestRawCompare(t *testing.T) {
	db, err := pebble.Open(t.TempDir(), (&lsm.Options{Logger: lsm.QuietLogger(nil)}).PebbleOptions())
	require.NoError(t, err)
	defer db.Close()
	r := &rawRun{db: db}
	put := func(table uint32, pk uint64, row string) {
		k := keys.AppendVersioned(nil, table, 0, keys.AppendUint64(nil, pk), keys.MakeVersion(1, 0), keys.KindPut)
		require.NoError(t, db.Set(k, []byte(row), pebble.Sync))
	}
	put(UpstreamTable, 1, "a")
	put(MVTable, 1, "a")
	require.NoError(t, r.compare())
	put(UpstreamTable, 2, "b")
	require.ErrorContains(t, r.compare(), "differ in length")
	put(MVTable, 2, "c")
	require.ErrorContains(t, r.compare(), "differs from upstream")
}

func TestQuantileAndSizes(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3}
	require.Equal(t, time.Duration(3), durationQuantile(ds, 0.5))
	require.Equal(t, time.Duration(5), durationQuantile(ds, 0.99))
	require.Equal(t, time.Duration(0), durationQuantile(nil, 0.5))
	sizes, err := parseSizes("1M, 200k,5000")
	require.NoError(t, err)
	require.Equal(t, []int{1_000_000, 200_000, 5000}, sizes)
	for _, n := range sizes {
		back, err := parseSizes(sizeName(n))
		require.NoError(t, err)
		require.Equal(t, []int{n}, back)
	}
	_, err = parseSizes("1G")
	require.ErrorContains(t, err, `bad size "1G"`)
}
