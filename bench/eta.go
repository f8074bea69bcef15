package bench

import (
	"context"
	"math"
	"slices"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/backfill"
)

// ETA accuracy: a run's checkpoints compared, after the run, with the time
// that actually remained until the job finished (BenchmarkETA, the CLI's
// summary).

// ETAPoint is one checkpoint's ETA against the time that actually remained.
type ETAPoint struct {
	// Progress is the checkpoint's figure, 0 to 1 (the truth when known).
	Progress float64
	// Actual is the time from the checkpoint to the job's end.
	Actual time.Duration
	// ETA is the forecast of the checkpoint.
	ETA backfill.ETAForecast
}

// RelErr returns |ETA − actual| / actual (+Inf for an unbounded ETA).
func (p ETAPoint) RelErr() float64 {
	if p.ETA.Remaining == backfill.ETAUnbounded {
		return math.Inf(1)
	}
	return math.Abs(p.ETA.Remaining.Seconds()-p.Actual.Seconds()) / p.Actual.Seconds()
}

// Covered reports whether the actual time lay inside the ETA's interval.
func (p ETAPoint) Covered() bool {
	return p.ETA.Low <= p.Actual && p.Actual <= p.ETA.High
}

// ETAPoints pairs every checkpoint before the job's end with the time that
// remained: records must end with the job's finished record (whose Time is
// the end). Checkpoints without an ETA shown are skipped.
func ETAPoints(records []backfill.Record) ([]ETAPoint, error) {
	if len(records) == 0 || !records[len(records)-1].Finished {
		return nil, errors.New("bench: ETA accuracy needs the records of a finished job")
	}
	end := records[len(records)-1].Time
	for _, r := range records {
		if r.Finished {
			end = r.Time // the first finished record
			break
		}
	}
	var out []ETAPoint
	for _, r := range records {
		if r.Finished || !r.ETA.Shown() || !r.Time.Before(end) {
			continue
		}
		p := r.Truth / 100
		if r.Truth < 0 {
			p = r.Figure("stats").Raw / 100
		}
		out = append(out, ETAPoint{Progress: p, Actual: end.Sub(r.Time), ETA: r.ETA})
	}
	return out, nil
}

// ETAStats summarise a run's ETA points after some progress.
type ETAStats struct {
	N int `json:"checkpoints"`
	// MedianErr and P90Err are the median and 90th percentile of
	// |ETA − actual| / actual; Coverage the share of checkpoints whose
	// actual time lay inside the interval.
	MedianErr float64 `json:"median_rel_err"`
	P90Err    float64 `json:"p90_rel_err"`
	Coverage  float64 `json:"coverage"`
	// UnderMinute counts the checkpoints whose ETA was under a minute while
	// more than five remained.
	UnderMinute int `json:"under_minute_while_over_5m"`
}

// SummarizeETA computes the stats of the points at or after minProgress (0
// to 1).
func SummarizeETA(points []ETAPoint, minProgress float64) ETAStats {
	var st ETAStats
	var errs []float64
	covered := 0
	for _, p := range points {
		if p.Progress < minProgress {
			continue
		}
		errs = append(errs, p.RelErr())
		if p.Covered() {
			covered++
		}
		if p.ETA.Remaining < time.Minute && p.Actual > 5*time.Minute {
			st.UnderMinute++
		}
	}
	st.N = len(errs)
	if st.N == 0 {
		return st
	}
	slices.Sort(errs)
	st.MedianErr = quantile(errs, 0.5)
	st.P90Err = quantile(errs, 0.9)
	st.Coverage = float64(covered) / float64(st.N)
	return st
}

// quantile returns the q-quantile of sorted xs, interpolated.
func quantile(xs []float64, q float64) float64 {
	pos := q * float64(len(xs)-1)
	i := int(pos)
	if i+1 >= len(xs) {
		return xs[len(xs)-1]
	}
	if math.IsInf(xs[i+1], 1) {
		return xs[i+1]
	}
	return xs[i] + (pos-float64(i))*(xs[i+1]-xs[i])
}

// RunRescale runs a fresh job like Run, but with cfg.RestartAt > 0 drops it
// unclosed (a crash) after that many checkpoints and reopens it with
// rescaleTo actors (cfg.Actors if 0). It returns the records, with the
// reopened job's first figure, and whether the MV matched the upstream.
func RunRescale(ctx context.Context, cfg Config, rescaleTo int) ([]backfill.Record, error) {
	var records []backfill.Record
	user := cfg.OnCheckpoint
	cfg.OnCheckpoint = func(r backfill.Record) {
		records = append(records, r)
		if user != nil {
			user(r)
		}
	}
	s, err := Open(cfg)
	if err != nil {
		return nil, err
	}
	defer func() { _ = s.Close() }()
	for !s.Job.Started() {
		if _, _, err := s.Job.Step(ctx); err != nil {
			return nil, err
		}
	}
	if cfg.RestartAt > 0 {
		for len(records) < cfg.RestartAt && !s.Job.Finished() {
			if _, _, err := s.Job.Step(ctx); err != nil {
				return nil, err
			}
		}
		if err := s.Store.Close(); err != nil {
			return nil, err
		}
		if rescaleTo > 0 {
			cfg.Actors = rescaleTo
		}
		if s, err = Open(cfg); err != nil {
			return nil, err
		}
		if rec := s.Job.Initial(); rec != nil {
			cfg.OnCheckpoint(*rec)
		}
	}
	if _, err := s.Job.Run(ctx); err != nil {
		return nil, err
	}
	if err := s.Job.Compare(); err != nil {
		return records, err
	}
	return records, nil
}
