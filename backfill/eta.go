// # ETA (eta.go)
//
// An ETA (NewETA) forecasts the time a backfill job has left, with an
// interval, from one ETAObservation per checkpoint: its wall time, the stats
// approach's figure (consumed rows with their bounds, total live rows), the
// snapshot rows read, the run it comes from (a restart or a rescale starts a
// new one), and optionally the same figures per actor. It reads no clock and
// keeps no global state: the same observations give the same forecasts. The
// time left is the work ahead over the rate the job reads it at:
//
//   - The work ahead is the live rows ahead of the cursors, total − consumed,
//     plus what the upstream adds to the part still ahead before the cursors
//     get there. Total − consumed falls by the rows read and moves with the
//     upstream's inserts and deletes ahead of the cursors only (changes
//     behind them move consumed and total alike), so its change plus the rows
//     read is the upstream's net churn ahead. The churn is the median of five
//     slices of the recent past, so that a burst counts in the rows ahead but
//     is not extrapolated. How long it lasts is unknown: the forecast takes
//     it to last as long again as it has been seen (the median under a Lindy
//     prior; the interval takes a ninth of that and nine times that), so that
//     an upstream inserting as fast as the job reads gives a long ETA, not an
//     endless one. Where it lands is unknown too: with hashed keys the churn
//     ahead shrinks with the part ahead, with appended keys it does not; the
//     forecast fits which on the recent history, starting from the middle,
//     and the interval spans both.
//   - The rate is a time-weighted moving average of snapshot rows/s whose
//     half-life is a quarter of the time since the rate last shifted (at
//     least four checkpoints): the longer a rate holds, the more it is
//     smoothed. A level-shift detector restarts the average from the
//     checkpoints of a shift: four in a row on one side, together off by 15%
//     and three standard errors, or two off by half (a rate limit halved or
//     doubled is followed within two to four checkpoints). A known rate-limit
//     change, a restart and a rescale (the rate scaled by the ratio of
//     actors, unless the job's rate limit held it) restart it at once from a
//     prior that the new checkpoints soon outweigh. Checkpoints without
//     rows count in the average as pauses until they last three typical
//     gaps between progress; then the job is stalled: the rate shown is 0,
//     the stall is left out of the average, and the ETA adds the time
//     stalled so far (a stall that has lasted d is as likely to last d
//     more), so that it grows through a stall instead of standing still.
//   - Beside it the rate since the last change the ETA was told of (a rate
//     limit change, a rescale; not a detected shift, and carried over a
//     restart) is kept, and the forecast reads the rows ahead at a blend of
//     the two, each weighted by how well it foresaw the job's own recent
//     past: at past checkpoints, the rate each gave against the rate then
//     read over the horizon after it, as a power of its error. A rate that
//     shifted and stayed (a hidden limit, an actor out of rows) is followed
//     as before; a rate that wanders and comes back, as a machine's share of
//     a job does when its compactions take a core and give it back, is read
//     at its long average rather than at its latest level.
//   - With the actors' figures, each actor has its own rate and churn and the
//     ETA is the slowest actor's: a job whose vnodes were dealt unevenly
//     finishes when its last actor does, at that actor's rate.
//   - With the store's background work (ETAObservation.Background: the
//     bytes it took in, the time its flushes and compactions ran), the
//     forecast prices the flushes still ahead. A job on an embedded store
//     shares the machine with them: while one runs the job reads slower
//     (a quarter slower on two cores), and a job's first second, before
//     its memtable first fills, has none, so a rate read there is its
//     highest and a forecast from it short. So the lanes run on a clock
//     that leaves out the share of each busy second that slowed the job,
//     and read the job's rate free of them; the forecast on that clock is
//     then lengthened by the busy time the rows ahead will cause (the
//     bytes the job writes per second of it, times the busy time a byte
//     has cost the store over its life, the load's flushes included; or,
//     if more, the busy share of as many seconds just past, so that a
//     compaction in progress lasts as long again as it has), each busy
//     second at the slowdown: the rows the busy intervals fell short of
//     the idle intervals' rate by, per busy second, against a prior of a
//     quarter (ETAOptions.BackgroundSlowdown) that counts for half a busy
//     second. The interval's ends take half and twice that slowdown. What
//     it does not price is the rest of a store's drift: reads that slow as
//     L0 deepens between compactions, and an L0 compaction before it
//     begins (docs/results.md, "What the crash costs the forecast").
//
// The interval comes from the figure's bounds, the churn's spread, its
// duration and shape as above (all lengthened with the forecast by the
// background work ahead), and the rate's spread: a fixed ±3% widened by
// 1.5 standard errors of the smoothed rate and of the rate over the time
// ahead, from the measured noise of the rate. That noise is measured over
// one checkpoint interval and over blocks of 4, 16, 64 and 256 (the median
// of the last nine blocks' squared deviations, which the few blocks a shift
// or a stall spans leave alone), and the largest per interval counts: on a
// machine whose rate wanders for tens of checkpoints at a time (compactions
// taking a core and giving it back) the mean of the time ahead varies far
// more than independent intervals' noise would say. The share of time
// stalled so far widens the interval's upper end. Nothing is shown before five
// intervals with progress; after a restart the carried rate gives an ETA at
// once, with a wider interval until the new run has five of its own. The
// ETA is never negative and never below one checkpoint interval before the
// job finished, and it is 0 once it has.
//
// TestETAAccuracy simulates jobs of 300 to 1,200 checkpoints with noisy
// rates, the figure's bounds, churn and events (rate changes, stalls,
// restarts, rescales, bursts of inserts), and asserts the median and p90
// error after 10% progress and the interval's coverage, for this ETA and
// for PlainETA, a plain smoothed rate beside it. No forecast can know an
// unannounced event before it happens, nor how long the upstream's churn
// goes on: where the churn still to come makes more than a quarter of the
// time left (a rate that halves under steady appends), the test holds the
// interval's coverage, and the point's error only in the job's last third,
// once the churn has been seen for twice the time left. What the estimator
// adds over the plain rate is that it follows a rate that shifts without
// notice and does not take a burst of inserts to go on. TestETABackground
// simulates jobs that flushes slow, with and without the observations'
// Background. The measured figures are printed by the tests and by
// BenchmarkETA, whose table make results puts in docs/results.md.

package backfill

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/cockroachdb/errors"
)

// ErrETAInput marks an observation the ETA rejects (see ETA.Observe).
var ErrETAInput = errors.New("lsmstats/backfill: bad ETA observation")

// ETAFigure is the progress of a backfill job, or of one of its actors, at a
// checkpoint, as the ETA needs it.
type ETAFigure struct {
	// Consumed is the stats approach's raw consumed rows (Σ of the
	// per-vnode stats.RowEstimate.Mean plus the live rows of finished
	// vnodes), ConsumedLow and ConsumedHigh its bounds (the same with the
	// estimates' Lower and Upper), and Total the live rows of the vnodes:
	// 0 <= ConsumedLow <= ConsumedHigh <= Total. Consumed may stray from its
	// bounds (Mean may, by about a row per vnode): the ETA widens them to
	// take it in, and takes Consumed above Total as Total.
	Consumed, ConsumedLow, ConsumedHigh, Total float64
	// SnapshotRows is the number of snapshot rows read, counted from any
	// origin: only its increase within a run matters, and it must not
	// decrease within a run (a restarted process that counts again from its
	// last checkpoint, or from 0, starts a new run).
	SnapshotRows uint64
	// Finished is whether all the vnodes finished; once they have, they
	// stay finished.
	Finished bool
}

