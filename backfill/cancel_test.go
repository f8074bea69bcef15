package backfill_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// TestRunCancelled cancels Run's context at random moments — in the
// upstream write, in the actors' barrier, in a commit — and reopens the
// job each time, until it finishes. Run must return promptly with the
// cancellation: an actor that stops on a cancelled context before taking
// its barrier used to leave the job waiting for its acknowledgement
// forever. The MV equals the upstream table at the end.
func TestRunCancelled(t *testing.T) {
	r := rand.New(rand.NewPCG(testSeed(t), 21))
	p, err := workload.Preset("mixed", 6000, 16, 3)
	require.NoError(t, err)
	p.BatchRows = 2000
	p.DuringSteps = 20
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger{}})
	require.NoError(t, err)
	defer s.Close()
	cancels := 0
	for run := 0; ; run++ {
		require.Less(t, run, 400, "the job does not finish")
		g, err := workload.New(p)
		require.NoError(t, err)
		j, err := backfill.OpenJob(backfill.JobConfig{
			Store: s, Upstream: p.TableDef(1), MV: 2, State: 3, Meta: 4,
			Actors: 1 + r.IntN(4), ChunkSize: 32, BarrierRows: 64,
			Source: workload.Source{G: g}, Oracle: workload.Oracle{G: g},
		})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(30000))*time.Microsecond)
		done := make(chan error, 1)
		var res backfill.Result
		go func() {
			var err error
			res, err = j.Run(ctx)
			done <- err
		}()
		select {
		case err = <-done:
		case <-time.After(time.Minute):
			t.Fatalf("run %d: Run did not return a minute after its context was cancelled", run)
		}
		cancel()
		require.NoError(t, j.Close())
		if err == nil {
			require.True(t, res.Finished)
			break
		}
		require.True(t, errors.Is(err, context.DeadlineExceeded), "run %d: %v", run, err)
		cancels++
	}
	g, err := workload.New(p)
	require.NoError(t, err)
	j, err := backfill.OpenJob(backfill.JobConfig{Store: s, Upstream: p.TableDef(1), MV: 2, State: 3, Meta: 4,
		Actors: 2, Source: workload.Source{G: g}})
	require.NoError(t, err)
	require.NoError(t, j.Compare())
	require.NoError(t, j.Close())
	require.Positive(t, cancels)
	t.Logf("%d cancelled runs", cancels)
}
