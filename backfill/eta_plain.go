package backfill

import (
	"math"
	"time"
)

// PlainETA is the plain ETA (NewPlainETA): the rows ahead over a smoothed
// rate, which BenchmarkETA and TestETAAccuracy set beside ETA.
//
//   - The rate is an exponentially smoothed snapshot rows/s (time-weighted
//     sums of rows and seconds) whose half-life is a quarter of the time
//     since the last reset, and at least four checkpoints. A change of the
//     rate limit, a restart and a rescale reset it to a prior (the old rate
//     scaled to the new limit or number of actors) that counts for a few
//     checkpoints.
//   - Rate-limit changes still to come (ETAObservation.RateChanges) scale
//     the rate over the rows they apply to.
//   - The upstream's net churn ahead of the cursors (the change of the rows
//     ahead plus the rows read) is smoothed the same way and taken to go on:
//     the job reads at rate − churn.
//   - With the actors' figures (Parts) each actor has its own lane and the
//     ETA is the slowest actor's.
//   - Checkpoints without rows are averaged in until they last three typical
//     gaps between progress; then the job is stalled: the ETA adds the time
//     stalled so far and the stall is left out of the rate.
//   - The interval is a fixed relative band (plainBand) widened by the
//     rate's observed variance, over the bounds of the rows ahead, and by a
//     checkpoint interval either side.
type PlainETA struct {
	minIntervals int
	resume       *ETAResume

	started  bool
	finished bool
	origin   time.Time
	last     ETAObservation
	run      uint64
	actors   int
	limit    float64

	job   plainLane
	parts []plainLane
	fc    ETAForecast
}

// The plain ETA's constants.
const (
	plainBand          = 0.10 // the interval's relative half-width before the rate's variance
	plainSigmas        = 2.0  // standard errors of the rate the interval adds
	plainNoisePrior    = 0.2  // relative noise of one interval's rate before it is measured
	plainRestartWeight = 4    // checkpoints a carried rate counts for after a restart...
	plainResetWeight   = 2    // ...and after a rescale or a limit change
)

// NewPlainETA returns a plain ETA for one backfill job (opts as NewETA's).
func NewPlainETA(opts *ETAOptions) *PlainETA {
	e := &PlainETA{minIntervals: 5}
	if opts != nil && opts.MinIntervals > 0 {
		e.minIntervals = opts.MinIntervals
	}
	if opts != nil && opts.Resume != nil && !opts.Resume.Origin.IsZero() {
		r := *opts.Resume
		if r.Rate < 0 || math.IsNaN(r.Rate) || math.IsInf(r.Rate, 0) || r.Interval < 0 || math.IsNaN(r.Interval) || math.IsInf(r.Interval, 0) {
			r.Rate, r.Interval = 0, 0
		}
		e.resume = &r
	}
	return e
}

// Forecast returns the last forecast.
func (e *PlainETA) Forecast() ETAForecast { return e.fc }

// Resume returns what a restarted process needs to continue this ETA.
func (e *PlainETA) Resume() ETAResume {
	if !e.started {
		return ETAResume{}
	}
	return ETAResume{Origin: e.origin, Run: e.run, Actors: e.actors, RateLimit: e.limit,
		Rate: e.job.value(), Interval: e.job.dt, Intervals: e.job.intervals}
}

// Observe takes the observation of a checkpoint and returns the forecast;
// it refuses bad observations as ETA.Observe does.
func (e *PlainETA) Observe(o ETAObservation) (ETAForecast, error) {
	if err := checkObservation(&o, e.started, e.finished, e.last, e.run); err != nil {
		return e.fc, err
	}
	if o.Actors == 0 {
		o.Actors = len(o.Parts)
	}
	if r := e.resume; r != nil && !e.started && o.Run != r.Run && !o.Time.Before(r.Origin) {
		e.started, e.origin, e.run, e.actors, e.limit = true, r.Origin, r.Run, r.Actors, r.RateLimit
		e.job.intervals, e.job.dt = r.Intervals, r.Interval
		if r.Rate > 0 && r.Interval > 0 {
			e.job.reset(r.Rate, plainRestartWeight)
		}
		e.last = ETAObservation{Time: r.Origin}
	}
	switch {
	case !e.started:
		e.started, e.origin, e.run, e.actors, e.limit = true, o.Time, o.Run, o.Actors, o.RateLimit
		e.job.begin(o.Time, o.ETAFigure)
		e.parts = make([]plainLane, len(o.Parts))
		for i := range e.parts {
			e.parts[i].begin(o.Time, o.Parts[i])
		}
	case o.Run != e.run:
		e.newRun(o)
	default:
		if o.RateLimit != e.limit {
			n := float64(max(1, len(e.parts)))
			e.job.reset(limitAdjust(e.job.value(), e.limit, o.RateLimit), plainResetWeight)
			for i := range e.parts {
				p := &e.parts[i]
				p.reset(limitAdjust(p.value(), e.limit/n, o.RateLimit/n), plainResetWeight)
			}
			e.limit = o.RateLimit
		}
		e.job.advance(o.Time, o.ETAFigure)
		for i := range e.parts {
			e.parts[i].advance(o.Time, o.Parts[i])
		}
	}
	e.last = o
	e.finished = e.finished || o.Finished
	e.fc = e.forecast()
	return e.fc, nil
}

