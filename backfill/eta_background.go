package backfill

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// ETABackground is the background work of the store a job runs on, as the
// ETA needs it (lsm.Store.Background gives it): both count from the
// store's open, and neither decreases within a run.
type ETABackground struct {
	// Written is the bytes the store took in (its commits, in any one
	// measure), Busy how long its flushes and compactions kept it busy.
	Written int64
	Busy    time.Duration
}

// The background work's constants (see the file comment).
const (
	etaSlowdownPrior     = 0.25 // the slowdown before the ETA measured one (ETAOptions.BackgroundSlowdown)
	etaSlowdownPriorSecs = 0.5  // busy seconds the prior counts for against the measured slowdown
	etaSlowdownMax       = 0.9  // the largest slowdown believed
	etaIdleShare         = 0.05 // intervals busy less than this share are idle...
	etaBusyShare         = 0.5  // ...and more than this share busy, for the slowdown's measure
)

// etaBackground follows the store's background work: it runs the clock the
// lanes measure rates by, which leaves out the time background work took
// from the job, and prices the background work the rows ahead will cause.
type etaBackground struct {
	// prior is the slowdown before one is measured, counted for priorSecs
	// busy seconds.
	prior, priorSecs float64

	on       bool // the last observation of this run had Background
	last     ETABackground
	lastT    time.Time // its real time
	lastRows uint64

	shift float64 // seconds taken off the clock so far

	// busy and written sum the store's busy seconds and bytes written over
	// its life before the job and the job's runs: their ratio is the busy
	// time a byte written costs.
	busy, written float64
	// effSecs and effWritten sum the job's seconds on the lanes' clock and
	// the bytes written meanwhile: their ratio is the bytes the job writes
	// per second of its own pace.
	effSecs, effWritten float64
	// Rows and seconds of intervals with Pebble idle, and with Pebble busy
	// (slowBusy: their busy seconds): the slowdown's measure.
	idleRows, idleSecs, slowRows, slowSecs, slowBusy float64
	// hist holds the cumulative busy seconds (b.busy) at the observations
	// of the job, by real seconds since the first, thinned to at most
	// etaHistoryMax points: the busy share of a recent window.
	hist []etaBusyPoint
	t0   time.Time
}

type etaBusyPoint struct{ t, busy float64 }

// recentShare returns the share of the last window seconds the store was
// busy (of the job's history, if shorter).
func (b *etaBackground) recentShare(window float64) float64 {
	n := len(b.hist)
	if n < 2 || window <= 0 {
		return 0
	}
	last := b.hist[n-1]
	i, _ := slices.BinarySearchFunc(b.hist, last.t-window, func(p etaBusyPoint, t float64) int { return cmp.Compare(p.t, t) })
	i = min(i, n-2)
	first := b.hist[i]
	if last.t <= first.t {
		return 0
	}
	return math.Min(math.Max((last.busy-first.busy)/(last.t-first.t), 0), 1)
}

// clock takes o (whose run is new if fresh) and returns its time on the
// lanes' clock: the real time less the share of the background work's time
// that slowed the job. The store's life before the first observation of a
// run counts in the cost of a byte while the ETA knows none: a load's
// flushes, or those of the WAL a reopened store replayed.
func (b *etaBackground) clock(o *ETAObservation, fresh bool) time.Time {
	bg := o.Background
	if bg == nil {
		b.on = false
		return o.Time.Add(-secondsDuration(b.shift))
	}
	if !b.on || fresh {
		if b.written <= 0 || b.busy <= 0 {
			b.busy += bg.Busy.Seconds()
			b.written += float64(bg.Written)
		}
		b.on, b.last, b.lastT, b.lastRows = true, *bg, o.Time, o.SnapshotRows
		b.hist = b.hist[:0] // the busy share of this run's store only
		b.push(o.Time)
		return o.Time.Add(-secondsDuration(b.shift))
	}
	dt := o.Time.Sub(b.lastT).Seconds()
	if dt > 0 {
		busy := math.Min(math.Max((bg.Busy-b.last.Busy).Seconds(), 0), dt)
		written := math.Max(float64(bg.Written-b.last.Written), 0)
		share := busy / dt
		eff := dt * (1 - b.slowdown()*share)
		b.shift += dt - eff
		b.busy += busy
		b.written += written
		b.effSecs += eff
		b.effWritten += written
		if rows := float64(o.SnapshotRows - b.lastRows); rows > 0 { // pauses tell nothing
			switch {
			case share < etaIdleShare:
				b.idleRows += rows
				b.idleSecs += dt
			case share > etaBusyShare:
				b.slowRows += rows
				b.slowSecs += dt
				b.slowBusy += busy
			}
		}
	}
	b.last, b.lastT, b.lastRows = *bg, o.Time, o.SnapshotRows
	b.push(o.Time)
	return o.Time.Add(-secondsDuration(b.shift))
}

