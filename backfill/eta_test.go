package backfill_test

import (
	"cmp"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/internal/testutil"
)

var etaJobsFlag = flag.Int("eta-jobs", 0, "simulated jobs per scenario of TestETAAccuracy (0: 24, or 8 under the race detector)")

// etaJobs returns the number of simulated jobs per scenario: the accuracy
// test is arithmetic, which the race detector only slows down.
func etaJobs() int {
	if *etaJobsFlag > 0 {
		return *etaJobsFlag
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" && s.Value == "true" {
				return 8
			}
		}
	}
	return 24
}

// simJob is a simple model of a backfill job for the ETA's tests: actors
// (lanes) each reading the rows ahead of their cursors at a rate, with noise,
// limits, stalls, restarts and rescales, while an upstream inserts and
// deletes rows ahead of and behind the cursors. Rows are floats (expected
// values); all randomness comes from rng.
type simJob struct {
	rng   *rand.Rand
	base  time.Time
	t     float64 // seconds since base
	every float64 // checkpoint interval, seconds
	// jitter is the relative jitter of the checkpoint interval.
	jitter float64

	lanes    []simLane
	perActor float64 // read capacity per actor, rows/s
	limit    float64 // the job's rate limit, rows/s over all actors; 0: none
	hidden   bool    // the limit is enforced but not reported
	noise    float64 // lognormal sigma of each interval's rate
	// wander is the lognormal sigma of a factor of the rate that wanders
	// and reverts to 1 (an AR(1) process in its log) with a correlation
	// of wanderSteps intervals: a machine whose compactions and neighbours
	// take a share of it for many checkpoints at a time.
	wander, wanderSteps, wanderX float64

	insert    float64 // upstream inserts, rows/s into the whole table
	appendIns bool    // inserts append to their vnode (ahead until it finished)
	deletes   float64 // upstream deletes, rows/s, uniform over live rows
	burst     float64 // extra inserts ahead, rows/s, while burstLeft > 0
	// churned is the upstream's net rows added ahead of the cursors so
	// far (inserts and bursts less deletes).
	churned   float64
	burstLeft float64
	stallLeft float64
	// pauseFor seconds of every pauseEvery read no rows (0: no pauses).
	pauseFor, pauseEvery float64

	run       uint64
	parts     bool    // the observations break the job down by actor
	bounds    float64 // the figure's bound half-width at 50%, share of total
	estNoise  bool    // the consumed estimate has noise inside its bounds
	finished  bool
	finishedT float64
}

type simLane struct{ ahead, behind, count float64 }

func newSimJob(rng *rand.Rand, rows float64, actors int, perActor, every float64) *simJob {
	j := &simJob{rng: rng, base: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), every: every, perActor: perActor}
	j.lanes = make([]simLane, actors)
	for i := range j.lanes {
		j.lanes[i].ahead = rows / float64(actors)
	}
	return j
}

func (j *simJob) totals() (ahead, behind float64) {
	for _, l := range j.lanes {
		ahead += l.ahead
		behind += l.behind
	}
	return ahead, behind
}

func (j *simJob) progress() float64 {
	a, b := j.totals()
	if a+b == 0 {
		return 1
	}
	return b / (a + b)
}

// jobRate is the job's read rate now, before noise.
func (j *simJob) jobRate() float64 {
	per := j.perActor
	if j.limit > 0 {
		per = math.Min(per, j.limit/float64(len(j.lanes)))
	}
	var active int
	for _, l := range j.lanes {
		if l.ahead > 0 {
			active++
		}
	}
	return per * float64(active)
}

// churn applies dt seconds of upstream changes.
func (j *simJob) churn(dt float64) {
	ahead, behind := j.totals()
	total := ahead + behind
	if total <= 0 {
		return
	}
	burst := 0.0
	if j.burstLeft > 0 {
		bdt := math.Min(dt, j.burstLeft)
		burst = j.burst * bdt
		j.burstLeft -= bdt
	}
	for i := range j.lanes {
		l := &j.lanes[i]
		size := l.ahead + l.behind
		ins := j.insert * dt * size / total
		del := j.deletes * dt * size / total
		insAhead := ins * l.ahead / math.Max(size, 1e-9)
		if j.appendIns && l.ahead > 0 {
			insAhead = ins
		}
		delAhead := del * l.ahead / math.Max(size, 1e-9)
		burstAhead := burst * l.ahead / math.Max(ahead, 1e-9)
		if l.ahead > 0 {
			j.churned += insAhead + burstAhead - delAhead
			l.ahead = math.Max(0, l.ahead+insAhead+burstAhead-delAhead)
			if l.ahead == 0 {
				l.ahead = 1 // a vnode in progress still has its last row
			}
		}
		l.behind = math.Max(0, l.behind+(ins-insAhead)-(del-delAhead))
	}
}

// step runs one checkpoint interval and returns its observation.
func (j *simJob) step() backfill.ETAObservation {
	dt := j.every
	if j.jitter > 0 {
		dt *= 1 + j.jitter*(2*j.rng.Float64()-1)
	}
	j.churn(dt)
	paused := j.pauseEvery > 0 && math.Mod(j.t+dt/2, j.pauseEvery) >= j.pauseEvery-j.pauseFor
	if j.stallLeft > 0 {
		j.stallLeft -= dt
	} else if !paused {
		f := 1.0
		if j.noise > 0 {
			f = math.Exp(j.noise*j.rng.NormFloat64() - j.noise*j.noise/2)
		}
		if j.wander > 0 {
			rho := math.Exp(-1 / j.wanderSteps)
			j.wanderX = rho*j.wanderX + math.Sqrt(1-rho*rho)*j.rng.NormFloat64()
			f *= math.Exp(j.wander*j.wanderX - j.wander*j.wander/2)
		}
		per := j.jobRate() * f * dt
		var active int
		for _, l := range j.lanes {
			if l.ahead > 0 {
				active++
			}
		}
		for i := range j.lanes {
			l := &j.lanes[i]
			if l.ahead <= 0 {
				continue
			}
			r := math.Min(l.ahead, per/float64(active))
			l.ahead -= r
			l.behind += r
			l.count += r
			if l.ahead < 0.5 {
				l.behind += l.ahead
				l.ahead = 0
			}
		}
	}
	j.t += dt
	if !j.finished {
		if a, _ := j.totals(); a == 0 {
			j.finished, j.finishedT = true, j.t
		}
	}
	return j.observe()
}

func (j *simJob) observe() backfill.ETAObservation {
	o := backfill.ETAObservation{
		Time: j.base.Add(time.Duration(j.t * float64(time.Second))), Run: j.run, Actors: len(j.lanes),
	}
	if !j.hidden {
		o.RateLimit = j.limit
	}
	for _, l := range j.lanes {
		f := j.figure(l)
		o.Consumed += f.Consumed
		o.ConsumedLow += f.ConsumedLow
		o.ConsumedHigh += f.ConsumedHigh
		o.Total += f.Total
		o.SnapshotRows += f.SnapshotRows
		if j.parts {
			o.Parts = append(o.Parts, f)
		}
	}
	// The sums of floats may round the order of the bounds.
	o.ConsumedHigh = math.Min(o.ConsumedHigh, o.Total)
	o.Consumed = math.Min(o.Consumed, o.ConsumedHigh)
	o.ConsumedLow = math.Min(o.ConsumedLow, o.Consumed)
	o.Finished = j.finished
	return o
}