// newRun starts a run (a restart or a rescale): the rates carry over,
// scaled by the ratio of actors and to the new limit.
func (e *PlainETA) newRun(o ETAObservation) {
	weight, ratio := float64(plainRestartWeight), 1.0
	if o.Actors != e.actors || o.Actors == 0 {
		weight = plainResetWeight
		if e.actors > 0 && o.Actors > 0 {
			ratio = float64(o.Actors) / float64(e.actors)
		}
	}
	prior := carriedRate(e.job.value(), ratio, e.limit, o.RateLimit)
	e.job.begin(o.Time, o.ETAFigure)
	e.job.reset(prior, weight)
	old := e.parts
	e.parts = make([]plainLane, len(o.Parts))
	active := activeParts(o.Parts)
	for i := range e.parts {
		p := &e.parts[i]
		pr := 0.0
		if len(old) == len(o.Parts) && ratio == 1 {
			*p = old[i]
			n := float64(len(o.Parts))
			pr = limitAdjust(old[i].value(), e.limit/n, o.RateLimit/n)
		} else if active > 0 {
			p.dt = e.job.dt
			pr = prior / float64(active)
		}
		p.begin(o.Time, o.Parts[i])
		p.reset(pr, weight)
	}
	e.run, e.actors, e.limit = o.Run, o.Actors, o.RateLimit
}

// activeParts counts the parts with rows ahead.
func activeParts(parts []ETAFigure) int {
	n := 0
	for _, p := range parts {
		if !p.Finished && p.Total > p.ConsumedLow {
			n++
		}
	}
	return n
}

func (e *PlainETA) forecast() ETAForecast {
	o := e.last
	f := ETAForecast{Time: o.Time, Ahead: o.Total - o.Consumed, AheadLow: o.Total - o.ConsumedHigh,
		AheadHigh: o.Total - o.ConsumedLow, Rate: e.job.value(), Churn: e.job.churnRate()}
	if e.finished {
		f.Status = ETAFinished
		return f
	}
	if e.job.stalledNow > 0 {
		f.Rate, f.StalledFor = 0, secondsDuration(e.job.stalledNow)
	}
	if e.job.intervals < e.minIntervals || e.job.value() <= 0 {
		f.Status = ETAWarming
		return f
	}
	sched := scheduleFactor(o, e.job.value())
	point, low, high, diverging := e.job.forecast(o.ETAFigure, 0, e.minIntervals, sched)
	if len(e.parts) > 0 {
		active := activeParts(o.Parts)
		point, low, high = 0, 0, 0
		for i, p := range o.Parts {
			if p.Finished || p.Total <= p.ConsumedLow {
				continue
			}
			pp, pl, ph, _ := e.parts[i].forecast(p, e.job.value()/float64(active), e.minIntervals, sched)
			point, low, high = math.Max(point, pp), math.Max(low, pl), math.Max(high, ph)
		}
	}
	if s := e.job.stalledNow; s > 0 {
		// A stall that has lasted s is as likely as not to last s more.
		point, high = point+s, high+4*s
	}
	point = math.Max(point, e.job.dt)
	low, high = math.Min(math.Max(low, 0), point), math.Max(high, point)
	f.Status = ETARunning
	switch {
	case e.job.stalledNow > 0:
		f.Status = ETAStalled
	case diverging:
		f.Status = ETADiverging
	}
	f.Remaining, f.Low, f.High = secondsDuration(point), secondsDuration(low), secondsDuration(high)
	return f
}