// ETAObservation is what a backfill job knows at a checkpoint, as the ETA
// needs it.
type ETAObservation struct {
	// Time is the wall time of the checkpoint. It never goes backwards.
	Time time.Time
	// Run identifies the process run and actor layout the observation
	// comes from: the job changes it at every restart and every rescale (a
	// counter persisted with the job's metadata, or the first epoch of the
	// run). At a new run the ETA takes the counts of snapshot rows afresh,
	// leaves the gap out of every rate, and carries its rate over as a prior
	// (scaled by the ratio of Actors unless RateLimit held it).
	Run uint64
	// Actors is the number of backfill actors of the run; 0 if unknown
	// (len(Parts) if there are Parts).
	Actors int
	// RateLimit is the job's snapshot read limit in rows/s, over all its
	// actors; 0 if none or unknown. A change is a known level shift of the
	// rate.
	RateLimit float64
	// RateChanges are the changes of the rate limit still to come, in
	// order (JobConfig.RateChanges not yet applied): each sets the limit
	// once the figure, 100 × Consumed / Total, reaches its AtPercent (at
	// once if it has). The forecast reads the rows ahead at the rates they
	// set (the rate scaled as the limit, while the limit holds it).
	RateChanges []RateChange
	// ETAFigure is the whole job's.
	ETAFigure
	// Parts, if set, are the figures of the job's actors, in the same order
	// at every checkpoint of a run: the job finishes when its slowest actor
	// does, and with Parts the ETA is that of the slowest (an actor that
	// runs out of rows early no longer holds the job's rate up).
	Parts []ETAFigure
	// Background, if set, is the background work of the store the job
	// runs on. The ETA then measures the job's rate with the time the
	// store's flushes and compactions took from it left out, and adds
	// back the work the rows ahead will cause (see the file comment). It
	// is ignored under a RateLimit: such a job reads at its limit's pace.
	Background *ETABackground
}

// ETAStatus says what an ETAForecast holds.
type ETAStatus uint8

const (
	// ETAWarming: not enough data yet; no ETA (Rate may already be set).
	ETAWarming ETAStatus = iota
	// ETARunning: Remaining, Low and High are the forecast.
	ETARunning
	// ETAStalled: no rows read for StalledFor; the forecast assumes the
	// stall lasts as long again.
	ETAStalled
	// ETADiverging: the upstream adds rows ahead of the cursors at least as
	// fast as the job reads them: the job finishes only once that churn
	// subsides, which the forecast assumes it does in as long again as it
	// has been seen.
	ETADiverging
	// ETAFinished: the job finished; the durations are 0.
	ETAFinished
)

var etaStatusNames = [...]string{"warming", "running", "stalled", "diverging", "finished"}

func (s ETAStatus) String() string {
	if int(s) < len(etaStatusNames) {
		return etaStatusNames[s]
	}
	return fmt.Sprintf("ETAStatus(%d)", uint8(s))
}

// ETAUnbounded is the duration of a forecast without a finite bound.
const ETAUnbounded = time.Duration(math.MaxInt64)

// ETAForecast is the ETA's forecast at one checkpoint.
type ETAForecast struct {
	// Time is the wall time of the observation the forecast is for.
	Time   time.Time
	Status ETAStatus
	// Remaining is the forecast time left and [Low, High] its interval
	// (Low <= Remaining <= High), when Shown; 0 otherwise, and 0 once the
	// job finished. They are ETAUnbounded if there is no finite forecast.
	Remaining, Low, High time.Duration
	// Rate is the snapshot read rate the forecast reads the rows ahead at,
	// rows/s, before the scheduled rate changes: the smoothed rate blended
	// with the rate since the last known change (see the file comment),
	// with the store's background work ahead priced in when the
	// observations carry it; 0 while stalled, and 0 before the first
	// interval with progress.
	Rate float64
	// Churn is the upstream's net rows/s ahead of the cursors (inserts less
	// deletes; negative when deletes dominate).
	Churn float64
	// Ahead is the live rows ahead of the cursors, Total − Consumed, and
	// [AheadLow, AheadHigh] its bounds from the figure's.
	Ahead, AheadLow, AheadHigh float64
	// StalledFor is the time since the last progress when stalled, else 0.
	StalledFor time.Duration
}

// Shown reports whether the forecast has an ETA to show (Running, Stalled
// or Diverging).
func (f ETAForecast) Shown() bool {
	return f.Status == ETARunning || f.Status == ETAStalled || f.Status == ETADiverging
}

// Seconds returns Remaining, Low and High in seconds for a metric: +Inf for
// ETAUnbounded, NaN when there is no ETA to show, 0 once finished.
func (f ETAForecast) Seconds() (remaining, low, high float64) {
	if f.Status == ETAFinished {
		return 0, 0, 0
	}
	if !f.Shown() {
		return math.NaN(), math.NaN(), math.NaN()
	}
	sec := func(d time.Duration) float64 {
		if d == ETAUnbounded {
			return math.Inf(1)
		}
		return d.Seconds()
	}
	return sec(f.Remaining), sec(f.Low), sec(f.High)
}

// String formats the forecast for a terminal: "ETA 3m10s (2m50s–3m40s)",
// "ETA 4m00s (3m00s–9m00s), stalled 40s", "ETA 5m00s (3m00s–40m00s),
// upstream outpaces the backfill", "ETA …" before there is one, "done" once
// finished.
func (f ETAForecast) String() string {
	switch f.Status {
	case ETAFinished:
		return "done"
	case ETARunning, ETAStalled, ETADiverging:
		s := fmt.Sprintf("ETA %s (%s–%s)", FormatETA(f.Remaining), FormatETA(f.Low), FormatETA(f.High))
		switch f.Status {
		case ETAStalled:
			s += ", stalled " + FormatETA(f.StalledFor)
		case ETADiverging:
			s += ", upstream outpaces the backfill"
		}
		return s
	default:
		return "ETA …"
	}
}

// FormatETA formats a duration as an ETA: "42s" under a minute, "3m10s"
// under an hour, "2h05m" above, "∞" for ETAUnbounded; never "0s" for a
// positive duration under a second ("<1s").
func FormatETA(d time.Duration) string {
	switch {
	case d == ETAUnbounded:
		return "∞"
	case d <= 0:
		return "0s"
	case d < time.Second:
		return "<1s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int64(d/time.Second))
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", int64(d/time.Minute), int64(d%time.Minute/time.Second))
	default:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%02dm", int64(d/time.Hour), int64(d%time.Hour/time.Minute))
	}
}

// ETAOptions tune an ETA; nil or the zero value gives the defaults.
type ETAOptions struct {
	// MinIntervals is the number of checkpoint intervals with progress the
	// ETA needs before it shows a forecast; 0 means 5.
	MinIntervals int
	// Resume, if set, continues the ETA of an earlier process (ETA.Resume,
	// persisted with the job): its first observation starts a new run whose
	// rate is carried over, as within one process.
	Resume *ETAResume
	// BackgroundSlowdown is the share of the job's rate the store's
	// background work takes while it runs (ETAObservation.Background),
	// until the ETA has measured it on the job; 0 means 0.25.
	BackgroundSlowdown float64
}

// ETAResume is what an ETA carries across a restart: the job's origin, its
// run, the rate it read and under which layout and limit, and what it
// measured of the store's background work. A process that
// restarts feeds a new ETA built with it (ETAOptions.Resume) and its first
// observation of a new Run.
type ETAResume struct {
	Origin    time.Time
	Run       uint64
	Actors    int
	RateLimit float64
	// Rate is the rows/s read since the last change the ETA knew of (a
	// rate-limit change, a rescale), Interval the typical seconds between
	// checkpoints and Intervals the checkpoint intervals with progress seen.
	Rate, Interval float64
	Intervals      int
	// BackgroundBusy and BackgroundWritten are the store's busy seconds and
	// the bytes written they were measured over (their ratio is the busy
	// time a byte costs), and Slowdown the share of the job's rate the
	// background work took, measured over SlowdownBusy busy seconds
	// (ETAObservation.Background): a restarted process prices the flushes
	// ahead from them until it has measured its own. 0 if not measured.
	BackgroundBusy, BackgroundWritten, Slowdown, SlowdownBusy float64
}

// Resume returns what a restarted process needs to continue this ETA (the
// zero value before the first observation).
func (e *ETA) Resume() ETAResume {
	if !e.started {
		return ETAResume{}
	}
	rate := e.job.long.value()
	if rate <= 0 {
		rate = e.job.rate.value()
	}
	return ETAResume{Origin: e.origin, Run: e.run, Actors: e.actors, RateLimit: e.limit,
		Rate: rate, Interval: e.job.rate.dt, Intervals: e.job.intervals,
		BackgroundBusy: e.bg.busy, BackgroundWritten: e.bg.written,
		Slowdown: e.bg.slowdown(), SlowdownBusy: e.bg.slowBusy + e.bg.priorSecs}
}

