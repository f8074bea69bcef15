package backfill_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/internal/testutil"
)

// bgSim is a job on a store whose memtable flushes slow it: every row read
// writes bytesPerRow, a memtable of memtable bytes is flushed once full, a
// flush keeps the store busy for flushSecs per byte, and while one runs the
// job reads at (1 − slowdown) of its rate. The store's load flushed five
// memtables before the job.
type bgSim struct {
	rng                                 *rand.Rand
	rows, read, rate, slowdown, noise   float64
	bytesPerRow, memtable, flushSecs    float64
	fill, flushLeft, written, busy, now float64
}

func (s *bgSim) advance(dt float64) {
	const substeps = 8
	h := dt / substeps
	for range substeps {
		r := s.rate * (1 + s.noise*s.rng.NormFloat64())
		if s.flushLeft > 0 {
			r *= 1 - s.slowdown
			s.busy += math.Min(h, s.flushLeft)
			s.flushLeft -= h
		}
		n := math.Min(math.Max(r*h, 0), s.rows-s.read)
		s.read += n
		s.written += n * s.bytesPerRow
		s.fill += n * s.bytesPerRow
		if s.fill >= s.memtable && s.flushLeft <= 0 {
			s.fill -= s.memtable
			s.flushLeft = s.memtable * s.flushSecs
		}
	}
	s.now += dt
}

// bgAccuracy runs jobs drawn from rng, slowed by flushes by a share drawn
// from slowdown, and returns the ETA's median and p90 error and its
// coverage after 10% progress for three ETAs: the observations carrying the
// store's background work; without it; and with it, but, if restartAt > 0,
// carried over the job's restart at that share of its rows without the
// background figures (ETAResume.BackgroundBusy and the rest zeroed). The
// restart is a new process on a store that replays no WAL (its background
// counts start from 0) and a new run, with no time lost.
func bgAccuracy(rng *rand.Rand, jobs int, slowdown [2]float64, restartAt float64) [3][3]float64 {
	const n = 3
	var errs [n][]float64
	var in [n]int
	for range jobs {
		rate := 100e3 + 200e3*rng.Float64()
		secs := 4 + 8*rng.Float64()
		s := &bgSim{rng: rng, rows: math.Round(rate * secs), rate: rate, noise: 0.1,
			slowdown:    slowdown[0] + (slowdown[1]-slowdown[0])*rng.Float64(),
			bytesPerRow: 150 + 200*rng.Float64(), memtable: 64 << 20,
			flushSecs: (0.3 + 0.4*rng.Float64()) / (64 << 20)}
		s.written = 5 * s.memtable
		s.busy = 5 * s.memtable * s.flushSecs
		s.fill = s.memtable * rng.Float64()
		var etas [n]*backfill.ETA
		for i := range etas {
			etas[i] = backfill.NewETA(nil)
		}
		t0 := time.Unix(1e9, 0)
		type check struct {
			t  float64
			fc [n]backfill.ETAForecast
		}
		var checks []check
		run, baseW, baseB := uint64(1), 0.0, 0.0
		for s.read < s.rows {
			s.advance(0.02 * (0.9 + 0.2*rng.Float64()))
			if run == 1 && restartAt > 0 && s.read >= restartAt*s.rows {
				run, baseW, baseB = 2, s.written, s.busy
				for i, e := range etas {
					r := e.Resume()
					if i == 2 {
						r.BackgroundBusy, r.BackgroundWritten, r.Slowdown, r.SlowdownBusy = 0, 0, 0, 0
					}
					etas[i] = backfill.NewETA(&backfill.ETAOptions{Resume: &r})
				}
			}
			o := backfill.ETAObservation{Time: t0.Add(time.Duration(s.now * float64(time.Second))), Run: run, Actors: 1}
			o.Consumed, o.Total, o.SnapshotRows, o.Finished = s.read, s.rows, uint64(s.read), s.read >= s.rows
			o.ConsumedLow, o.ConsumedHigh = 0.999*s.read, math.Min(1.001*s.read, s.rows)
			var c check
			c.t = s.now
			for i, e := range etas {
				o.Background = nil
				if i != 1 {
					o.Background = &backfill.ETABackground{Written: int64(s.written - baseW), Busy: time.Duration((s.busy - baseB) * float64(time.Second))}
				}
				fc, err := e.Observe(o)
				if err != nil {
					panic(err)
				}
				c.fc[i] = fc
			}
			if s.read >= 0.1*s.rows && s.read < s.rows {
				checks = append(checks, c)
			}
		}
		for _, c := range checks {
			actual := s.now - c.t
			for i, fc := range c.fc {
				if !fc.Shown() {
					errs[i] = append(errs[i], math.Inf(1))
					continue
				}
				errs[i] = append(errs[i], math.Abs(fc.Remaining.Seconds()-actual)/actual)
				if fc.Low.Seconds() <= actual && actual <= fc.High.Seconds() {
					in[i]++
				}
			}
		}
	}
	var out [n][3]float64
	for i := range out {
		slices.Sort(errs[i])
		q := func(p float64) float64 { return errs[i][int(p*float64(len(errs[i])))] }
		out[i] = [3]float64{q(0.5), q(0.9), float64(in[i]) / float64(len(errs[i]))}
	}
	return out
}

// TestETABackground: jobs whose rate the store's flushes slow, flushes that
// come only once the job has run a while (its first rate is its highest),
// forecast with and without the store's background work. With it the ETA
// meets the goals after 10% progress (median error ≤ 10%, p90 ≤ 25%,
// coverage ≥ 80%) and errs less than without; on a store whose flushes do
// not slow the job it still meets them, once it has measured that. Across a
// restart into a process whose store replays nothing, what the ETA measured
// carries over (ETAResume): it errs less than an ETA resumed without it.
func TestETABackground(t *testing.T) {
	seed := testutil.Seed(t, "eta-seed", *etaSeedFlag)
	for _, tc := range []struct {
		name      string
		slowdown  [2]float64
		restartAt float64
	}{
		{"slowed by 20-50%", [2]float64{0.2, 0.5}, 0},
		{"not slowed", [2]float64{0, 0}, 0},
		{"slowed, restarted at 40%", [2]float64{0.2, 0.5}, 0.4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed^0x2545f4914f6cdd1d))
			r := bgAccuracy(rng, 12, tc.slowdown, tc.restartAt)
			with, without, uncarried := r[0], r[1], r[2]
			t.Logf("median/p90 error, coverage: with the background %.1f%%/%.1f%%/%.0f%%, without %.1f%%/%.1f%%/%.0f%%",
				100*with[0], 100*with[1], 100*with[2], 100*without[0], 100*without[1], 100*without[2])
			if with[0] > 0.10 || with[1] > 0.25 || with[2] < 0.80 {
				t.Errorf("with the background: median %.3f (want ≤ 0.10), p90 %.3f (≤ 0.25), coverage %.2f (≥ 0.80)", with[0], with[1], with[2])
			}
			if tc.slowdown[1] > 0 && with[0] >= without[0] {
				t.Errorf("the background did not help: median error %.3f with it, %.3f without", with[0], without[0])
			}
			if tc.restartAt > 0 {
				t.Logf("resumed without the carried figures: %.1f%%/%.1f%%/%.0f%%", 100*uncarried[0], 100*uncarried[1], 100*uncarried[2])
				if with[1] >= uncarried[1] {
					t.Errorf("the carried figures did not help: p90 error %.3f with them, %.3f without", with[1], uncarried[1])
				}
			}
		})
	}
}