// plainLane is the plain ETA's state of one stream of work, the whole job
// or one actor.
type plainLane struct {
	anchorT time.Time // the last observation with progress (or the run's first)
	anchor  ETAFigure
	lastT   time.Time // the last observation

	rows, secs, churn float64 // decayed sums: rows read, seconds, net churn ahead
	dev               float64 // decayed Σ seconds × (interval rate / rate − 1)²
	devSecs           float64
	since             float64 // running seconds since the last reset
	dt                float64 // typical seconds between progress
	intervals         int     // intervals with progress, all runs
	runIntervals      int
	stalledNow        float64 // seconds without rows, once a stall
}

func (l *plainLane) value() float64 {
	if l.secs <= 0 {
		return 0
	}
	return l.rows / l.secs
}

func (l *plainLane) churnRate() float64 {
	if l.secs <= 0 {
		return 0
	}
	return l.churn / l.secs
}

// begin starts a run at t with figure f.
func (l *plainLane) begin(t time.Time, f ETAFigure) {
	l.anchorT, l.anchor, l.lastT = t, f, t
	l.stalledNow, l.runIntervals = 0, 0
}

// reset restarts the smoothed rate at prior (if > 0), counted as weight
// typical intervals; the churn rate and the noise carry over.
func (l *plainLane) reset(prior, weight float64) {
	if prior <= 0 || l.dt <= 0 {
		return
	}
	c := l.churnRate()
	l.secs = weight * l.dt
	l.rows, l.churn, l.since = prior*l.secs, c*l.secs, 0
}

// advance takes an observation of the current run.
func (l *plainLane) advance(t time.Time, f ETAFigure) {
	if !t.After(l.lastT) {
		return
	}
	l.lastT = t
	dt := t.Sub(l.anchorT).Seconds()
	rows := float64(f.SnapshotRows - l.anchor.SnapshotRows)
	if rows == 0 {
		if l.dt > 0 && dt >= 3*l.dt && !f.Finished {
			l.stalledNow = dt
		}
		return
	}
	if l.stalledNow > 0 {
		// The stall is left out: the rows took a typical interval.
		dt, l.stalledNow = l.dt, 0
	}
	ahead0, ahead := l.anchor.Total-l.anchor.Consumed, f.Total-f.Consumed
	churn := ahead - ahead0 + rows
	l.anchorT, l.anchor = t, f
	if l.dt == 0 {
		l.dt = dt
	} else {
		l.dt += 0.1 * (dt - l.dt)
	}
	if r := l.value(); r > 0 {
		d := rows/dt/r - 1
		hl := math.Max(4*l.dt, 0.25*(l.since+dt))
		k := math.Exp2(-dt / hl)
		l.rows, l.secs, l.churn = l.rows*k+rows, l.secs*k+dt, l.churn*k+churn
		l.dev, l.devSecs = l.dev*k+dt*math.Min(d*d, 1), l.devSecs*k+dt
	} else {
		l.rows, l.secs, l.churn, l.since = rows, dt, churn, 0
	}
	l.since += dt
	l.intervals++
	l.runIntervals++
}

// forecast returns the lane's forecast in seconds, with rate fallback while
// it has fewer than minIntervals of its own, the rows ahead taking sched
// times as long as at the rate (scheduleFactor), and whether the churn
// ahead outpaces the rate.
func (l *plainLane) forecast(f ETAFigure, fallback float64, minIntervals int, sched float64) (point, low, high float64, diverging bool) {
	r, c := l.value(), l.churnRate()
	if r <= 0 || l.intervals < minIntervals {
		r = fallback
	}
	if r <= 0 {
		return 0, 0, 0, false
	}
	r /= sched
	eff := r - c
	diverging = eff <= 0
	eff = math.Max(eff, r/10)
	ahead, aheadLo, aheadHi := f.Total-f.Consumed, f.Total-f.ConsumedHigh, f.Total-f.ConsumedLow
	point = ahead / eff
	noise := plainNoisePrior * plainNoisePrior
	if l.devSecs > 0 && l.runIntervals >= minIntervals {
		noise = l.dev / l.devSecs
	}
	// The rate's standard error (over the seconds it averages) and the
	// future's (over the seconds ahead), in units of one interval's noise.
	dt := math.Max(l.dt, 1e-9)
	se := math.Sqrt(noise * (dt/math.Max(l.secs, dt) + dt/math.Max(point, dt)))
	band := plainBand + plainSigmas*se
	if l.runIntervals < minIntervals {
		band *= 2 // a carried rate
	}
	low = aheadLo/eff/(1+band) - l.dt
	high = aheadHi/eff*(1+band) + l.dt
	return point, low, high, diverging
}