// The estimator's constants (see the file comment for their roles).
const (
	etaHalfLifeMinIntervals = 4    // the rate's half-life is at least this many checkpoints...
	etaHalfLifeShare        = 0.25 // ...and this share of the time since the rate last shifted
	etaShiftRun             = 4    // checkpoints in a row on one side that make a level shift
	etaShiftMin             = 0.15 // the smallest relative shift the detector acts on
	etaShiftFast            = 0.5  // ...and on from fewer than etaShiftRun checkpoints
	etaShiftSigmas          = 3.0  // the shift must exceed this many standard errors of the run's mean
	etaNoisePrior           = 0.2  // relative noise of one interval's rate before it is measured
	etaStallGaps            = 3    // typical gaps between progress without rows that make a stall
	etaStallHighFactor      = 4    // the interval allows the stall to last this many times longer
	etaChurnSlices          = 5    // slices of the churn window, whose median is the churn
	etaChurnWindowShare     = 0.4  // the churn window is this share of the job's elapsed time...
	etaChurnMinPairs        = 10   // ...and holds at least this many intervals
	etaBetaSlices           = 6    // slices of the whole history the churn's shape is fitted on
	etaBand                 = 0.03 // the rate's spread (×/÷) before its noise...
	etaBandSigmas           = 1.5  // ...and the standard errors of the rate it adds
	etaRescaleSpread        = 1.5  // the rate's extra spread (×/÷) of a new run with other actors
	etaRestartSpread        = 1.2  // ...and of a new run with the same actors
	etaRescaleWeight        = 2    // checkpoints a prior counts for after a rescale or a limit change...
	etaRestartWeight        = 4    // ...and after a restart with the same actors
	etaLimitBound           = 0.85 // a rate above this share of the limit is limited by it
	etaHistoryMax           = 1024 // history points kept per lane (older ones thinned)
	etaForever              = 1e9  // seconds beyond which a forecast is unbounded
)

// The backtest that weighs the long rate against the smoothed one
// (etaLane.longWeight).
const (
	etaBacktestPoints  = 16      // points scored, at most...
	etaBacktestMin     = 4       // ...and at least
	etaBacktestHorizon = 1.0 / 8 // the horizon scored is at most this share of the lane's history...
	etaBacktestWindow  = 5       // ...and the points scored are those of the last this many horizons
	etaBacktestPower   = 4       // each rate's weight is its mean squared error to the power of minus this
)

// The rate's noise over blocks of intervals (etaRate.longNoise).
const (
	etaBlockScales = 4 // block sizes: etaShiftRun × 4^i intervals, 4 to 256
	etaBlockMin    = 3 // blocks of a size measured before their noise counts...
	etaBlockKeep   = 9 // ...and the latest blocks it is the median of
	// etaChi2Median is the median of a χ² of one degree: the median of
	// squared normal deviations over it estimates their variance.
	etaChi2Median = 0.4549364231195724
)

// ETA forecasts a backfill job's remaining time (see the file comment). It
// reads no clock: time comes with each observation, and the same
// observations give the same forecasts, so that a process can rebuild an ETA
// by feeding it the recorded observations again. Not safe for concurrent
// use; forecasts are values.
type ETA struct {
	minIntervals int
	resume       *ETAResume

	started  bool
	finished bool
	origin   time.Time      // the first observation's time
	last     ETAObservation // the last observation
	run      uint64
	runSeq   int // runs before the current one
	actors   int
	limit    float64

	job   etaLane   // the whole job
	parts []etaLane // its actors, with Parts
	bg    etaBackground
	now   time.Time // the last observation's time on the lanes' clock
	fc    ETAForecast
}

// NewETA returns an ETA for one backfill job.
func NewETA(opts *ETAOptions) *ETA {
	e := &ETA{minIntervals: 5}
	e.bg.prior, e.bg.priorSecs = etaSlowdownPrior, etaSlowdownPriorSecs
	if opts != nil && opts.MinIntervals > 0 {
		e.minIntervals = opts.MinIntervals
	}
	if opts != nil && opts.BackgroundSlowdown > 0 && opts.BackgroundSlowdown <= etaSlowdownMax {
		e.bg.prior = opts.BackgroundSlowdown
	}
	if opts != nil && opts.Resume != nil && !opts.Resume.Origin.IsZero() {
		r := *opts.Resume
		// The origin as the job row persists it, a wall time: a duration
		// from it is read on the wall clock whatever the caller passed
		// (time.Now's monotonic reading would make a replay of the
		// records differ from the reopened job by the clocks' drift).
		r.Origin = r.Origin.Round(0)
		if r.Rate < 0 || math.IsNaN(r.Rate) || math.IsInf(r.Rate, 0) || r.Interval < 0 || math.IsNaN(r.Interval) || math.IsInf(r.Interval, 0) {
			r.Rate, r.Interval = 0, 0 // not worth carrying
		}
		e.resume = &r
		e.bg.resume(r)
	}
	return e
}

// Forecast returns the last forecast (the zero forecast, warming, before
// the first observation).
func (e *ETA) Forecast() ETAForecast { return e.fc }

// Observe takes the observation of a checkpoint and returns the forecast.
// It returns an error marked ErrETAInput, and keeps its state, for an
// observation that breaks the rules of ETAObservation: a zero or earlier
// time, counts that are negative or not finite, bounds out of order, fewer
// snapshot rows than before within a run, background work that is negative
// or fell within a run, another number of Parts within a run, or an
// unfinished job after a finished one.
func (e *ETA) Observe(o ETAObservation) (ETAForecast, error) {
	if o.Background != nil {
		bg := *o.Background // the ETA keeps the last: its own copy
		o.Background = &bg
	}
	if err := checkObservation(&o, e.started, e.finished, e.last, e.run); err != nil {
		return e.fc, err
	}
	if o.Actors == 0 {
		o.Actors = len(o.Parts)
	}
	// The lanes run on a clock that leaves out the time the store's
	// background work took from the job (etaBackground).
	observed := o
	if o.RateLimit > 0 {
		o.Background = nil
	}
	o.Time = e.bg.clock(&o, !e.started || o.Run != e.run)
	e.now = o.Time
	if r := e.resume; r != nil && !e.started && o.Run != r.Run && !o.Time.Before(r.Origin) {
		// The earlier process's ETA, as far as it carries: its rate and
		// its count of intervals; the new observation starts a new run.
		e.started, e.origin, e.run, e.actors, e.limit = true, r.Origin, r.Run, r.Actors, r.RateLimit
		e.job.intervals = r.Intervals
		if r.Rate > 0 && r.Interval > 0 {
			e.job.rate.dt = r.Interval
			e.job.rate.reseed(r.Rate, 0, etaRestartWeight, r.Interval)
			// The long rate counts for the intervals seen: all the job's,
			// as ETAResume does not say how many came since its last
			// known change (the backtest weighs it down if it misleads).
			e.job.long.reset(r.Rate, float64(max(r.Intervals, etaRestartWeight))*r.Interval)
		}
		e.last = ETAObservation{Time: r.Origin}
	}
	switch {
	case !e.started:
		e.started, e.origin, e.run, e.actors, e.limit = true, o.Time, o.Run, o.Actors, o.RateLimit
		e.job.begin(e, o.Time, o.ETAFigure, 0, 1, 0)
		e.parts = make([]etaLane, len(o.Parts))
		for i := range e.parts {
			e.parts[i].begin(e, o.Time, o.Parts[i], 0, 1, 0)
		}
	case o.Run != e.run:
		e.newRun(o)
	default:
		if o.RateLimit != e.limit {
			e.job.limitChanged(e.limit, o.RateLimit)
			for i := range e.parts {
				n := float64(len(e.parts))
				e.parts[i].limitChanged(e.limit/n, o.RateLimit/n)
			}
			e.limit = o.RateLimit
		}
		e.job.advance(e, o.Time, o.ETAFigure)
		for i := range e.parts {
			e.parts[i].advance(e, o.Time, o.Parts[i])
		}
	}
	e.last = observed
	e.finished = e.finished || o.Finished
	e.fc = e.forecast()
	return e.fc, nil
}