// figure is a lane's figure: the truth is inside its bounds, whose width
// is greatest halfway, and the estimate (with estNoise) is off the truth by
// up to the half-width.
func (j *simJob) figure(l simLane) backfill.ETAFigure {
	total := l.ahead + l.behind
	p := 1.0
	if total > 0 {
		p = l.behind / total
	}
	hw := math.Min(j.bounds*total*2*math.Sqrt(p*(1-p)), l.ahead)
	est := l.behind
	if j.estNoise && hw > 0 {
		est += math.Max(-hw, math.Min(hw, hw/3*j.rng.NormFloat64()))
	}
	lo, hi := math.Max(0, math.Min(est, l.behind)-hw/2), math.Min(total, math.Max(est, l.behind)+hw/2)
	est = math.Min(math.Max(est, lo), hi)
	f := backfill.ETAFigure{Consumed: est, ConsumedLow: lo, ConsumedHigh: hi, Total: total,
		SnapshotRows: uint64(l.count), Finished: l.ahead == 0}
	if f.Finished {
		f.Consumed, f.ConsumedLow, f.ConsumedHigh = total, total, total
	}
	return f
}

// restart crashes the job halfway through an interval (its reads are lost),
// keeps it down for down seconds while the upstream goes on, and restarts it
// with actors actors (0: as many as before), its count at 0 or at the last
// checkpoint's.
func (j *simJob) restart(down float64, actors int, countZero bool) {
	lost := j.every * j.rng.Float64()
	j.churn(down + lost)
	j.t += down + lost
	if actors > 0 && actors != len(j.lanes) {
		// Rescale: the vnodes are dealt again, evenly.
		ahead, behind := j.totals()
		j.lanes = make([]simLane, actors)
		for i := range j.lanes {
			j.lanes[i] = simLane{ahead: ahead / float64(actors), behind: behind / float64(actors)}
		}
	}
	j.run++
	if countZero {
		for i := range j.lanes {
			j.lanes[i].count = 0
		}
	}
}

// TestETADataDriven runs backfill/testdata/eta/*: rate sequences fed to an
// ETA, one checkpoint at a time, with the forecast printed next to the time
// that actually remained.
//
//	sim [rows=N] [actors=N] [shares=(W,...)] [parts] [rate=R] [every=D]
//	    [jitter=F] [noise=F] [bounds=F] [seed=N] [print-every=N]
//	    [min-intervals=N]
//	<phase lines>
//	----
//	the checkpoints printed (every print-every-th, the first 6 after each
//	phase line, the last before the job finished and the first finished)
//
// rows are the rows ahead at the start (dealt to the actors evenly, or by
// shares), rate the job's read rate (rows/s, over its actors, each reading at
// an equal share while it has rows), every the checkpoint interval (default
// 1s), noise the lognormal sigma of each interval's rate, bounds the
// half-width of the figure's bounds at 50% (a share of the total); with
// parts, the observations break the job down by actor. A phase line
// changes the job, then runs it on:
//
//	rate R [for=D|until=P%]     the job's read rate becomes R
//	limit R [hidden] [for|until] a rate limit of R rows/s (0: none), reported
//	                            to the ETA unless hidden
//	churn R [append] [delete=R] [for|until] the upstream inserts R rows/s
//	                            (uniform over the keys, or appended to each
//	                            vnode) and deletes delete rows/s
//	stall D                     no rows read for D
//	pauses D every=D            no rows read for D of every period from now
//	                            on (pauses 0: none)
//	burst N over=D [for|until]  N rows inserted ahead of the cursors over D
//	restart down=D [actors=N] [count=zero|keep] [for|until]
//	                            a crash, D down, a new run (rescale with
//	                            actors; the rate follows the actor ratio)
//	finish                      run until the job finished
//
// A phase line without for= or until= only changes the job.
//
//	observe [min-intervals=N]
//	t=D run=N s=N c=F lo=F hi=F total=F [actors=N] [limit=R] [finished]
//	  [bg=WRITTEN/BUSY_SECONDS] [parts=s/c/lo/hi/total[/f],...]
//	----
//	each observation's forecast, or its error
//
//	replay [print-every=N] [min-intervals=N]
//	<observe lines, recorded from a job; # comments>
//	----
//	like sim, and the accuracy after 10% progress
func TestETADataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/eta", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			switch td.Cmd {
			case "sim":
				return runSimScript(t, td)
			case "observe":
				return runObserve(t, td)
			case "replay":
				return runReplay(t, td)
			default:
				td.Fatalf(t, "unknown command %q", td.Cmd)
				return ""
			}
		})
	})
}

