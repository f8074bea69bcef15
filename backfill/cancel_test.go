package backfill_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/bench/genjob"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
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
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
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
			Source: genjob.Source{G: g}, Score: backfilltest.Oracles(genjob.Oracle{G: g}),
		})
		require.NoError(t, err)
		// A deadline at a random moment of the next 30 ms, a window that
		// doubles every 50 runs: cancellation is prompt in every phase, so
		// a slow machine (or the race detector) could otherwise cancel
		// every run before its first checkpoint.
		window := 30000 << min(run/50, 4)
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(window))*time.Microsecond)
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
		Actors: 2, Source: genjob.Source{G: g}})
	require.NoError(t, err)
	require.NoError(t, j.Compare())
	require.NoError(t, j.Close())
	require.Positive(t, cancels)
	t.Logf("%d cancelled runs", cancels)
}

// TestCancelPhase cancels a job's context exactly in each phase of a step
// (the job's OnPhase hook cancels on entering it, at a random occurrence
// after the backfill started), through Run and through Step, and through
// Run without a Score, whose checkpoints commit beside the next step (the
// cancel may find a commit in flight). Each must
// return context.Canceled within a second of the cancel, Close must return
// within a second after it, and no goroutine of the job may be left
// behind. The job then reopens and finishes with the MV equal to the
// upstream table.
func TestCancelPhase(t *testing.T) {
	seed := testSeed(t)
	for _, method := range []string{"run", "step", "run-pipelined"} {
		for pi, phase := range []string{"upstream", "backfill", "commit", "progress"} {
			t.Run(fmt.Sprintf("method=%s/phase=%s", method, phase), func(t *testing.T) {
				defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
				r := rand.New(rand.NewPCG(seed, uint64(22+pi)))
				p, err := workload.Preset("mixed", 4000, 16, seed)
				require.NoError(t, err)
				p.BatchRows = 1000
				p.DuringSteps = 10
				s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
				require.NoError(t, err)
				defer func() { require.NoError(t, s.Close()) }()
				open := func(onPhase func(string)) *backfill.Job {
					g, err := workload.New(p)
					require.NoError(t, err)
					score := backfilltest.Oracles(genjob.Oracle{G: g})
					if method == "run-pipelined" {
						score = nil
					}
					j, err := backfill.OpenJob(backfill.JobConfig{
						Store: s, Upstream: p.TableDef(1), MV: 2, State: 3, Meta: 4,
						Actors: 1 + r.IntN(3), ChunkSize: 32, BarrierRows: 64, CheckpointEvery: 1 + r.IntN(2),
						Source: genjob.Source{G: g}, Score: score, OnPhase: onPhase,
					})
					require.NoError(t, err)
					return j
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var j *backfill.Job
				var cancelled time.Time
				at := 1 + r.IntN(4) // the occurrence of the phase to cancel in
				j = open(func(ph string) {
					if ph != phase || !j.Started() || !cancelled.IsZero() {
						return
					}
					if at--; at == 0 {
						cancelled = time.Now()
						cancel()
					}
				})
				done := make(chan error, 1)
				go func() {
					if method != "step" {
						_, err := j.Run(ctx)
						done <- err
						return
					}
					for {
						if _, _, err := j.Step(ctx); err != nil || j.Finished() {
							done <- err
							return
						}
					}
				}()
				select {
				case err = <-done:
				case <-time.After(time.Minute):
					t.Fatalf("%s did not return a minute after its context was cancelled in %s", method, phase)
				}
				require.False(t, cancelled.IsZero(), "the job finished before phase %s was cancelled", phase)
				latency := time.Since(cancelled)
				require.ErrorIs(t, err, context.Canceled)
				require.Equal(t, context.Canceled, err, "the error is the cancellation itself")
				require.Less(t, latency, time.Second, "%s returned %s after the cancel", method, latency)
				// The stopped job refuses to go on: its step's work is
				// uncommitted and its source moved past it.
				_, _, err = j.Step(context.Background())
				require.ErrorIs(t, err, backfill.ErrStopped)
				start := time.Now()
				require.NoError(t, j.Close())
				closed := time.Since(start)
				require.Less(t, closed, time.Second, "Close took %s after the cancel", closed)
				t.Logf("cancel in %s: %s returned after %s, Close took %s", phase, method, latency, closed)

				j = open(nil)
				res, err := j.Run(context.Background())
				require.NoError(t, err)
				require.True(t, res.Finished)
				require.NoError(t, j.Compare())
				require.NoError(t, j.Close())
			})
		}
	}
}