// checkObservation checks o against the rules of ETAObservation, after
// last (of run) if started, and clamps its bounds' rounding errors.
func checkObservation(o *ETAObservation, started, finished bool, last ETAObservation, run uint64) error {
	bad := func(format string, args ...any) error {
		return errors.Mark(errors.Newf("lsmstats/backfill: ETA observation at %s: "+format,
			append([]any{o.Time.Format(time.RFC3339Nano)}, args...)...), ErrETAInput)
	}
	if o.Time.IsZero() {
		return errors.Mark(errors.New("lsmstats/backfill: ETA observation without a time"), ErrETAInput)
	}
	if math.IsNaN(o.RateLimit) || math.IsInf(o.RateLimit, 0) || o.RateLimit < 0 {
		return bad("RateLimit is %v: it must be finite and >= 0", o.RateLimit)
	}
	if o.Actors < 0 {
		return bad("Actors is %d: it must be >= 0", o.Actors)
	}
	for i, c := range o.RateChanges {
		if math.IsNaN(c.AtPercent) || math.IsInf(c.AtPercent, 0) || math.IsNaN(c.Limit) || math.IsInf(c.Limit, 0) || c.Limit < 0 {
			return bad("RateChanges[%d] is %g:%g: both must be finite, the limit >= 0", i, c.AtPercent, c.Limit)
		}
		if i > 0 && c.AtPercent < o.RateChanges[i-1].AtPercent {
			return bad("RateChanges[%d] at %g%% comes before the one at %g%%: they must be in order", i, c.AtPercent, o.RateChanges[i-1].AtPercent)
		}
	}
	if err := checkFigure(&o.ETAFigure); err != nil {
		return bad("%v", err)
	}
	if bg := o.Background; bg != nil && (bg.Written < 0 || bg.Busy < 0) {
		return bad("Background is %d bytes written, %s busy: both must be >= 0", bg.Written, bg.Busy)
	}
	for i := range o.Parts {
		if err := checkFigure(&o.Parts[i]); err != nil {
			return bad("Parts[%d]: %v", i, err)
		}
	}
	if !started {
		return nil
	}
	if o.Time.Before(last.Time) {
		return bad("time went back from %s", last.Time.Format(time.RFC3339Nano))
	}
	if finished && !o.Finished {
		return bad("the job finished at %s and is not finished now", last.Time.Format(time.RFC3339Nano))
	}
	if o.Run != run {
		return nil
	}
	if o.SnapshotRows < last.SnapshotRows {
		return bad("SnapshotRows fell from %d to %d within run %d (a restarted count must come with a new Run)",
			last.SnapshotRows, o.SnapshotRows, o.Run)
	}
	if bg, lbg := o.Background, last.Background; bg != nil && lbg != nil && (bg.Written < lbg.Written || bg.Busy < lbg.Busy) {
		return bad("Background fell from %d bytes written, %s busy to %d, %s within run %d (a reopened store must come with a new Run)",
			lbg.Written, lbg.Busy, bg.Written, bg.Busy, o.Run)
	}
	if len(o.Parts) != len(last.Parts) {
		return bad("%d Parts in run %d, which had %d (a rescale must come with a new Run)",
			len(o.Parts), o.Run, len(last.Parts))
	}
	for i, p := range o.Parts {
		if p.SnapshotRows < last.Parts[i].SnapshotRows {
			return bad("Parts[%d].SnapshotRows fell from %d to %d within run %d (a restarted count must come with a new Run)",
				i, last.Parts[i].SnapshotRows, p.SnapshotRows, o.Run)
		}
	}
	return nil
}

// checkFigure checks f and clamps its bounds' rounding errors.
func checkFigure(f *ETAFigure) error {
	for _, v := range []struct {
		name string
		v    float64
	}{{"Consumed", f.Consumed}, {"ConsumedLow", f.ConsumedLow}, {"ConsumedHigh", f.ConsumedHigh}, {"Total", f.Total}} {
		if math.IsNaN(v.v) || math.IsInf(v.v, 0) || v.v < 0 {
			return errors.Newf("%s is %v: it must be finite and >= 0", v.name, v.v)
		}
	}
	// The bounds are sums of floats: allow their rounding.
	tol := 1e-9 * max(1, f.Total)
	if f.ConsumedLow > f.ConsumedHigh+tol || f.ConsumedHigh > f.Total+tol {
		return errors.Newf("want ConsumedLow <= ConsumedHigh <= Total, got %g, %g, %g",
			f.ConsumedLow, f.ConsumedHigh, f.Total)
	}
	// The estimate may stray from its bounds by about a row per vnode
	// (stats.RowEstimate.Mean): the bounds take it in.
	f.Consumed = min(f.Consumed, f.Total)
	f.ConsumedHigh = min(max(f.ConsumedHigh, f.Consumed), f.Total)
	f.ConsumedLow = min(f.ConsumedLow, f.Consumed)
	return nil
}

// newRun takes the first observation of a run (restart or rescale): the
// rates carry over as priors.
func (e *ETA) newRun(o ETAObservation) {
	spread, weight, ratio := etaRestartSpread, float64(etaRestartWeight), 1.0
	if o.Actors != e.actors || o.Actors == 0 {
		spread, weight = etaRescaleSpread, etaRescaleWeight
		if e.actors > 0 && o.Actors > 0 {
			ratio = float64(o.Actors) / float64(e.actors)
		}
	}
	jobPrior := carriedRate(e.job.rate.value(), ratio, e.limit, o.RateLimit)
	// The rate since the last known change carries over a restart of the
	// same layout under the same limit; otherwise it starts again.
	keep := ratio == 1 && o.Actors == e.actors && o.RateLimit == e.limit
	if !keep {
		e.job.long.reset(carriedRate(e.job.long.value(), ratio, e.limit, o.RateLimit), weight*e.job.rate.dt)
	}
	e.runSeq++
	e.job.begin(e, o.Time, o.ETAFigure, jobPrior, spread, weight)
	// Each actor keeps its rate if the layout stayed; otherwise the job's
	// prior is shared by the actors with rows ahead.
	old := e.parts
	e.parts = make([]etaLane, len(o.Parts))
	var active int
	for _, p := range o.Parts {
		if !p.Finished && p.Total > p.ConsumedLow {
			active++
		}
	}
	for i := range e.parts {
		e.parts[i] = etaLane{}
		prior := 0.0
		if len(old) == len(o.Parts) && ratio == 1 {
			e.parts[i] = old[i]
			n := float64(len(o.Parts))
			prior = limitAdjust(old[i].rate.value(), e.limit/n, o.RateLimit/n)
			if !keep {
				e.parts[i].long.reset(limitAdjust(old[i].long.value(), e.limit/n, o.RateLimit/n), weight*e.job.rate.dt)
			}
		} else if active > 0 {
			prior = jobPrior / float64(active)
			if keep {
				// A resumed job of the same layout: the actors share the
				// job's long rate as they share its prior.
				e.parts[i].long.reset(e.job.long.value()/float64(active), e.job.long.secs)
			} else {
				e.parts[i].long.reset(prior, weight*e.job.rate.dt)
			}
		}
		e.parts[i].begin(e, o.Time, o.Parts[i], prior, spread, weight)
	}
	e.run, e.actors, e.limit = o.Run, o.Actors, o.RateLimit
}

// carriedRate returns the rate a new run is expected to read from rate r of
// the last run, the new run having ratio times its actors: r scales with the
// actors unless the job's limit held it, and follows a change of the limit
// from old to new (limitAdjust), never above new.
func carriedRate(r, ratio, old, new float64) float64 {
	if old <= 0 || r < etaLimitBound*old {
		r *= ratio
	}
	r = limitAdjust(r, old, new)
	if new > 0 {
		r = math.Min(r, new)
	}
	return r
}