func runSimScript(t *testing.T, td *datadriven.TestData) string {
	seed := uint64(etaIntArg(td, "seed", 1))
	actors := etaIntArg(td, "actors", 1)
	rate := floatArgETA(td, "rate", 1000)
	j := newSimJob(rand.New(rand.NewPCG(seed, seed)), floatArgETA(td, "rows", 100000), actors,
		rate/float64(actors), durArg(td, "every", time.Second).Seconds())
	j.jitter = floatArgETA(td, "jitter", 0)
	j.noise = floatArgETA(td, "noise", 0)
	j.bounds = floatArgETA(td, "bounds", 0.002)
	j.parts = td.HasArg("parts")
	if td.HasArg("shares") {
		// Rows dealt to the actors in these proportions.
		var shares []string
		td.ScanArgs(t, "shares", &shares)
		if len(shares) != actors {
			td.Fatalf(t, "shares: want %d, one per actor", actors)
		}
		rows, _ := j.totals()
		var sum float64
		ws := make([]float64, actors)
		for i, sh := range shares {
			w, err := strconv.ParseFloat(sh, 64)
			if err != nil {
				td.Fatalf(t, "shares: %v", err)
			}
			ws[i], sum = w, sum+w
		}
		for i := range j.lanes {
			j.lanes[i].ahead = rows * ws[i] / sum
		}
	}
	e := backfill.NewETA(&backfill.ETAOptions{MinIntervals: etaIntArg(td, "min-intervals", 0)})
	printEvery := etaIntArg(td, "print-every", 10)

	type line struct {
		obs   backfill.ETAObservation
		fc    backfill.ETAForecast
		mark  string // the phase line that starts here
		after int    // checkpoints since the last phase line
	}
	var lines []line
	var mark string
	after := 0
	observe := func() {
		o := j.step()
		fc, err := e.Observe(o)
		if err != nil {
			td.Fatalf(t, "observe: %v", err)
		}
		lines = append(lines, line{obs: o, fc: fc, mark: mark, after: after})
		mark = ""
		after++
	}
	runFor := func(args []string) {
		var forD float64
		until := -1.0
		for _, a := range args {
			switch k, v, _ := strings.Cut(a, "="); k {
			case "for":
				d, err := time.ParseDuration(v)
				if err != nil {
					td.Fatalf(t, "bad for=%s: %v", v, err)
				}
				forD = d.Seconds()
			case "until":
				p, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
				if err != nil {
					td.Fatalf(t, "bad until=%s: %v", v, err)
				}
				until = p / 100
			}
		}
		end := j.t + forD
		switch {
		case until >= 0:
			for !j.finished && j.progress() < until {
				observe()
			}
		case forD > 0:
			for !j.finished && j.t < end-1e-9 {
				observe()
			}
		}
	}
	// Lines (or the phase of a line) must be parsed before the run.
	for _, l := range strings.Split(strings.TrimSpace(td.Input), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Fields(l)
		if mark != "" {
			mark += "; "
		}
		mark, after = mark+l, 0
		kv := func(k string) (string, bool) {
			for _, a := range f[1:] {
				if kk, v, ok := strings.Cut(a, "="); ok && kk == k {
					return v, true
				}
			}
			return "", false
		}
		num := func(s string) float64 {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				td.Fatalf(t, "%s: bad number %q", l, s)
			}
			return v
		}
		dur := func(s string) float64 {
			d, err := time.ParseDuration(s)
			if err != nil {
				td.Fatalf(t, "%s: bad duration %q", l, s)
			}
			return d.Seconds()
		}
		switch f[0] {
		case "rate":
			j.perActor = num(f[1]) / float64(len(j.lanes))
			runFor(f[2:])
		case "limit":
			j.limit = num(f[1])
			j.hidden = slices.Contains(f, "hidden")
			runFor(f[2:])
		case "churn":
			j.insert = num(f[1])
			j.appendIns = slices.Contains(f, "append")
			j.deletes = 0
			if v, ok := kv("delete"); ok {
				j.deletes = num(v)
			}
			runFor(f[2:])
		case "pauses":
			j.pauseFor, j.pauseEvery = dur(f[1]), 0
			if v, ok := kv("every"); ok {
				j.pauseEvery = dur(v)
			}
			runFor(f[2:])
		case "stall":
			j.stallLeft = dur(f[1])
			end := j.t + dur(f[1])
			for !j.finished && j.t < end-1e-9 {
				observe()
			}
		case "burst":
			over, ok := kv("over")
			if !ok {
				td.Fatalf(t, "%s: burst needs over=", l)
			}
			j.burstLeft = dur(over)
			j.burst = num(f[1]) / j.burstLeft
			runFor(f[2:])
		case "restart":
			down, _ := kv("down")
			a := 0
			if v, ok := kv("actors"); ok {
				a = int(num(v))
			}
			c, _ := kv("count")
			j.restart(dur(down), a, c == "zero")
			observe()
			runFor(f[1:])
		case "finish":
			for !j.finished {
				observe()
				if len(lines) > 1e6 {
					td.Fatalf(t, "the job does not finish")
				}
			}
		default:
			td.Fatalf(t, "unknown phase %q", f[0])
		}
	}
	if !j.finished {
		td.Fatalf(t, "the script must end with the job finished (add finish)")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%8s %7s %8s %7s  %-30s %8s  %s\n", "t", "done", "rows/s", "churn", "forecast", "actual", "")
	for i, l := range lines {
		show := l.after < 6 || i%printEvery == 0 || i >= len(lines)-2
		if !show {
			continue
		}
		if l.mark != "" {
			fmt.Fprintf(&b, "-- %s\n", l.mark)
		}
		actual := j.finishedT - l.obs.Time.Sub(j.base).Seconds()
		in := ""
		if l.fc.Shown() && l.fc.Status != backfill.ETAFinished {
			in = "out"
			if lo, hi := l.fc.Low.Seconds(), l.fc.High.Seconds(); actual >= lo-1e-9 && (l.fc.High == backfill.ETAUnbounded || actual <= hi+1e-9) {
				in = "in"
			}
			rem := l.fc.Remaining.Seconds()
			if l.fc.Remaining != backfill.ETAUnbounded {
				in += fmt.Sprintf(" %+.0f%%", 100*(rem-actual)/math.Max(actual, 1e-9))
			}
		}
		fmt.Fprintf(&b, "%8s %6.2f%% %8.0f %7.0f  %-30s %8s  %s\n",
			fmtSecs(l.obs.Time.Sub(j.base).Seconds()), 100*l.obs.Consumed/math.Max(l.obs.Total, 1),
			l.fc.Rate, noNegZero(l.fc.Churn), l.fc.String(), fmtSecs(math.Max(0, actual)), in)
	}
	return b.String()
}

// etaBase is the origin of the times of observe and replay lines.
var etaBase = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// parseObservation parses an observe or replay line.
func parseObservation(t *testing.T, td *datadriven.TestData, l string) backfill.ETAObservation {
	var o backfill.ETAObservation
	for _, a := range strings.Fields(l) {
		k, v, _ := strings.Cut(a, "=")
		num := func() float64 {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				td.Fatalf(t, "%s: bad number %q", l, v)
			}
			return x
		}
		switch k {
		case "t":
			if v == "zero" {
				o.Time = time.Time{}
				continue
			}
			d, err := time.ParseDuration(v)
			if err != nil {
				td.Fatalf(t, "%s: bad time %q", l, v)
			}
			o.Time = etaBase.Add(d)
		case "run":
			o.Run = uint64(num())
		case "s":
			o.SnapshotRows = uint64(num())
		case "c":
			o.Consumed = num()
		case "lo":
			o.ConsumedLow = num()
		case "hi":
			o.ConsumedHigh = num()
		case "total":
			o.Total = num()
		case "actors":
			o.Actors = int(num())
		case "limit":
			o.RateLimit = num()
		case "finished":
			o.Finished = true
		case "changes":
			for _, c := range strings.Split(v, ",") {
				at, lim, ok := strings.Cut(c, ":")
				a, err1 := strconv.ParseFloat(at, 64)
				r, err2 := strconv.ParseFloat(lim, 64)
				if !ok || err1 != nil || err2 != nil {
					td.Fatalf(t, "%s: a change is PCT:LIMIT, not %q", l, c)
				}
				o.RateChanges = append(o.RateChanges, backfill.RateChange{AtPercent: a, Limit: r})
			}
		case "bg":
			w, busy, ok := strings.Cut(v, "/")
			n, err1 := strconv.ParseInt(w, 10, 64)
			secs, err2 := strconv.ParseFloat(busy, 64)
			if !ok || err1 != nil || err2 != nil {
				td.Fatalf(t, "%s: bg is WRITTEN/BUSY_SECONDS, not %q", l, v)
			}
			o.Background = &backfill.ETABackground{Written: n, Busy: time.Duration(secs * float64(time.Second))}
		case "parts":
			for _, ps := range strings.Split(v, ",") {
				var vals []float64
				var p backfill.ETAFigure
				for _, x := range strings.Split(ps, "/") {
					if x == "f" {
						p.Finished = true
						continue
					}
					y, err := strconv.ParseFloat(x, 64)
					if err != nil {
						td.Fatalf(t, "%s: bad part %q", l, ps)
					}
					vals = append(vals, y)
				}
				if len(vals) != 5 {
					td.Fatalf(t, "%s: a part is s/c/lo/hi/total[/f], not %q", l, ps)
				}
				p.SnapshotRows, p.Consumed, p.ConsumedLow, p.ConsumedHigh, p.Total = uint64(vals[0]), vals[1], vals[2], vals[3], vals[4]
				o.Parts = append(o.Parts, p)
			}
		default:
			td.Fatalf(t, "%s: unknown field %q", l, k)
		}
	}
	return o
}

func runObserve(t *testing.T, td *datadriven.TestData) string {
	e := backfill.NewETA(&backfill.ETAOptions{MinIntervals: etaIntArg(td, "min-intervals", 0)})
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(td.Input), "\n") {
		o := parseObservation(t, td, l)
		fc, err := e.Observe(o)
		if err != nil {
			fmt.Fprintf(&b, "error: %v (ErrETAInput: %t)\n", err, errors.Is(err, backfill.ErrETAInput))
			continue
		}
		fmt.Fprintf(&b, "%s: %s rate=%.0f churn=%.0f ahead=%.0f [%.0f, %.0f]\n", fc.Status, fc,
			fc.Rate, fc.Churn, fc.Ahead, fc.AheadLow, fc.AheadHigh)
	}
	return b.String()
}