func (b *etaBackground) push(t time.Time) {
	if b.t0.IsZero() {
		b.t0 = t
	}
	b.hist = thinHistory(append(b.hist, etaBusyPoint{t: t.Sub(b.t0).Seconds(), busy: b.busy}))
}

// slowdown returns the share of the job's rate that background work takes
// while it runs: the rows the busy intervals fell short of the idle ones'
// rate by, per busy second, with the prior counting for
// etaSlowdownPriorSecs busy seconds.
func (b *etaBackground) slowdown() float64 {
	if b.idleSecs <= 0 || b.idleRows <= 0 || b.slowBusy <= 0 {
		return b.prior
	}
	idle := b.idleRows / b.idleSecs
	measured := (idle*b.slowSecs - b.slowRows) / (idle * b.slowBusy)
	measured = math.Min(math.Max(measured, 0), etaSlowdownMax)
	return (b.priorSecs*b.prior + b.slowBusy*measured) / (b.priorSecs + b.slowBusy)
}

// resume takes what an earlier process's ETA measured (ETAResume): the
// busy time per byte, and its slowdown as the prior.
func (b *etaBackground) resume(r ETAResume) {
	finite := func(x float64) bool { return x >= 0 && !math.IsInf(x, 0) && !math.IsNaN(x) }
	if finite(r.BackgroundBusy) && finite(r.BackgroundWritten) && r.BackgroundWritten > 0 {
		b.busy, b.written = r.BackgroundBusy, r.BackgroundWritten
	}
	if finite(r.Slowdown) && r.Slowdown <= etaSlowdownMax && finite(r.SlowdownBusy) && r.SlowdownBusy > 0 {
		b.prior, b.priorSecs = r.Slowdown, r.SlowdownBusy
	}
}

// factor returns how many times as long ahead seconds ahead on the lanes'
// clock take in real time, and the same for the interval's ends. Each
// second of them writes the bytes the job writes per second, and each byte
// costs the store the busy time a byte has cost it; or, if more, the store
// stays as busy as it was over the last as many seconds (an L0 compaction
// in progress lasts as long again as it has). Each busy second slows the
// job by the slowdown (the interval's ends by half and twice as much: the
// slowdown is measured on few busy seconds, and what else slows a busy
// store, its reads through a deeper L0, is not priced); busy time is at
// most the time itself. 1 without Background in this run.
func (b *etaBackground) factor(ahead float64) (point, low, high float64) {
	if !b.on || b.written <= 0 || b.effSecs <= 0 || ahead <= 0 {
		return 1, 1, 1
	}
	busyShare := b.busy / b.written * b.effWritten / b.effSecs // busy seconds per second ahead
	busyShare = math.Max(busyShare, b.recentShare(ahead))
	at := func(s float64) float64 {
		s = math.Min(s, etaSlowdownMax)
		return math.Min(1+s*busyShare, 1/(1-s))
	}
	s := b.slowdown()
	return at(s), at(s / 2), at(2 * s)
}