// limitAdjust returns the rate expected after the limit changes from old to
// new (0: none), from rate r read under old.
func limitAdjust(r, old, new float64) float64 {
	switch {
	case new == old:
		return r
	case old > 0 && r >= etaLimitBound*old:
		if new > 0 {
			return r * new / old // limited before: follows the limit
		}
		return r // unlimited now: the data will tell
	case new > 0 && new < r:
		return new
	default:
		return r
	}
}

// forecast computes the forecast of the last observation.
func (e *ETA) forecast() ETAForecast {
	o := e.last
	f := ETAForecast{
		Time:      o.Time,
		Ahead:     o.Total - o.Consumed,
		AheadLow:  o.Total - o.ConsumedHigh,
		AheadHigh: o.Total - o.ConsumedLow,
	}
	if e.finished {
		f.Status = ETAFinished
		f.Rate = e.job.rate.value()
		f.Churn, _, _ = e.job.churn()
		return f
	}
	age := e.now.Sub(e.origin).Seconds()
	sched := scheduleFactor(o, e.job.rate.value())
	job := e.job.forecast(o.ETAFigure, 0, e.minIntervals, age, sched, nil)
	f.Rate, f.Churn, f.StalledFor = job.rate, job.churn, secondsDuration(job.stalledFor)
	if e.job.intervals < e.minIntervals || !job.shown {
		f.Status = ETAWarming
		return f
	}
	point, low, high := job.point, job.low, job.high
	if len(e.parts) > 0 {
		// The slowest actor's; an actor whose own rate is not known yet
		// reads at the job's share.
		var active int
		for _, p := range o.Parts {
			if !p.Finished && p.Total > p.ConsumedLow {
				active++
			}
		}
		point, low, high = 0, 0, 0
		for i, p := range o.Parts {
			if p.Finished || p.Total <= p.ConsumedLow {
				continue
			}
			lf := e.parts[i].forecast(p, job.rateForecast/float64(active), e.minIntervals, age, sched, &job)
			point, low, high = math.Max(point, lf.point), math.Max(low, lf.low), math.Max(high, lf.high)
		}
		point = math.Max(point, job.floor)
		low, high = math.Min(low, point), math.Max(high, point)
	}
	// The background work the rows ahead will cause, back on the clock.
	g, gLow, gHigh := e.bg.factor(point)
	point, low, high = point*g, low*gLow, high*gHigh
	f.Rate /= g
	f.Status = ETARunning
	switch {
	case job.stalledFor > 0:
		f.Status = ETAStalled
	case job.diverging:
		f.Status = ETADiverging
	}
	f.Remaining, f.Low, f.High = secondsDuration(point), secondsDuration(low), secondsDuration(high)
	return f
}

// scheduleFactor returns how many times as long the rows ahead of o take
// to read at the rates its RateChanges set as at rate r under its limit:
// the rows from one change's percent to the next are read at r scaled as
// limitAdjust scales it. 1 without changes to come.
func scheduleFactor(o ETAObservation, r float64) float64 {
	ahead := o.Total - o.Consumed
	if len(o.RateChanges) == 0 || r <= 0 || ahead <= 0 {
		return 1
	}
	from := 100 * o.Consumed / o.Total
	rate, limit, secs := r, o.RateLimit, 0.0
	for _, c := range o.RateChanges {
		at := math.Min(math.Max(c.AtPercent, from), 100)
		secs += (at - from) / 100 * o.Total / rate
		if rate = limitAdjust(rate, limit, c.Limit); rate <= 0 {
			return 1
		}
		limit, from = c.Limit, at
	}
	secs += (100 - from) / 100 * o.Total / rate
	return secs / (ahead / r)
}

// secondsDuration converts seconds to a duration, ETAUnbounded beyond
// etaForever.
func secondsDuration(s float64) time.Duration {
	if s >= etaForever || math.IsNaN(s) {
		return ETAUnbounded
	}
	return time.Duration(s * float64(time.Second))
}

// etaLane forecasts one stream of work, the whole job or one actor, from
// its figures.
type etaLane struct {
	anchorT time.Time // the start of the interval in progress
	anchor  ETAFigure
	runSeq  int

	rate         etaRate
	long         etaLong
	tau          float64 // running seconds: fed intervals only
	reads        float64 // snapshot rows read, continuous across runs
	intervals    int     // intervals with progress, all runs
	runIntervals int     // the same in the current run
	runSpread    float64 // extra spread of the current run's prior (1: none)

	lastProgress time.Time
	pending      float64 // seconds without rows since the last progress
	gap          float64 // typical seconds between progress observations
	stalled      float64 // seconds of long stalls that ended
	stalledNow   float64 // seconds of the stall in progress (0 if none)
	runWall      float64 // seconds observed within runs (gaps between runs left out)

	hist []etaPoint
}

// etaPoint is a lane's state at an observation with progress (or the first
// of a run), in cumulative quantities so that any two points of a run give
// an interval.
type etaPoint struct {
	run   int     // ETA.runSeq
	wall  float64 // seconds since the ETA's origin
	reads float64
	ahead float64
	// The lane's smoothed rate and its rate since the last known change,
	// then: what each would have forecast (etaLane.longWeight).
	rate, long float64
	// Sums over the intervals between consecutive points of a run (an
	// interval that spans two runs is left out: the rows the new run read
	// before its first checkpoint are unknown): the rows the upstream added
	// ahead (the change of the rows ahead plus the rows read), the seconds,
	// and the rows ahead × seconds.
	cRows, cSecs, aheadSecs float64
}

// begin starts the lane's run at t with figure f and, if prior > 0, that
// rate, counted as weight checkpoints, whose spread is widened by spread
// until the run has checkpoints of its own.
func (l *etaLane) begin(e *ETA, t time.Time, f ETAFigure, prior, spread, weight float64) {
	if prior > 0 {
		l.rate.reseed(prior, l.tau, weight, e.job.rate.dt)
	}
	if l.stalledNow > 0 {
		l.stalled += l.stalledNow
		l.stalledNow = 0
	}
	l.pending = 0
	l.runSeq, l.runIntervals, l.runSpread = e.runSeq, 0, spread
	l.lastProgress, l.anchorT, l.anchor = t, t, f
	l.push(e, t, f)
}

func (l *etaLane) limitChanged(old, new float64) {
	if r := l.rate.value(); r > 0 {
		l.rate.reseed(limitAdjust(r, old, new), l.tau, etaRescaleWeight, l.rate.dt)
		l.long.reset(limitAdjust(l.long.value(), old, new), etaRescaleWeight*l.rate.dt)
	}
}

// advance takes an observation of the current run.
func (l *etaLane) advance(e *ETA, t time.Time, f ETAFigure) {
	dt := t.Sub(l.anchorT).Seconds()
	if dt <= 0 {
		return // the same instant: its rows count in the next interval
	}
	l.runWall += dt
	rows := float64(f.SnapshotRows - l.anchor.SnapshotRows)
	l.anchorT, l.anchor = t, f
	if rows == 0 {
		l.pending += dt
		if since := t.Sub(l.lastProgress).Seconds(); l.gap > 0 && since >= etaStallGaps*l.gap && !f.Finished {
			l.stalledNow = since
		}
		return
	}
	// Progress. A pause shorter than a stall is part of the rate; a stall
	// is not.
	if l.stalledNow > 0 {
		l.stalled += l.stalledNow
		l.stalledNow = 0
	} else if l.pending > 0 {
		l.rate.feed(0, l.pending, l.tau, false)
		l.tau += l.pending
		l.long.secs += l.pending
	}
	l.pending = 0
	l.rate.feed(rows, dt, l.tau, true)
	l.long.rows += rows
	l.long.secs += dt
	l.tau += dt
	l.reads += rows
	l.intervals++
	l.runIntervals++
	if g := t.Sub(l.lastProgress).Seconds(); l.gap == 0 {
		l.gap = g
	} else {
		l.gap += 0.1 * (g - l.gap)
	}
	l.lastProgress = t
	l.push(e, t, f)
}