// runReplay feeds recorded observations and prints them like sim, with
// the accuracy after 10% progress at the end.
func runReplay(t *testing.T, td *datadriven.TestData) string {
	e := backfill.NewETA(&backfill.ETAOptions{MinIntervals: etaIntArg(td, "min-intervals", 0)})
	printEvery := etaIntArg(td, "print-every", 10)
	var obs []backfill.ETAObservation
	var fcs []backfill.ETAForecast
	var end time.Time
	for _, l := range strings.Split(strings.TrimSpace(td.Input), "\n") {
		if l = strings.TrimSpace(l); l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		o := parseObservation(t, td, l)
		fc, err := e.Observe(o)
		if err != nil {
			td.Fatalf(t, "%s: %v", l, err)
		}
		obs, fcs = append(obs, o), append(fcs, fc)
		if o.Finished && end.IsZero() {
			end = o.Time
		}
	}
	if end.IsZero() {
		td.Fatalf(t, "the recorded job does not finish")
	}
	var b strings.Builder
	var checks []etaCheck
	fmt.Fprintf(&b, "%8s %3s %7s %8s %7s  %-30s %8s  %s\n", "t", "run", "done", "rows/s", "churn", "forecast", "actual", "")
	for i, o := range obs {
		actual := end.Sub(o.Time).Seconds()
		checks = append(checks, etaCheck{progress: o.Consumed / math.Max(o.Total, 1), actual: actual, fc: fcs[i]})
		if i%printEvery != 0 && i < len(obs)-2 && (i == 0 || obs[i-1].Run == o.Run) {
			continue
		}
		in := ""
		if fc := fcs[i]; fc.Shown() {
			in = "out"
			if actual >= fc.Low.Seconds()-1e-9 && (fc.High == backfill.ETAUnbounded || actual <= fc.High.Seconds()+1e-9) {
				in = "in"
			}
			if fc.Remaining != backfill.ETAUnbounded {
				in += fmt.Sprintf(" %+.0f%%", 100*(fc.Remaining.Seconds()-actual)/math.Max(actual, 1e-9))
			}
		}
		fmt.Fprintf(&b, "%8.1fs %3d %6.2f%% %8.0f %7.0f  %-30s %8s  %s\n", o.Time.Sub(etaBase).Seconds(), o.Run,
			100*o.Consumed/math.Max(o.Total, 1), fcs[i].Rate, noNegZero(fcs[i].Churn), fcs[i].String(), fmtSecs(math.Max(0, actual)), in)
	}
	st := etaFigures(checks, func(c etaCheck) bool { return c.progress >= 0.1 })
	fmt.Fprintf(&b, "after 10%%: %d checkpoints, median error %.1f%%, p90 %.1f%%, coverage %.1f%%, never <1m while >5m: %t\n",
		st.n, 100*st.median, 100*st.p90, 100*st.coverage, st.collapsed == 0)
	return b.String()
}

func etaIntArg(td *datadriven.TestData, key string, def int) int {
	return int(floatArgETA(td, key, float64(def)))
}

func floatArgETA(td *datadriven.TestData, key string, def float64) float64 {
	for _, a := range td.CmdArgs {
		if a.Key == key {
			v, err := strconv.ParseFloat(a.Vals[0], 64)
			if err != nil {
				panic(fmt.Sprintf("%s: %v", key, err))
			}
			return v
		}
	}
	return def
}

func durArg(td *datadriven.TestData, key string, def time.Duration) time.Duration {
	for _, a := range td.CmdArgs {
		if a.Key == key {
			d, err := time.ParseDuration(a.Vals[0])
			if err != nil {
				panic(fmt.Sprintf("%s: %v", key, err))
			}
			return d
		}
	}
	return def
}

// noNegZero rounds x to an integer, without a sign for 0.
func noNegZero(x float64) float64 { return math.Round(x) + 0 }

func fmtSecs(s float64) string {
	s = math.Round(s)
	if s < 60 {
		return fmt.Sprintf("%.0fs", s)
	}
	return fmt.Sprintf("%dm%02.0fs", int(s)/60, math.Mod(s, 60))
}

var etaSeedFlag = flag.Uint64("eta-seed", 0, "seed of TestETAAccuracy (0: testutil.DefaultSeed, or time based with -random-seeds)")

// etaEstimator is what TestETAAccuracy measures: an ETA or a PlainETA.
type etaEstimator interface {
	Observe(backfill.ETAObservation) (backfill.ETAForecast, error)
}

// etaEstimators are the estimators TestETAAccuracy runs side by side on
// the same simulated jobs; the goals are asserted on the first.
var etaEstimators = []struct {
	name string
	new  func() etaEstimator
}{
	{"ETA", func() etaEstimator { return backfill.NewETA(nil) }},
	{"PlainETA", func() etaEstimator { return backfill.NewPlainETA(nil) }},
}

// etaScenario is one kind of simulated job: setup draws its parameters and
// returns the events to fire at given true progress, in order.
type etaScenario struct {
	name string
	// goals: the scenario's future resembles its past from its start, so the
	// goals apply to every checkpoint after 10% progress, and not only to
	// those after its last event.
	goals bool
	// noParts: the observations give the whole job's figure only, not the
	// actors' (Parts).
	noParts bool
	setup   func(rng *rand.Rand, j *simJob) []simEvent
}

// simEvent changes the job when its progress reaches at.
type simEvent struct {
	at float64
	do func(j *simJob)
}

// uniform returns a float in [lo, hi).
func uniform(rng *rand.Rand, lo, hi float64) float64 { return lo + (hi-lo)*rng.Float64() }

// skew deals the rows to four actors unevenly: they finish one after the
// other and the job's rate falls with each. With Parts, the ETA is the
// slowest actor's; without, each finish is an event no forecast of the
// whole job foresees (simulate marks them as they happen).
func skew(rng *rand.Rand, j *simJob) []simEvent {
	rows, _ := j.totals()
	j.perActor *= float64(len(j.lanes)) / 4
	j.lanes = make([]simLane, 4)
	var w float64
	ws := make([]float64, 4)
	for i := range ws {
		ws[i] = math.Exp(uniform(rng, 0, math.Log(3)))
		w += ws[i]
	}
	for i := range j.lanes {
		j.lanes[i].ahead = rows * ws[i] / w
	}
	return nil
}

