package bench

import (
	"runtime"
	"slices"
	"time"

	"github.com/lsmstats/lsmstats/backfill"
)

// threadTimes runs f and returns its wall time and the CPU time of the
// calling thread (its wall time where that clock is unavailable); the
// caller has locked its goroutine to the thread.
func threadTimes(f func()) (wall, cpu time.Duration) {
	cpu0, ok0 := threadCPU()
	start := time.Now()
	f()
	wall = time.Since(start)
	cpu = wall
	if cpu1, ok := threadCPU(); ok && ok0 {
		cpu = cpu1 - cpu0
	}
	return wall, cpu
}

// cpuOf returns f's CPU time: its goroutine is locked to its thread while
// it runs, and the thread's CPU clock read around it (its wall time where
// that clock is unavailable). On a busy machine a call's wall time also
// counts waiting for a core; this does not.
func cpuOf(f func()) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_, cpu := threadTimes(f)
	return cpu
}

// progressTimer times the estimators of a job's checkpoints
// (backfill.JobConfig.OnEstimate) and sets each figure's Time and CPU in
// the checkpoint's record (stamp): the job does not time them itself.
type progressTimer struct {
	spent map[string][2]time.Duration // wall, CPU by approach
}

func newProgressTimer() *progressTimer {
	return &progressTimer{spent: map[string][2]time.Duration{}}
}

// estimate runs one estimator's figure on a thread of its own, measuring
// its wall and CPU time. The thread's CPU clock is read by a system call
// (about 0.4 µs), and the span it measures also holds the wall clock's two
// reads: that span is measured empty first and taken off both times.
func (p *progressTimer) estimate(approach string, estimate func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	floorWall, floorCPU := threadTimes(func() {})
	wall, cpu := threadTimes(estimate)
	p.spent[approach] = [2]time.Duration{max(0, wall-floorWall), max(0, cpu-floorCPU)}
}

// stamp returns r with the times of its figures measured since the last
// stamp; the record's figures are copied, not changed in place (the job
// keeps them as its last record).
func (p *progressTimer) stamp(r backfill.Record) backfill.Record {
	if len(p.spent) == 0 {
		return r
	}
	r.Figures = slices.Clone(r.Figures)
	for i := range r.Figures {
		f := &r.Figures[i]
		if t, ok := p.spent[f.Approach]; ok {
			f.Time, f.CPU = t[0], t[1]
		}
	}
	clear(p.spent)
	return r
}