func (l *etaLane) push(e *ETA, t time.Time, f ETAFigure) {
	p := etaPoint{
		run: l.runSeq, wall: t.Sub(e.origin).Seconds(), reads: l.reads,
		ahead: f.Total - f.Consumed, rate: l.rate.value(), long: l.long.value(),
	}
	if n := len(l.hist); n > 0 {
		q := l.hist[n-1]
		p.cRows, p.cSecs, p.aheadSecs = q.cRows, q.cSecs, q.aheadSecs
		if q.run == p.run && p.wall > q.wall {
			dt := p.wall - q.wall
			p.cRows += (p.ahead - q.ahead) + (p.reads - q.reads)
			p.cSecs += dt
			p.aheadSecs += (p.ahead + q.ahead) / 2 * dt
		}
	}
	l.hist = thinHistory(append(l.hist, p))
}

// thinHistory returns h, or once it holds more than etaHistoryMax points,
// its newer half and every other point of its older one, in place.
func thinHistory[T any](h []T) []T {
	if len(h) <= etaHistoryMax {
		return h
	}
	half, j := len(h)/2, 0
	for i := 0; i < half; i += 2 {
		h[j] = h[i]
		j++
	}
	j += copy(h[j:], h[half:])
	return h[:j]
}

// laneForecast is a lane's forecast, in seconds.
type laneForecast struct {
	shown            bool
	point, low, high float64
	floor            float64 // the least time to the next checkpoint
	rate, churn      float64 // shown (rate 0 while stalled)
	rateForecast     float64 // the rate the forecast uses
	stalledFor       float64
	diverging        bool // churn >= rate
	// The churn's shape, the rate's spread and the long rate's weight,
	// which an actor's lane takes from the job's: its own are noisier, and
	// cost as much again.
	beta, mLo, mHi, wLong float64
}

// forecast returns the lane's forecast for figure f, with rate fallback if
// the lane has fewer than minIntervals of its own and no prior, for a churn
// seen for age seconds, the rows ahead taking sched times as long to read
// as at the rate (scheduleFactor).
func (l *etaLane) forecast(f ETAFigure, fallback float64, minIntervals int, age, sched float64, job *laneForecast) laneForecast {
	r := l.rate.value()
	c, cLo, cHi := l.churn()
	lf := laneForecast{rate: r, churn: c, stalledFor: l.stalledNow, floor: l.rate.dt}
	if l.stalledNow > 0 {
		lf.rate = 0
	}
	spread := 1.0
	if l.runIntervals < minIntervals {
		spread = l.runSpread
	}
	if r <= 0 || (l.runSeq == 0 && l.intervals < minIntervals) {
		r, spread = fallback, etaRescaleSpread
	} else if rl := l.long.value(); rl > 0 {
		// The smoothed rate and the rate since the last known change, each
		// weighted by how well it foresaw the lane's own past.
		w := 0.0
		if job != nil {
			w = job.wLong
		} else {
			w = l.longWeight((f.Total - f.Consumed) / r)
			lf.wLong = w
		}
		r *= math.Exp(w * math.Log(rl/r))
		if l.stalledNow == 0 {
			lf.rate = r // the rate shown is the rate the forecast reads at
		}
	}
	lf.rateForecast = r
	if r <= 0 {
		return lf
	}
	r /= sched
	lf.shown = true
	ahead, aheadLo, aheadHi := f.Total-f.Consumed, f.Total-f.ConsumedHigh, f.Total-f.ConsumedLow
	if job != nil {
		lf.beta, lf.mLo, lf.mHi = job.beta, job.mLo, job.mHi
	} else {
		lf.beta = l.churnShape()
	}
	// The churn lasts as long again as it has been seen (its median under
	// a Lindy prior); the interval takes its 10th and 90th percentiles, a
	// ninth of that and nine times that.
	lf.diverging = c >= r
	point := churnTime(ahead, r, c, lf.beta, age)
	if job == nil {
		lf.mLo, lf.mHi = l.rateSpread(point)
	}
	mLo, mHi := lf.mLo/spread, lf.mHi*spread
	low, high := math.Inf(1), 0.0
	for _, beta := range []float64{0, 1} {
		for _, lasts := range []float64{age / 9, 9 * age} {
			low = math.Min(low, churnTime(aheadLo, r*mHi, cLo, beta, lasts))
			high = math.Max(high, churnTime(aheadHi, r*mLo, cHi, beta, lasts))
		}
	}
	if share := l.stalled / max(l.runWall, 1e-9); share > 0 && share < 1 {
		high /= 1 - share // stalls so far may recur
	}
	if l.stalledNow > 0 {
		point += l.stalledNow
		high += etaStallHighFactor * l.stalledNow
	}
	// Not finished: at least until the next checkpoint.
	point = math.Max(point, lf.floor)
	lf.point, lf.low, lf.high = point, math.Min(math.Max(low, 0), point), math.Max(high, point)
	return lf
}

// churnTime returns the seconds it takes to read w rows ahead at r rows/s
// while the upstream adds c rows/s ahead of the cursors for l seconds (as
// runTime says) and none after: the time without churn plus the share of
// the churn's extra time that falls within l, exactly so for beta = 0.
func churnTime(w, r, c, beta, l float64) float64 {
	stop := runTime(w, r, 0, 0)
	if c == 0 || w <= 0 || r <= 0 {
		return stop
	}
	full := runTime(w, r, c, beta)
	if math.IsInf(full, 1) {
		return stop + c/r*l // the rows ahead grow as long as the churn lasts
	}
	return stop + (1-stop/full)*math.Min(l, full)
}

// runTime returns the seconds it takes to read w rows ahead at r rows/s
// while the upstream adds c rows/s ahead of the cursors now, and from then on
// in proportion to (rows ahead / w)^beta, 0 <= beta <= 1: the integral of
// dA / (r − c (A/w)^beta) from 0 to w. +Inf when it does not converge.
func runTime(w, r, c, beta float64) float64 {
	if w <= 0 {
		return 0
	}
	if r <= 0 {
		return math.Inf(1)
	}
	x := c / r
	if x >= 1 {
		return math.Inf(1)
	}
	var k float64 // time in units of w/r: ∫₀¹ du / (1 − x u^beta)
	switch {
	case beta == 0:
		k = 1 / (1 - x)
	case beta == 1:
		if math.Abs(x) < 1e-6 {
			k = 1 + x/2
		} else {
			k = -math.Log1p(-x) / x
		}
	case math.Abs(x) < 0.5:
		// Σ x^n / (n beta + 1), to 2^-50 or better.
		p := 1.0
		for n := 0; n < 64 && math.Abs(p) > 1e-16; n++ {
			k += p / (float64(n)*beta + 1)
			p *= x
		}
	default:
		// Simpson's rule; the integrand is smooth enough away from x = 1,
		// and x this large is rare (churn ahead at least half the rate).
		const n = 256
		fn := func(u float64) float64 { return 1 / (1 - x*math.Pow(u, beta)) }
		k = fn(0) + fn(1)
		for i := 1; i < n; i++ {
			k += float64(2+2*(i%2)) * fn(float64(i)/n)
		}
		k /= 3 * n
	}
	return w / r * k
}

// churn returns the upstream's net rows/s ahead of the cursors over the
// recent past, the median of the churn of etaChurnSlices slices of the
// window, and its spread, lo to hi.
func (l *etaLane) churn() (c, lo, hi float64) {
	n := len(l.hist)
	if n < 2 {
		return 0, 0, 0
	}
	now := l.hist[n-1].wall
	from := math.Min(now*(1-etaChurnWindowShare), l.hist[max(0, n-1-etaChurnMinPairs)].wall)
	var rates [etaChurnSlices]float64
	m := 0
	for s := range etaChurnSlices {
		a := l.at(from + (now-from)*float64(s)/etaChurnSlices)
		b := l.at(from + (now-from)*float64(s+1)/etaChurnSlices)
		if secs := b.cSecs - a.cSecs; secs > 0 {
			rates[m] = (b.cRows - a.cRows) / secs
			m++
		}
	}
	if m == 0 {
		return 0, 0, 0
	}
	last2 := rates[max(0, m-2):m] // in time order, before the median sorts
	recent := math.Max(last2[0], last2[len(last2)-1])
	c = median(rates[:m])
	// The spread: 1.5 median absolute deviations (about one standard
	// deviation of normal noise), which a burst in a slice or two leaves
	// alone.
	var dev [etaChurnSlices]float64
	for i, x := range rates[:m] {
		dev[i] = math.Abs(x - c)
	}
	mad := 1.5 * median(dev[:m])
	// A burst that lasted a few slices holds the median up after it ended:
	// the two latest slices, both well below it, say it has.
	if m == etaChurnSlices && recent < c-mad && recent < c/2 {
		c = recent
	}
	return c, c - mad, c + mad
}