func etaScenarios() []etaScenario {
	churn := func(rng *rand.Rand, j *simJob, appendIns bool) {
		r := j.jobRate()
		j.insert = r * uniform(rng, 0.05, 0.3)
		j.deletes = r * uniform(rng, 0, 0.1)
		j.appendIns = appendIns
	}
	return []etaScenario{
		{name: "steady", goals: true, setup: func(rng *rand.Rand, j *simJob) []simEvent { return nil }},
		{name: "churn-uniform", goals: true, setup: func(rng *rand.Rand, j *simJob) []simEvent {
			churn(rng, j, false)
			return nil
		}},
		{name: "churn-append", goals: true, setup: func(rng *rand.Rand, j *simJob) []simEvent {
			churn(rng, j, true)
			return nil
		}},
		// The machine's share of the job wanders and reverts, as the
		// unlimited jobs of backfill/testdata/eta/recorded-unlimited do
		// (by a third, over about 40 checkpoints, on this 2-core machine
		// under its own compactions: harsher than here, where the goals
		// still hold).
		{name: "wander", goals: true, setup: func(rng *rand.Rand, j *simJob) []simEvent {
			j.wander, j.wanderSteps = uniform(rng, 0.05, 0.25), uniform(rng, 5, 40)
			j.wanderX = rng.NormFloat64()
			return nil
		}},
		{name: "halve-double", setup: func(rng *rand.Rand, j *simJob) []simEvent {
			// A rate limit the job reports, halved then doubled.
			j.limit = j.jobRate() * 0.8
			return []simEvent{
				{uniform(rng, 0.25, 0.45), func(j *simJob) { j.limit /= 2 }},
				{uniform(rng, 0.55, 0.75), func(j *simJob) { j.limit *= 2 }},
			}
		}},
		{name: "halve-double-hidden", setup: func(rng *rand.Rand, j *simJob) []simEvent {
			// The same limit, enforced where the job cannot see it.
			j.limit, j.hidden = j.jobRate()*0.8, true
			return []simEvent{
				{uniform(rng, 0.25, 0.45), func(j *simJob) { j.limit /= 2 }},
				{uniform(rng, 0.55, 0.75), func(j *simJob) { j.limit *= 2 }},
			}
		}},
		{name: "rate-changes", setup: func(rng *rand.Rand, j *simJob) []simEvent {
			var ev []simEvent
			for range 1 + rng.IntN(3) {
				f := math.Exp(uniform(rng, math.Log(0.5), math.Log(2)))
				ev = append(ev, simEvent{uniform(rng, 0.05, 0.9), func(j *simJob) { j.perActor *= f }})
			}
			slices.SortFunc(ev, func(a, b simEvent) int { return cmp.Compare(a.at, b.at) })
			return ev
		}},
		{name: "stalls", setup: func(rng *rand.Rand, j *simJob) []simEvent {
			var ev []simEvent
			for range 1 + rng.IntN(3) {
				d := uniform(rng, 20, 120)
				ev = append(ev, simEvent{uniform(rng, 0.05, 0.95), func(j *simJob) { j.stallLeft = d }})
			}
			slices.SortFunc(ev, func(a, b simEvent) int { return cmp.Compare(a.at, b.at) })
			return ev
		}},
		{name: "restarts", setup: func(rng *rand.Rand, j *simJob) []simEvent {
			var ev []simEvent
			for range 1 + rng.IntN(2) {
				down, zero := uniform(rng, 5, 60), rng.IntN(2) == 0
				ev = append(ev, simEvent{uniform(rng, 0.05, 0.95), func(j *simJob) { j.restart(down, 0, zero) }})
			}
			slices.SortFunc(ev, func(a, b simEvent) int { return cmp.Compare(a.at, b.at) })
			return ev
		}},
		{name: "rescale", setup: func(rng *rand.Rand, j *simJob) []simEvent {
			to := []int{1, 2, 4, 8}[rng.IntN(4)]
			if to == len(j.lanes) {
				to *= 2
			}
			down := uniform(rng, 5, 60)
			return []simEvent{{uniform(rng, 0.1, 0.8), func(j *simJob) { j.restart(down, to, true) }}}
		}},
		{name: "burst", setup: func(rng *rand.Rand, j *simJob) []simEvent {
			churn(rng, j, false)
			a, b := j.totals()
			rows, over := (a+b)*uniform(rng, 0.1, 0.3), burstSecs(rng, j)
			return []simEvent{{uniform(rng, 0.2, 0.7), func(j *simJob) { j.burst, j.burstLeft = rows/over, over }}}
		}},
		{name: "skew", goals: true, setup: skew},
		{name: "skew-no-parts", noParts: true, setup: skew},
		{name: "mixed", setup: func(rng *rand.Rand, j *simJob) []simEvent {
			churn(rng, j, rng.IntN(2) == 0)
			f := math.Exp(uniform(rng, math.Log(0.5), math.Log(2)))
			d := uniform(rng, 20, 120)
			down := uniform(rng, 5, 60)
			a, b := j.totals()
			rows, over := (a+b)*uniform(rng, 0.05, 0.2), burstSecs(rng, j)
			ev := []simEvent{
				{uniform(rng, 0.05, 0.9), func(j *simJob) { j.perActor *= f }},
				{uniform(rng, 0.05, 0.9), func(j *simJob) { j.stallLeft = d }},
				{uniform(rng, 0.05, 0.9), func(j *simJob) { j.restart(down, 0, true) }},
				{uniform(rng, 0.05, 0.9), func(j *simJob) { j.burst, j.burstLeft = rows/over, over }},
			}
			slices.SortFunc(ev, func(a, b simEvent) int { return cmp.Compare(a.at, b.at) })
			return ev
		}},
	}
}

// burstSecs returns how long a burst of inserts lasts: 1% to 8% of the
// job's duration without churn (longer, it is a phase of churn rather than a
// burst, which the ETA follows as such).
func burstSecs(rng *rand.Rand, j *simJob) float64 {
	a, _ := j.totals()
	return a / j.jobRate() * uniform(rng, 0.01, 0.08)
}

// etaCheck is one checkpoint's forecast against the time that remained.
type etaCheck struct {
	progress     float64 // true progress
	actual       float64 // seconds that remained
	fc           backfill.ETAForecast
	afterEvents  bool // no event of the scenario came after this checkpoint
	sinceEventsS float64
	elapsed      float64 // seconds since the job started
	// churnShare is the share of the rows the job read from the checkpoint
	// on that the upstream added ahead of the cursors after it (net of its
	// deletes there): about the share of the time that remained which the
	// churn still to come added, over the time to read the rows ahead had
	// the upstream stopped then.
	churnShare float64
	// churnBound: the job's churnShare at its first checkpoint after 10%
	// and after its last event exceeds etaChurnBound (set on all its
	// checkpoints).
	churnBound bool
	ahead      float64 // rows ahead (truth) at the checkpoint
	churned    float64 // simJob.churned at the checkpoint
}

// simulate runs one job of a scenario and returns its checkpoints, with
// the forecasts of each of etaEstimators.
func simulate(t *testing.T, sc etaScenario, rng *rand.Rand) [][]etaCheck {
	actors := []int{1, 2, 4}[rng.IntN(3)]
	every := []float64{0.5, 1, 2, 5}[rng.IntN(4)]
	checkpoints := uniform(rng, 300, 1200)
	perActor := uniform(rng, 500, 50000)
	rows := perActor * float64(actors) * every * checkpoints
	j := newSimJob(rng, rows, actors, perActor, every)
	j.jitter = uniform(rng, 0, 0.2)
	j.noise = uniform(rng, 0.02, 0.3)
	j.bounds = uniform(rng, 0.001, 0.005)
	j.estNoise = true
	j.parts = !sc.noParts
	events := sc.setup(rng, j)
	ests := make([]etaEstimator, len(etaEstimators))
	for i, e := range etaEstimators {
		ests[i] = e.new()
	}
	out := make([][]etaCheck, len(ests))
	var eventTimes []float64
	active := len(j.lanes)
	for steps := 0; !j.finished; steps++ {
		if steps > 100000 {
			t.Fatalf("%s: the simulated job does not finish", sc.name)
		}
		for len(events) > 0 && j.progress() >= events[0].at {
			events[0].do(j)
			eventTimes = append(eventTimes, j.t)
			events = events[1:]
		}
		stalled, bursting := j.stallLeft > 0, j.burstLeft > 0
		o := j.step()
		if (stalled && j.stallLeft <= 0) || (bursting && j.burstLeft <= 0) {
			// A stall or a burst is known once it ended.
			eventTimes = append(eventTimes, j.t)
		}
		if n := activeLanes(j); n != active && !j.finished && !j.parts {
			// An actor ran out of rows: the rate falls, an event no
			// forecast of the whole job foresees.
			active = n
			eventTimes = append(eventTimes, j.t)
		}
		for i, e := range ests {
			fc, err := e.Observe(o)
			if err != nil {
				t.Fatalf("%s: %s: observe: %v", sc.name, etaEstimators[i].name, err)
			}
			a, _ := j.totals()
			out[i] = append(out[i], etaCheck{progress: j.progress(), fc: fc, actual: j.t, elapsed: j.t, ahead: a, churned: j.churned})
		}
	}
	last := 0.0
	if len(eventTimes) > 0 {
		last = eventTimes[len(eventTimes)-1]
	}
	for _, checks := range out {
		for i := range checks {
			checks[i].sinceEventsS = checks[i].actual - last
			checks[i].afterEvents = checks[i].actual >= last
			checks[i].actual = j.finishedT - checks[i].actual
			if c := &checks[i]; c.ahead > 0 {
				added := j.churned - c.churned
				c.churnShare = added / math.Max(c.ahead+added, 1e-9)
			}
		}
		// The job's churn share is taken where its settled checkpoints
		// start: per checkpoint, the last few before the end would count
		// the churn of a fraction of an interval against the last rows.
		bound := false
		for _, c := range checks {
			if c.progress >= 0.1 && c.afterEvents {
				bound = c.churnShare > etaChurnBound
				break
			}
		}
		for i := range checks {
			checks[i].churnBound = bound
		}
	}
	return out
}

