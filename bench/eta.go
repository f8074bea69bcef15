package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
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
// the end). Checkpoints without an ETA shown are skipped. The time that
// remained leaves out each restart's downtime (from the last record before
// a reopened job's first figure, Record.Reopened, to that figure: the
// crash, the reopening and the recovery), which no forecast made before
// the crash can know of.
func ETAPoints(records []backfill.Record) ([]ETAPoint, error) {
	if len(records) == 0 || !records[len(records)-1].Finished {
		return nil, errors.New("bench: ETA accuracy needs the records of a finished job")
	}
	cs := make([]ETACheckpoint, len(records))
	var down time.Duration // the downtime so far
	for i, r := range records {
		if r.Reopened && i > 0 {
			down += r.Time.Sub(records[i-1].Time)
		}
		cs[i] = ETACheckpoint{Time: r.Time.Add(-down), Finished: r.Finished, Truth: r.Truth, Stats: r.Figure("stats").Raw, ETA: r.ETA}
	}
	out, _, _ := ETAPointsOf(cs)
	return out, nil
}

// ETACheckpoint is what a checkpoint's ETA accuracy needs: its time,
// whether the job had finished, its truth and stats figure in percent
// (Truth negative when unknown), and the ETA it showed.
type ETACheckpoint struct {
	Time         time.Time
	Finished     bool
	Truth, Stats float64
	ETA          backfill.ETAForecast
}

// ETAPointsOf pairs every checkpoint before the job's end (the first one
// finished, ok false if none is) with the time that remained; a point's
// progress is the truth, or the stats figure without one. Checkpoints
// without an ETA shown are skipped. The CLI's report pairs the
// checkpoints of all its worker processes with it.
func ETAPointsOf(cs []ETACheckpoint) (points []ETAPoint, end time.Time, ok bool) {
	for _, c := range cs {
		if c.Finished {
			end, ok = c.Time, true
			break
		}
	}
	if !ok {
		return nil, end, false
	}
	for _, c := range cs {
		if c.Finished || !c.ETA.Shown() || !c.Time.Before(end) {
			continue
		}
		p := c.Truth / 100
		if c.Truth < 0 {
			p = c.Stats / 100
		}
		points = append(points, ETAPoint{Progress: p, Actual: end.Sub(c.Time), ETA: c.ETA})
	}
	return points, end, true
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
// reopened job's first figure, the index of the reopened job's first record
// (-1 without a restart), and an error if the MV did not match the
// upstream.
func RunRescale(ctx context.Context, cfg Config, rescaleTo int) ([]backfill.Record, int, error) {
	cfg.RescaleTo = rescaleTo
	sum, err := Run(ctx, cfg)
	if err != nil {
		return nil, -1, err
	}
	if !sum.MVMatches {
		return sum.Records, sum.Restart, errors.New(sum.MVError)
	}
	return sum.Records, sum.Restart, nil
}

// ETAEstimator is an ETA a job's records can be replayed through
// (backfill.ETA, backfill.PlainETA).
type ETAEstimator interface {
	Observe(backfill.ETAObservation) (backfill.ETAForecast, error)
	Resume() backfill.ETAResume
}

// ReplayETA feeds a job's records to a fresh estimator from newETA, as the
// job feeds its own (etaObservations), and returns the records with the
// estimator's forecasts in place of the job's. At restart (an index of
// RunRescale, -1 for none) the records come from a reopened process with
// actorsAfter actors: the estimator is rebuilt from the earlier one's
// Resume as the job persisted it: with its last checkpoint's metadata,
// written before that checkpoint's figures, so one observation behind.
func ReplayETA(records []backfill.Record, restart, actors, actorsAfter, vnodes int, changes []backfill.RateChange,
	newETA func(*backfill.ETAOptions) ETAEstimator) ([]backfill.Record, error) {
	out := slices.Clone(records)
	est := newETA(nil)
	var persisted backfill.ETAResume
	for i, o := range etaObservations(records, restart, actors, actorsAfter, vnodes, changes) {
		if i == restart {
			est = newETA(&backfill.ETAOptions{Resume: &persisted})
		}
		persisted = est.Resume()
		fc, err := est.Observe(o)
		if err != nil {
			return nil, errors.Wrapf(err, "bench: replaying record %d", i)
		}
		out[i].ETA = fc
	}
	return out, nil
}

// etaObservations returns the observations a job's ETA took at its
// records (backfill.RecordObservation over vnodes vnodes, run 1 and then 2
// from restart on, with actorsAfter actors), with the rate changes still to
// come as the job tracks them: from the first in each process, past those
// the figures of the process's earlier records reached.
func etaObservations(records []backfill.Record, restart, actors, actorsAfter, vnodes int, changes []backfill.RateChange) []backfill.ETAObservation {
	out := make([]backfill.ETAObservation, len(records))
	run, applied := uint64(1), 0
	for i, r := range records {
		if i == restart {
			run, actors, applied = run+1, actorsAfter, 0
		}
		out[i] = backfill.RecordObservation(r, run, actors, vnodes)
		out[i].RateChanges = changes[applied:]
		pct := -1.0
		for _, f := range r.Figures {
			if f.Bounds != nil {
				pct = f.Raw
				break
			}
		}
		for applied < len(changes) && pct >= changes[applied].AtPercent {
			applied++
		}
	}
	return out
}

// WriteETAReplay writes a job's records (as ReplayETA takes them) as the
// lines of a replay command of backfill/testdata/eta: per checkpoint the
// time since the first record, the run, the snapshot rows, the consumed
// rows with their bounds, the total, the actors, the rate limit, the rate
// changes to come, whether it finished, the store's background work (bytes
// written / seconds busy), and the actors' figures.
func WriteETAReplay(w io.Writer, records []backfill.Record, restart, actors, actorsAfter, vnodes int, changes []backfill.RateChange) error {
	if len(records) == 0 {
		return nil
	}
	t0 := records[0].Time
	for _, o := range etaObservations(records, restart, actors, actorsAfter, vnodes, changes) {
		var b strings.Builder
		fmt.Fprintf(&b, "t=%.3fs run=%d s=%d c=%.1f lo=%.0f hi=%.0f total=%.0f actors=%d limit=%g",
			o.Time.Sub(t0).Seconds(), o.Run, o.SnapshotRows, o.Consumed, math.Floor(o.ConsumedLow), math.Ceil(o.ConsumedHigh), o.Total, o.Actors, o.RateLimit)
		for k, c := range o.RateChanges {
			sep := ","
			if k == 0 {
				sep = " changes="
			}
			fmt.Fprintf(&b, "%s%g:%g", sep, c.AtPercent, c.Limit)
		}
		if o.Finished {
			b.WriteString(" finished")
		}
		if bg := o.Background; bg != nil {
			fmt.Fprintf(&b, " bg=%d/%.6f", bg.Written, bg.Busy.Seconds())
		}
		for k, p := range o.Parts {
			sep := ","
			if k == 0 {
				sep = " parts="
			}
			fmt.Fprintf(&b, "%s%d/%.1f/%.0f/%.0f/%.0f", sep, p.SnapshotRows, p.Consumed, math.Floor(p.ConsumedLow), math.Ceil(p.ConsumedHigh), p.Total)
			if p.Finished {
				b.WriteString("/f")
			}
		}
		b.WriteByte('\n')
		if _, err := io.WriteString(w, b.String()); err != nil {
			return err
		}
	}
	return nil
}