// median returns the median of xs, which it sorts.
func median(xs []float64) float64 {
	slices.Sort(xs)
	return quantileSorted(xs, 0.5)
}

// at returns the lane's history point at wall time t: the last at or
// before t (the first if none).
func (l *etaLane) at(t float64) etaPoint {
	i, _ := slices.BinarySearchFunc(l.hist, t, func(p etaPoint, t float64) int { return cmp.Compare(p.wall, t) })
	if i < len(l.hist) && l.hist[i].wall == t {
		return l.hist[i]
	}
	return l.hist[max(0, i-1)]
}

// churnShape returns the exponent beta of churn ∝ (rows ahead)^beta, fitted
// on etaBetaSlices slices of the recent half of the lane's history (log
// churn against log rows ahead), and drawn towards 0.5 (the middle of the
// two models) until the rows ahead have halved over them.
func (l *etaLane) churnShape() float64 {
	n := len(l.hist)
	if n < 2*etaBetaSlices {
		return 0.5
	}
	// The recent half only: a change of churn earlier (a burst, or an
	// upstream that slowed down) would pass for a shape.
	from, now := l.hist[0].wall, l.hist[n-1].wall
	from = math.Min((from+now)/2, l.hist[n-2*etaBetaSlices].wall)
	var xs, ys [etaBetaSlices]float64
	m := 0
	for s := range etaBetaSlices {
		a := l.at(from + (now-from)*float64(s)/etaBetaSlices)
		b := l.at(from + (now-from)*float64(s+1)/etaBetaSlices)
		secs, rows, ahead := b.cSecs-a.cSecs, b.cRows-a.cRows, b.aheadSecs-a.aheadSecs
		if secs > 0 && rows > 0 && ahead > 0 {
			xs[m], ys[m] = math.Log(ahead/secs), math.Log(rows/secs)
			m++
		}
	}
	if m < etaBetaSlices-2 {
		return 0.5
	}
	// A burst raises the churn and the rows ahead together, which would
	// pass for churn following the rows ahead: slices whose churn is far
	// from the others' (3 median absolute deviations) are left out.
	var tmp, dev [etaBetaSlices]float64
	copy(tmp[:], ys[:m])
	med := median(tmp[:m])
	for i := range m {
		dev[i] = math.Abs(ys[i] - med)
	}
	if mad := median(dev[:m]); mad > 0 {
		k := 0
		for i := range m {
			if math.Abs(ys[i]-med) <= 3*mad {
				xs[k], ys[k] = xs[i], ys[i]
				k++
			}
		}
		m = k
	}
	if m < etaBetaSlices-2 {
		return 0.5
	}
	var mx, my float64
	for i := range m {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(m)
	my /= float64(m)
	var sxy, sxx float64
	lo, hi := xs[0], xs[0]
	for i := range m {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
		lo, hi = math.Min(lo, xs[i]), math.Max(hi, xs[i])
	}
	if sxx <= 0 {
		return 0.5
	}
	w := math.Min(1, (hi-lo)/math.Ln2)
	return math.Min(1, math.Max(0, 0.5+w*(sxy/sxx-0.5)))
}

// rateSpread returns the factors (mLo <= 1 <= mHi) by which the rate over
// the next horizon seconds may differ from the smoothed one: a fixed band
// (etaBand) widened by etaBandSigmas standard errors of the smoothed rate
// (over the seconds it averages) and of the future's (over the horizon),
// from the noise of the rate over many intervals (etaRate.longNoise).
func (l *etaLane) rateSpread(horizon float64) (mLo, mHi float64) {
	noise := l.rate.longNoise()
	dt := math.Max(l.rate.dt, 1e-9)
	se := math.Sqrt(noise * (dt/math.Max(l.rate.secs, dt) + dt/math.Max(horizon, dt)))
	band := etaBand + etaBandSigmas*se
	return 1 / (1 + band), 1 + band
}

// longWeight returns the weight the lane's rate since the last known change
// gets against its smoothed rate in a forecast h seconds ahead. Each rate is
// scored on the lane's own recent past: at up to etaBacktestPoints points of
// the last etaBacktestWindow horizons, the rate it gave then against the
// rate read over the horizon after it, in mean squared log error (the
// horizon h, at most an eighth of the lane's history, so that a shift that
// stayed is soon scored). Each rate weighs as its error to the power of
// −etaBacktestPower, so that the one that foresaw clearly better takes
// nearly all the weight. 0 (the smoothed rate alone) until etaBacktestMin
// points can be scored. Where the rate shifted and stayed (a limit the job
// does not know of, an actor that ran out of rows), the smoothed rate
// foresaw the rows read better; where it wandered and came back, as a
// machine's share of a job does, the long rate did.
func (l *etaLane) longWeight(h float64) float64 {
	n := len(l.hist)
	if n < 2 {
		return 0
	}
	first, now := l.hist[0].cSecs, l.hist[n-1].cSecs
	if h = math.Min(h, (now-first)*etaBacktestHorizon); !(h > 0) {
		return 0
	}
	// The points with h running seconds of history after them.
	last := sort.Search(n, func(i int) bool { return l.hist[i].cSecs > now-h })
	from := sort.Search(n, func(i int) bool { return l.hist[i].cSecs >= now-etaBacktestWindow*h })
	var eRate, eLong float64
	m, j := 0, n-1
	for i := last - 1; i >= from; i -= max(1, (last-from)/etaBacktestPoints) {
		p := l.hist[i]
		// The first point h after p: j only moves back as p does.
		for j > i+1 && l.hist[j-1].cSecs >= p.cSecs+h {
			j--
		}
		q := l.hist[j]
		if p.rate <= 0 || p.long <= 0 || q.cSecs < p.cSecs+h || q.reads <= p.reads {
			continue
		}
		read := (q.reads - p.reads) / (q.cSecs - p.cSecs)
		dr, dl := math.Log(p.rate/read), math.Log(p.long/read)
		eRate += dr * dr
		eLong += dl * dl
		m++
	}
	if m < etaBacktestMin || eRate <= 0 {
		return 0 // too few points, or the smoothed rate foresaw them all
	}
	// eRate^-p / (eRate^-p + eLong^-p), without the powers' overflow.
	return 1 / (1 + math.Pow(eLong/eRate, etaBacktestPower))
}

// etaLong is a lane's rate since the last change it was told of (a rate
// limit change, a rescale, a carried prior): its rows and running seconds,
// which the level-shift detector does not restart.
type etaLong struct{ rows, secs float64 }

func (g etaLong) value() float64 {
	if g.secs <= 0 {
		return 0
	}
	return g.rows / g.secs
}

// reset restarts the rate at rate, counted as secs seconds (0 if rate is
// not positive).
func (g *etaLong) reset(rate, secs float64) {
	if rate <= 0 || !(secs > 0) {
		*g = etaLong{}
		return
	}
	g.rows, g.secs = rate*secs, secs
}

// quantileSorted returns the q-quantile of sorted xs, interpolated.
func quantileSorted(xs []float64, q float64) float64 {
	p := q * float64(len(xs)-1)
	i := int(p)
	if i >= len(xs)-1 {
		return xs[len(xs)-1]
	}
	return xs[i] + (xs[i+1]-xs[i])*(p-float64(i))
}

// etaRate is the smoothed snapshot read rate: time-weighted sums of rows
// and seconds with an exponential decay, restarted at level shifts.
type etaRate struct {
	rows, secs float64 // the decayed sums; rate = rows/secs
	noise      float64 // mean squared relative deviation of one interval's rate
	noiseN     int
	// The same of the rate over blocks of 4, 16, 64 and 256 intervals,
	// which is noise/size if the intervals' deviations are independent
	// and more if they are not: a machine whose rate wanders for many
	// intervals at a time, as its compactions and neighbours take their
	// share and give it back.
	blocks [etaBlockScales]etaBlock
	dt     float64 // typical interval length, seconds
	since  float64 // running time of the last shift or reseed
	// The run of intervals on one side of the rate, for the detector.
	side       int
	runN       int
	runRows    float64
	runSecs    float64
	runStarted float64
}

func (r *etaRate) value() float64 {
	if r.secs <= 0 {
		return 0
	}
	return r.rows / r.secs
}

// feed adds an interval of dt seconds with rows read, at running time tau
// (its start). A pause (detect false: an interval without rows, shorter
// than a stall) is averaged in, but neither counts as noise nor makes a
// level shift.
func (r *etaRate) feed(rows, dt, tau float64, detect bool) {
	if r.dt == 0 {
		r.dt = dt
	} else {
		r.dt += 0.1 * (dt - r.dt)
	}
	cur := r.value()
	if cur <= 0 {
		// The first interval, or after a stretch of zeros: start afresh.
		r.rows, r.secs, r.since = rows, dt, tau
		r.side, r.runN = 0, 0
		return
	}
	d := rows/dt/cur - 1
	if !detect {
		r.decay(rows, dt, tau)
		return
	}
	sigma := etaNoisePrior
	if r.noiseN >= etaShiftRun {
		sigma = math.Sqrt(r.noise)
	}
	side := 0
	if math.Abs(d) > sigma/2 {
		side = 1
		if d < 0 {
			side = -1
		}
	}
	if side != 0 && side == r.side {
		r.runN++
		r.runRows += rows
		r.runSecs += dt
	} else {
		r.side, r.runN, r.runRows, r.runSecs, r.runStarted = side, 1, rows, dt, tau
		if side == 0 {
			r.runN = 0
		}
	}
	if r.runN >= 2 {
		// Four intervals on one side make a shift if their mean is off by
		// 15% and three standard errors; two or three do if it is off by
		// half and six standard errors (a rate that fell tenfold is
		// followed from the second interval).
		dr := r.runRows/r.runSecs/cur - 1
		need := math.Max(etaShiftMin, etaShiftSigmas*sigma/math.Sqrt(float64(r.runN)))
		if r.runN < etaShiftRun {
			need = math.Max(etaShiftFast, 2*etaShiftSigmas*sigma/math.Sqrt(float64(r.runN)))
		}
		if math.Abs(dr) > need {
			// A level shift: the rate is what these intervals read.
			r.rows, r.secs, r.since = r.runRows, r.runSecs, r.runStarted
			r.side, r.runN = 0, 0
			return
		}
	}
	// The noise, with each deviation capped so that a stall or a shift
	// does not swamp it.
	dc := math.Min(d*d, 1)
	if r.noiseN == 0 {
		r.noise = dc
	} else {
		a := math.Max(0.05, 1/float64(r.noiseN+1))
		r.noise += a * (dc - r.noise)
	}
	r.noiseN++
	for i := range r.blocks {
		r.blocks[i].add(etaBlockSize(i), rows, dt, cur)
	}
	r.decay(rows, dt, tau)
}

// etaBlock measures the noise of the rate over blocks of size() intervals:
// the median of the last etaBlockKeep blocks' squared relative deviations
// from the smoothed rate, over the median of a χ² of one degree, so that
// the blocks a level shift or a stall spans do not count as noise.
type etaBlock struct {
	n, k       int     // blocks measured; intervals in the block in progress
	rows, secs float64 // of the block in progress
	dev        [etaBlockKeep]float64
}

// etaBlockSize returns the intervals of a block of scale i.
func etaBlockSize(i int) int { return etaShiftRun << (2 * i) }

// add adds an interval to the block in progress, of size intervals, against
// the smoothed rate cur.
func (b *etaBlock) add(size int, rows, dt, cur float64) {
	b.rows += rows
	b.secs += dt
	if b.k++; b.k < size {
		return
	}
	d := b.rows/b.secs/cur - 1
	b.dev[b.n%etaBlockKeep] = d * d
	b.n++
	b.k, b.rows, b.secs = 0, 0, 0
}

// noise returns the block's noise (0 before etaBlockMin blocks).
func (b *etaBlock) noise() float64 {
	m := min(b.n, etaBlockKeep)
	if m < etaBlockMin {
		return 0
	}
	var tmp [etaBlockKeep]float64
	copy(tmp[:], b.dev[:m])
	return median(tmp[:m]) / etaChi2Median
}

// longNoise returns the noise of one interval's rate that the mean of many
// intervals has: the largest of noise and each measured block scale's noise
// times its size (all about equal if the intervals' deviations are
// independent; the larger scales' larger where they are not).
func (r *etaRate) longNoise() float64 {
	v := etaNoisePrior * etaNoisePrior
	if r.noiseN >= etaShiftRun {
		v = r.noise
	}
	for i := range r.blocks {
		v = math.Max(v, r.blocks[i].noise()*float64(etaBlockSize(i)))
	}
	return v
}

// decay adds the interval to the decayed sums.
func (r *etaRate) decay(rows, dt, tau float64) {
	hl := math.Max(etaHalfLifeMinIntervals*r.dt, etaHalfLifeShare*(tau+dt-r.since))
	decay := math.Exp2(-dt / hl)
	r.rows = r.rows*decay + rows
	r.secs = r.secs*decay + dt
}

// reseed restarts the rate at a prior, weighted as that many typical
// intervals (dt if the rate has none yet), at running time tau.
func (r *etaRate) reseed(rate, tau, weight, dt float64) {
	if r.dt == 0 {
		r.dt = dt
	}
	w := math.Max(weight*r.dt, 1e-9)
	r.rows, r.secs, r.since = rate*w, w, tau
	r.side, r.runN = 0, 0
}

// RecordObservation returns the ETA observation of a job's record, as the
// job builds it (Job feeds its ETA the same): the first Accountant's account
// of the job and of each of its actors (vnodes dealt to actors as the job
// deals them: vnodes contiguous ranges, one per actor), the snapshot rows
// read and the rate limit, for run run; the job adds the rate changes still
// to come (RateChanges), which the record does not hold. A record without
// estimates gives an observation without figures.
func RecordObservation(rec Record, run uint64, actors, vnodes int) ETAObservation {
	owner := make([]int, vnodes)
	for i, vn := range vnodeRanges(allVnodes(vnodes), actors) {
		for it := vn.Iterator(); it.HasNext(); {
			owner[it.Next()] = i
		}
	}
	return observation(rec, run, actors, func(v VnodeState) (int, bool) {
		if int(v.Vnode) >= len(owner) {
			return 0, false
		}
		return owner[v.Vnode], true
	})
}

// observation is the ETA observation of a record for run run of a job with
// actors actors: the account of the job and, by ownerOf (the actor of a
// vnode's state, false for none), of each actor.
func observation(rec Record, run uint64, actors int, ownerOf func(VnodeState) (int, bool)) ETAObservation {
	o := ETAObservation{Time: rec.Time, Run: run, Actors: actors, RateLimit: rec.RateLimit,
		Parts: make([]ETAFigure, actors)}
	o.SnapshotRows, o.Finished, o.Background = rec.SnapshotRows, rec.Finished, rec.Background
	for i := range o.Parts {
		o.Parts[i].Finished = true
	}
	for i, v := range rec.Vnodes {
		if i >= len(rec.Estimates) {
			break
		}
		e := rec.Estimates[i]
		o.Consumed += e.Consumed
		o.ConsumedLow += e.Lower
		o.ConsumedHigh += e.Upper
		o.Total += e.Total
		a, ok := ownerOf(v)
		if !ok || a >= actors {
			continue
		}
		p := &o.Parts[a]
		p.Consumed += e.Consumed
		p.ConsumedLow += e.Lower
		p.ConsumedHigh += e.Upper
		p.Total += e.Total
		p.SnapshotRows += v.RowCount
		p.Finished = p.Finished && v.Finished
	}
	return o
}