func activeLanes(j *simJob) int {
	n := 0
	for _, l := range j.lanes {
		if l.ahead > 0 {
			n++
		}
	}
	return n
}

// etaStats are the accuracy figures of a set of checkpoints.
type etaStats struct {
	n              int
	median, p90    float64 // of |ETA − actual| / actual
	coverage       float64 // share with Low <= actual <= High
	width          float64 // median of (High − Low) / Remaining
	shown          float64 // share with an ETA shown
	collapsed, neg int     // "<1m" while >5m remained; negative durations (kept or not)
}

func etaFigures(checks []etaCheck, keep func(etaCheck) bool) etaStats {
	var s etaStats
	var errs, widths []float64
	var in, shown int
	for _, c := range checks {
		if !keep(c) {
			continue
		}
		if c.fc.Remaining < 0 || c.fc.Low < 0 || c.fc.High < 0 {
			s.neg++
		}
		if c.fc.Shown() && c.fc.Remaining < time.Minute && c.actual > 300 {
			s.collapsed++
		}
		if c.fc.Status == backfill.ETAFinished || c.actual <= 0 {
			continue
		}
		s.n++
		if !c.fc.Shown() {
			errs = append(errs, math.Inf(1))
			continue
		}
		shown++
		rem := math.Inf(1)
		if c.fc.Remaining != backfill.ETAUnbounded {
			rem = c.fc.Remaining.Seconds()
		}
		errs = append(errs, math.Abs(rem-c.actual)/c.actual)
		widths = append(widths, (c.fc.High.Seconds()-c.fc.Low.Seconds())/math.Max(rem, 1e-9))
		hiOK := c.fc.High == backfill.ETAUnbounded || c.actual <= c.fc.High.Seconds()+1e-9
		if c.actual >= c.fc.Low.Seconds()-1e-9 && hiOK {
			in++
		}
	}
	if s.n == 0 {
		return s
	}
	slices.Sort(errs)
	q := func(p float64) float64 { return errs[min(len(errs)-1, int(p*float64(len(errs))))] }
	s.median, s.p90 = q(0.5), q(0.9)
	s.coverage = float64(in) / float64(s.n)
	s.shown = float64(shown) / float64(s.n)
	if len(widths) > 0 {
		slices.Sort(widths)
		s.width = widths[len(widths)/2]
	}
	return s
}

// etaChurnBound is the share of the time left above which the upstream's
// churn still to come, rather than the rows ahead and the rate, decides
// whether a forecast meets the p90 goal (25%): a forecast that takes the
// churn to stop now and one that takes it to go on to the end differ by
// about that share, and nothing in the past says which the upstream will do
// (the ETA takes the churn to last as long again as it has been seen; see
// eta.go).
const etaChurnBound = 0.25

// etaResult is one scenario's accuracy figures for one estimator.
type etaResult struct {
	sc        etaScenario
	estimator int // index into etaEstimators
	// every: all checkpoints; all: after 10% progress; settled: after 10%
	// and after the job's last event; churn: settled, of the jobs whose
	// churn still to come made more than etaChurnBound of the time left
	// there (etaCheck.churnBound); late: churn, once the churn has been
	// seen for at least twice the time left (the job's last third); held:
	// settled but for churn before late, the checkpoints the goals of a
	// scenario with events hold over.
	every, all, settled, held, churn, late etaStats
}

// etaAccuracy simulates etaJobs() jobs of every scenario, drawn from seed,
// and returns their figures for every estimator.
func etaAccuracy(t *testing.T, seed uint64) []etaResult {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	after10 := func(c etaCheck) bool { return c.progress >= 0.1 }
	settled := func(c etaCheck) bool { return c.progress >= 0.1 && c.afterEvents }
	churn := func(c etaCheck) bool { return settled(c) && c.churnBound }
	late := func(c etaCheck) bool { return churn(c) && c.elapsed >= 2*c.actual }
	held := func(c etaCheck) bool { return settled(c) && (!c.churnBound || late(c)) }
	var out []etaResult
	for _, sc := range etaScenarios() {
		checks := make([][]etaCheck, len(etaEstimators))
		for range etaJobs() {
			for i, c := range simulate(t, sc, rng) {
				checks[i] = append(checks[i], c...)
			}
		}
		for i, cs := range checks {
			out = append(out, etaResult{sc: sc, estimator: i,
				every: etaFigures(cs, func(etaCheck) bool { return true }), all: etaFigures(cs, after10),
				settled: etaFigures(cs, settled), held: etaFigures(cs, held),
				churn: etaFigures(cs, churn), late: etaFigures(cs, late)})
		}
	}
	return out
}

// etaMisses returns the goals r misses, one line each: negative forecasts
// for every estimator, the goals for the first (the others are baselines,
// whose figures are logged). The median, p90 and coverage goals are figures
// over the full sample (24 jobs a scenario): with fewer (the race
// detector's 8), only the invariants are checked.
func etaMisses(r etaResult) []string {
	var miss []string
	if r.every.neg > 0 {
		miss = append(miss, fmt.Sprintf("%s: %s: %d negative forecasts", r.sc.name, etaEstimators[r.estimator].name, r.every.neg))
	}
	if r.estimator > 0 {
		return miss
	}
	collapsed := r.settled
	if r.sc.goals {
		collapsed = r.every
	}
	if collapsed.collapsed > 0 {
		miss = append(miss, fmt.Sprintf("%s: %d forecasts under a minute while more than five minutes remained", r.sc.name, collapsed.collapsed))
	}
	if etaJobs() < 24 {
		return miss
	}
	goal, what := r.held, "after the last event (but before the last third of a job whose churn to come made over a quarter of the time left)"
	if r.sc.goals {
		goal, what = r.all, "after 10%"
	}
	if goal.median > 0.10 || goal.p90 > 0.25 || goal.coverage < 0.80 {
		miss = append(miss, fmt.Sprintf("%s: %s: median %.1f%% (goal <= 10%%), p90 %.1f%% (<= 25%%), coverage %.1f%% (>= 80%%) over %d checkpoints",
			r.sc.name, what, 100*goal.median, 100*goal.p90, 100*goal.coverage, goal.n))
	}
	if r.churn.n > 0 && r.churn.coverage < 0.80 {
		miss = append(miss, fmt.Sprintf("%s: after the last event, in the jobs whose churn to come made over a quarter of the time left: coverage %.1f%% (goal >= 80%%) over %d checkpoints",
			r.sc.name, 100*r.churn.coverage, r.churn.n))
	}
	return miss
}

