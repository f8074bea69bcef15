package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/stretchr/testify/require"
)

// TestTruthModes runs the same jobs with the truth inline, computed apart
// and off: computed apart, every checkpoint gets exactly the truth the
// inline run computed (from a copy of the model that follows the churn, or
// from scans of pinned snapshots for a snapshot backfill over several
// tables), through OnTruth in the order of the checkpoints and in the
// Summary's records, while the records the job hands on carry none; off,
// no record has a truth and the summary no error. A restart (a crash) in
// the middle is scored across, the reopened job's first figure included.
func TestTruthModes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		snapshot  bool
		upstreams int
		noRestart bool // the concurrent run's commits pipeline (JobConfig.ScoreLate)
	}{{name: "mixed"}, {name: "mixed", noRestart: true}, {name: "update-churn", snapshot: true, upstreams: 2}} {
		t.Run(fmt.Sprintf("%s/restart=%t", tc.name, !tc.noRestart), func(t *testing.T) {
			run := func(mode TruthMode) (Summary, []backfill.Record, []TruthResult) {
				cfg := smallConfig(t, tc.name)
				cfg.Approaches = nil // both: the rowcount figure too
				cfg.Truth, cfg.RestartAt = mode, 6
				if tc.noRestart {
					// Churn at every step of the backfill: a truth of the
					// model one step off differs.
					cfg.RestartAt, cfg.Workload.DuringSteps = 0, 40
				}
				if tc.snapshot {
					cfg.Mode = backfill.ModeSnapshot
					for i := range tc.upstreams {
						p := cfg.Workload
						p.Seed += uint64(i)
						cfg.Upstreams = append(cfg.Upstreams, p)
					}
				}
				var handed []backfill.Record
				var mu sync.Mutex
				var results []TruthResult
				cfg.OnCheckpoint = func(r backfill.Record) { handed = append(handed, r) }
				cfg.OnTruth = func(r TruthResult) {
					mu.Lock()
					results = append(results, r)
					mu.Unlock()
				}
				sum, err := Run(context.Background(), cfg)
				require.NoError(t, err)
				require.True(t, sum.MVMatches, sum.MVError)
				if !tc.noRestart {
					require.GreaterOrEqual(t, sum.Restart, 0, "restarted")
				}
				return sum, handed, results
			}
			inline, _, none := run(TruthInline)
			require.Empty(t, none, "OnTruth is for truths computed apart")
			require.Equal(t, len(inline.Records), inline.Truth.Scored)
			apart, handed, results := run(TruthConcurrent)
			require.Len(t, apart.Records, len(inline.Records))
			for _, r := range handed {
				require.Equal(t, -1.0, r.Truth, "barrier %d: handed on before its truth", r.Barrier)
			}
			skipped := apart.Truth.Skipped
			require.Len(t, results, len(apart.Records)-skipped)
			require.Equal(t, len(results), apart.Truth.Scored)
			if !tc.snapshot {
				require.Zero(t, skipped, "the model's truth is never skipped")
			}
			k := 0
			for i, r := range apart.Records {
				want := inline.Records[i]
				require.Equal(t, want.Barrier, r.Barrier)
				require.Equal(t, want.Reopened, r.Reopened)
				if r.Truth < 0 {
					continue // skipped
				}
				// In the order of the checkpoints, each the same as inline.
				for k < len(results) && !results[k].matches(r) {
					k++
				}
				require.Less(t, k, len(results), "record %d has a truth no OnTruth call gave", i)
				require.Equal(t, want.Truth, r.Truth, "record %d (barrier %d)", i, r.Barrier)
				require.Equal(t, want.Truth, results[k].Truth)
				require.Equal(t, want.VnodeErrMax, r.VnodeErrMax)
				for u := range want.Upstreams {
					require.Equal(t, want.Upstreams[u].Truth, r.Upstreams[u].Truth, "record %d upstream %d", i, u)
				}
			}
			require.Equal(t, inline.Errors["stats"].N-skipped, apart.Errors["stats"].N)
			if skipped == 0 {
				require.Equal(t, inline.Errors, apart.Errors)
			}
			require.Positive(t, apart.Truth.CPU)

			off, _, none := run(TruthOff)
			require.Empty(t, none)
			require.Empty(t, off.Errors)
			require.Zero(t, off.Truth.Scored)
			for _, r := range off.Records {
				require.Equal(t, -1.0, r.Truth)
			}
		})
	}
}

// TestTruthConcurrentUserJob: a user's job cannot have its truth computed
// apart (its oracle answers for the latest epoch only).
func TestTruthConcurrentUserJob(t *testing.T) {
	cfg := smallConfig(t, "uniform")
	cfg.Truth = TruthConcurrent
	p, err := workload.Preset("uniform", 100, 4, 1)
	require.NoError(t, err)
	cfg.User = &UserJob{Table: p.TableDef(0)}
	_, err = Run(context.Background(), cfg)
	require.ErrorContains(t, err, "inline only")
}