// TestETAAccuracy simulates jobs of each scenario (simJob: rows ahead, read
// rates that change at random moments or wander for tens of checkpoints at
// a time, upstream churn, stalls, restarts, rescales, bursts, skewed actors)
// and measures the ETA against the time
// that actually remained, after 10% progress: the median and p90 of
// |ETA − actual| / actual, the share of checkpoints whose interval held the
// actual time, the interval's median width (share of the ETA), and the
// forecasts under a minute while more than five minutes remained (at any
// progress). The ETA is never negative. The goals are median <= 10%,
// p90 <= 25%, coverage >= 80%, never under a minute while more than five
// remain:
//
//   - In the scenarios whose future is like their past from the start
//     (steady, churn at up to 30% of the rate, a rate that wanders by 5% to
//     25% and reverts over 5 to 40 checkpoints, skewed actors), over every
//     checkpoint after 10%.
//   - In the others, over the checkpoints after the last event (rate
//     change, the end of a stall or a burst, restart, an actor running out
//     of rows): no forecast foresees an event to come. Except in the jobs
//     where, from there on, the churn still to come makes more than a
//     quarter of the time left (etaChurnBound; in mixed, a rate that
//     halves under steady appends leaves them at half the rate, as with
//     seed 1796336289371491406): there the time left depends on how long
//     the upstream goes on adding rows ahead, which the past does not
//     tell. The simulated upstream never stops, a real one may stop at any
//     time (backfill/testdata/eta/recorded is one that did), and the ETA
//     takes the churn to last as long again as it has been seen, so that
//     early on it forecasts about the time to read the rows ahead plus
//     that much churn. PlainETA, which takes the churn to go on for ever,
//     is right on these jobs and wrong on the recorded one. Over those
//     jobs the interval must hold the actual time (coverage >= 80%); the
//     median, p90 and coverage goals hold over their checkpoints once the
//     churn has been seen for twice the time left (the job's last third,
//     where the error has shrunk), counted with the other jobs'. The
//     never-under-a-minute goal holds over all the checkpoints after the
//     last event.
//
// The median, p90 and coverage goals hold over the full sample only (24
// jobs, not the race detector's 8). make test's seed is fixed
// (testutil.DefaultSeed); -eta-seed takes another.
func TestETAAccuracy(t *testing.T) {
	seed := testutil.Seed(t, "eta-seed", *etaSeedFlag)
	row := func(st etaStats, collapsed int) string {
		return fmt.Sprintf("%6d %6.1f%% %6.1f%% %7.1f%% %5.0f%% %4d", st.n, 100*st.median, 100*st.p90, 100*st.coverage, 100*st.width, collapsed)
	}
	t.Logf("%-30s %-43s | %-43s | %-31s | %s", "", "after 10% (<1m: at any progress)",
		"asserted: after 10% (goals) or after the last event", "after the last event, churn > 1/4", "... in the last third")
	t.Logf("%-20s %-9s %6s %7s %7s %8s %6s %4s | %6s %7s %7s %8s %6s %4s | %6s %7s %7s %8s | %6s %7s %7s", "scenario", "estimator",
		"n", "median", "p90", "coverage", "width", "<1m", "n", "median", "p90", "coverage", "width", "<1m",
		"n", "median", "p90", "coverage", "n", "median", "p90")
	for _, r := range etaAccuracy(t, seed) {
		asserted, collapsed := r.held, r.settled.collapsed
		if r.sc.goals {
			asserted, collapsed = r.all, r.every.collapsed
		}
		t.Logf("%-20s %-9s %s | %s | %6d %6.1f%% %6.1f%% %7.1f%% | %6d %6.1f%% %6.1f%%", r.sc.name, etaEstimators[r.estimator].name,
			row(r.all, r.every.collapsed), row(asserted, collapsed), r.churn.n, 100*r.churn.median, 100*r.churn.p90, 100*r.churn.coverage,
			r.late.n, 100*r.late.median, 100*r.late.p90)
		for _, m := range etaMisses(r) {
			t.Error(m)
		}
	}
}

// BenchmarkETAObserve measures one Observe on a simulated job of 2,000
// checkpoints with churn, without and with a breakdown by actor.
func BenchmarkETAObserve(b *testing.B) {
	for _, parts := range []int{0, 4, 16} {
		b.Run(fmt.Sprintf("parts=%d", parts), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			j := newSimJob(rng, 2000*1000, max(1, parts), 1000/float64(max(1, parts)), 1)
			j.noise, j.bounds, j.estNoise, j.parts = 0.1, 0.003, true, parts > 0
			j.insert, j.deletes = 100, 20
			var obs []backfill.ETAObservation
			for !j.finished {
				obs = append(obs, j.step())
			}
			e := backfill.NewETA(nil)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				k := i % len(obs)
				if k == 0 && i > 0 {
					b.StopTimer()
					e = backfill.NewETA(nil)
					b.StartTimer()
				}
				if _, err := e.Observe(obs[k]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// checkForecast checks the invariants of a forecast.
func checkForecast(t testing.TB, fc backfill.ETAForecast) {
	t.Helper()
	switch fc.Status {
	case backfill.ETAFinished, backfill.ETAWarming:
		if fc.Remaining != 0 || fc.Low != 0 || fc.High != 0 {
			t.Fatalf("%s forecast with durations: %+v", fc.Status, fc)
		}
	case backfill.ETARunning, backfill.ETAStalled, backfill.ETADiverging:
		if fc.Low < 0 || fc.Low > fc.Remaining || fc.Remaining > fc.High {
			t.Fatalf("forecast out of order or negative: %+v", fc)
		}
		if (fc.Status == backfill.ETAStalled) != (fc.StalledFor > 0) {
			t.Fatalf("stalled iff StalledFor: %+v", fc)
		}
	default:
		t.Fatalf("unknown status %d", fc.Status)
	}
	if fc.Rate < 0 || math.IsNaN(fc.Rate) || math.IsNaN(fc.Churn) || math.IsInf(fc.Churn, 0) {
		t.Fatalf("bad rate or churn: %+v", fc)
	}
	r, lo, hi := fc.Seconds()
	if fc.Shown() && (r < 0 || lo < 0 || hi < r || lo > r) {
		t.Fatalf("Seconds %v %v %v of %+v", r, lo, hi, fc)
	}
}

// TestETAReplay feeds the observations of simulated jobs to two ETAs, one of
// them with bad observations in between, and checks that the bad ones are
// refused (ErrETAInput) without changing anything: both give the same
// forecasts, as a process rebuilding its ETA from recorded observations
// needs. Every forecast keeps its invariants.
func TestETAReplay(t *testing.T) {
	seed := testutil.Seed(t, "eta-seed", *etaSeedFlag)
	rng := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	scs := etaScenarios()
	for k := range 8 {
		sc := scs[rng.IntN(len(scs))]
		actors := []int{1, 2, 4}[rng.IntN(3)]
		j := newSimJob(rng, uniform(rng, 1e4, 1e6), actors, uniform(rng, 100, 10000), 1)
		j.noise, j.bounds, j.estNoise, j.parts = 0.2, 0.003, true, k%2 == 0
		events := sc.setup(rng, j)
		// Each estimator twice: one refuses bad observations in between.
		as, bs := make([]etaEstimator, len(etaEstimators)), make([]etaEstimator, len(etaEstimators))
		for i, e := range etaEstimators {
			as[i], bs[i] = e.new(), e.new()
		}
		var last backfill.ETAObservation
		for n := 0; !j.finished; n++ {
			for len(events) > 0 && j.progress() >= events[0].at {
				events[0].do(j)
				events = events[1:]
			}
			o := j.step()
			var bad *backfill.ETAObservation
			if n > 0 && rng.IntN(4) == 0 {
				o := badObservation(rng, last, o)
				bad = &o
			}
			for i, e := range etaEstimators {
				if bad != nil {
					if _, err := bs[i].Observe(*bad); !errors.Is(err, backfill.ErrETAInput) {
						t.Fatalf("%s: %s: a bad observation (%+v after %+v) gave %v", sc.name, e.name, *bad, last, err)
					}
				}
				fa, err := as[i].Observe(o)
				if err != nil {
					t.Fatalf("%s: %s: %v", sc.name, e.name, err)
				}
				fb, err := bs[i].Observe(o)
				if err != nil {
					t.Fatalf("%s: %s: %v", sc.name, e.name, err)
				}
				checkForecast(t, fa)
				if fa != fb {
					t.Fatalf("%s: %s: after a refused observation:\n%+v\n%+v", sc.name, e.name, fb, fa)
				}
			}
			last = o
		}
	}
}

// badObservation returns an observation that breaks one rule, given the
// last good one and the next.
func badObservation(rng *rand.Rand, last, next backfill.ETAObservation) backfill.ETAObservation {
	o := next
	o.Parts = slices.Clone(next.Parts)
	for {
		switch rng.IntN(9) {
		case 0:
			o.Time = time.Time{}
		case 1:
			o.Time = last.Time.Add(-time.Millisecond)
		case 2:
			if last.SnapshotRows == 0 || next.Run != last.Run {
				continue
			}
			o.SnapshotRows = last.SnapshotRows - 1
		case 3:
			o.Consumed = math.NaN()
		case 4:
			o.ConsumedLow = o.ConsumedHigh + 1 + o.Total*1e-6
		case 5:
			o.Total = -1
		case 6:
			if next.Run != last.Run || len(last.Parts) == 0 {
				continue
			}
			o.Parts = o.Parts[:len(o.Parts)-1]
		case 7:
			if !last.Finished {
				continue
			}
			o.Finished = false
		case 8:
			o.Background = &backfill.ETABackground{Written: -1}
		}
		return o
	}
}

// FuzzETAObserve feeds arbitrary observation sequences: the ETA never
// panics, refuses bad ones with ErrETAInput, and keeps its forecasts'
// invariants. make test runs its seeds; go test -fuzz FuzzETAObserve
// explores.
func FuzzETAObserve(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x01\x00\x10\x00\x05\x00\x00\x00\x10\x20\x30\x40\x01\x00\x10\x00\x05\x00\x00\x00\x10\x20\x30\x40"))
	f.Add(bytesOfLen(12*64, 7))
	f.Add(bytesOfLen(12*200, 11))
	f.Fuzz(fuzzETA)
}

func fuzzETA(t *testing.T, data []byte) {
	{
		opts := &backfill.ETAOptions{MinIntervals: 1 + len(data)%5}
		ests := []etaEstimator{backfill.NewETA(opts), backfill.NewPlainETA(opts)}
		at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		var run uint64
		var s uint64
		total, consumed := 1e5, 0.0
		var written int64
		var busy time.Duration
		for len(data) >= 12 {
			c := data[:12]
			data = data[12:]
			at = at.Add(time.Duration(int16(uint16(c[0])|uint16(c[1])<<8)) * time.Millisecond)
			if c[2]&1 != 0 {
				run++
			}
			s += uint64(c[3]) * uint64(1+c[4]&15)
			if c[2]&2 != 0 {
				s = uint64(c[5]) // a count that may fall
			}
			consumed = math.Max(0, consumed+float64(int8(c[6]))*10)
			total = math.Max(0, total+float64(int8(c[7]))*5)
			lo, hi := consumed-float64(c[8]), consumed+float64(c[9])
			if c[2]&4 != 0 {
				lo, hi = math.Max(0, lo), math.Min(total, hi)
			}
			o := backfill.ETAObservation{Time: at, Run: run, Actors: int(c[10] & 7),
				RateLimit: float64(c[11]&0x0f) * 100}
			o.ETAFigure = backfill.ETAFigure{Consumed: math.Min(consumed, total), ConsumedLow: lo,
				ConsumedHigh: hi, Total: total, SnapshotRows: s, Finished: c[2]&8 != 0}
			if n := int(c[11] >> 6); n > 0 {
				for i := range n {
					o.Parts = append(o.Parts, backfill.ETAFigure{Consumed: o.Consumed / float64(n),
						ConsumedLow: lo / float64(n), ConsumedHigh: hi / float64(n), Total: total / float64(n),
						SnapshotRows: s / uint64(n) * uint64(i+1) / uint64(n)})
				}
			}
			if c[2]&32 != 0 {
				// The store's background work, which may fall or be
				// negative.
				written += int64(int8(c[6])) << 16
				busy += time.Duration(int8(c[7])) * 10 * time.Millisecond
				o.Background = &backfill.ETABackground{Written: written, Busy: busy}
			}
			if c[2]&16 != 0 {
				// A scheduled limit, reached or to come.
				o.RateChanges = []backfill.RateChange{{AtPercent: float64(c[8]), Limit: float64(c[9]) * 10}}
			}
			for _, e := range ests {
				fc, err := e.Observe(o)
				if err != nil && !errors.Is(err, backfill.ErrETAInput) {
					t.Fatalf("an error not marked ErrETAInput: %v", err)
				}
				checkForecast(t, fc)
				_ = fc.String()
			}
		}
	}
}

func bytesOfLen(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.IntN(256))
	}
	// Mostly forward in time, mostly the same run, counts that grow.
	for i := 0; i+12 <= n; i += 12 {
		b[i+1] = 0x03
		b[i+2] &^= 3
	}
	return b
}

func TestFormatETA(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"}, {-time.Second, "0s"}, {300 * time.Millisecond, "<1s"}, {time.Second, "1s"},
		{59*time.Second + 900*time.Millisecond, "59s"}, {time.Minute, "1m00s"},
		{3*time.Minute + 9*time.Second + 600*time.Millisecond, "3m10s"}, {59*time.Minute + 59*time.Second, "59m59s"},
		{time.Hour, "1h00m"}, {2*time.Hour + 4*time.Minute + 31*time.Second, "2h05m"},
		{backfill.ETAUnbounded, "∞"},
	} {
		if got := backfill.FormatETA(c.d); got != c.want {
			t.Errorf("FormatETA(%v) = %q, want %q", c.d, got, c.want)
		}
	}
	fc := backfill.ETAForecast{Status: backfill.ETARunning, Remaining: 190 * time.Second, Low: 170 * time.Second, High: 220 * time.Second}
	if got, want := fc.String(), "ETA 3m10s (2m50s–3m40s)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if r, lo, hi := fc.Seconds(); r != 190 || lo != 170 || hi != 220 {
		t.Errorf("Seconds() = %v, %v, %v", r, lo, hi)
	}
	fc = backfill.ETAForecast{Status: backfill.ETADiverging, Remaining: backfill.ETAUnbounded, High: backfill.ETAUnbounded}
	if r, _, hi := fc.Seconds(); !math.IsInf(r, 1) || !math.IsInf(hi, 1) {
		t.Errorf("Seconds() of a diverging forecast = %v, %v", r, hi)
	}
	if r, _, _ := (backfill.ETAForecast{}).Seconds(); !math.IsNaN(r) {
		t.Errorf("Seconds() of a warming forecast = %v, want NaN", r)
	}
}
