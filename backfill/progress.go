package backfill

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/stats"
)

// Input is what an estimator sees at a checkpoint.
type Input struct {
	Epoch uint64
	// Upstream is the job's (first) upstream table, and Upstreams all of
	// them, by index (VnodeState.Upstream); nil Upstreams means the one
	// table Upstream.
	Upstream  uint32
	Upstreams []uint32
	// Vnodes are the states of every vnode of the job, by upstream and
	// vnode.
	Vnodes []VnodeState
	// Owned, if set, are the vnodes of each upstream table the job owns
	// (JobConfig.Vnodes): an estimator's table-wide figures are over these
	// only (RowCountEstimator sums its total key count over them). Nil
	// means every vnode.
	Owned *roaring.Bitmap
	// Stats are the store's statistics at the committed epoch.
	Stats stats.Snapshot
	// Phase, set for a snapshot backfill (ModeSnapshot), says where the
	// job is in its phases and what its log store holds; nil for an
	// arrangement backfill.
	Phase *PhaseInput
}

// PhaseInput is what a snapshot backfill's estimators see beyond the vnode
// states: the phase, the live rows of each upstream table at the pinned
// snapshot epoch (of the job's vnodes), and the log store (its table,
// whose live rows are the rows still to consume but for one account row
// per vnode of the job, and the rows consumed so far).
type PhaseInput struct {
	Phase          Phase
	SnapshotEpoch  uint64
	SnapshotTotals []int64 // by upstream index
	LogTable       uint32
	LogConsumed    uint64
	// The job's vnodes of the log store (nil: all) and the account rows
	// among their live rows.
	logVnodes *roaring.Bitmap
	accounts  int64
}

// logPending returns the log rows still to consume, from the log-store
// table's live statistics of the job's vnodes, less their account rows.
func (p *PhaseInput) logPending(st stats.Snapshot) float64 {
	if p.LogTable == 0 {
		return 0
	}
	var rows int64
	if p.logVnodes != nil {
		rows = st.Live.Sum(p.LogTable, p.logVnodes).Rows
	} else {
		rows = st.Live.Table(p.LogTable).Rows
	}
	return float64(max(0, rows-p.accounts))
}

// Tables returns the ids of the input's upstream tables, by index.
func (in Input) Tables() []uint32 {
	if len(in.Upstreams) == 0 {
		return []uint32{in.Upstream}
	}
	return in.Upstreams
}

// table returns the upstream table of a vnode state.
func (in Input) table(v VnodeState) uint32 {
	if len(in.Upstreams) == 0 {
		return in.Upstream
	}
	return in.Upstreams[v.Upstream]
}

// Estimator turns a checkpoint's input into consumed and total rows.
type Estimator interface {
	Name() string
	Estimate(in Input) (consumed, total float64)
}

// RowCountEstimator is RisingWave's estimator: persisted snapshot row counts over the
// upstream table's physical key count; over several upstream tables, as
// RisingWave sums a job's fragments, Σ row counts over Σ total key counts;
// over a subset of the vnodes (Input.Owned), the key counts of those
// vnodes.
type RowCountEstimator struct{}

// Name implements Estimator.
func (RowCountEstimator) Name() string { return "rowcount" }

// Estimate implements Estimator.
func (RowCountEstimator) Estimate(in Input) (float64, float64) {
	var consumed, total uint64
	for _, v := range in.Vnodes {
		consumed += v.RowCount
	}
	for _, t := range in.Tables() {
		if in.Owned != nil {
			total += in.Stats.Physical.Sum(t, in.Owned).Entries
		} else {
			total += in.Stats.Physical.Table(t).TotalKeyCount
		}
	}
	return float64(consumed), float64(total)
}

// Stats is this project's estimator: live rows behind the cursors over live
// rows of the job's vnodes, from storage statistics only.
type StatsEstimator struct{}

// Name implements Estimator.
func (StatsEstimator) Name() string { return "stats" }

// Estimate implements Estimator.
func (s StatsEstimator) Estimate(in Input) (float64, float64) {
	a := s.Account(in)
	return a.Consumed, a.Total
}

// phased is the stats approach's figure of a snapshot backfill, one figure
// over its phases (docs/design.md §7):
//
//	consumed = snapshot rows read + log rows consumed
//	total    = live rows of the snapshot + log rows consumed + log rows still to consume
//
// The snapshot is fixed (the pinned epoch), so the rows read from it are
// exactly its rows behind the cursors, and its live rows were the
// statistics' at that epoch; the rows still to consume are the log-store
// table's live rows. The bounds are the figure itself: every input is a
// count, none an estimate.
func phased(in Input) Account {
	ph := in.Phase
	var a Account
	for _, v := range in.Vnodes {
		a.Consumed += float64(v.RowCount)
	}
	for _, n := range ph.SnapshotTotals {
		a.Total += float64(n)
	}
	// A vnode finished holds all its snapshot rows: a total below the rows
	// read (live statistics flagged as estimated) would pass 100%.
	a.Total = max(a.Total, a.Consumed)
	a.Consumed += float64(ph.LogConsumed)
	a.Total += float64(ph.LogConsumed) + ph.logPending(in.Stats)
	a.Lower, a.Upper = a.Consumed, a.Consumed
	return a
}

// Account implements Accountant: a vnode's consumed rows are its live rows
// if finished, the estimated live rows <= its cursor if in progress, 0 if
// not started. The vnodes in progress are asked together
// (stats.Snapshot.AppendEstimates), which overlaps the cache misses of their
// searches; each asks the rows up to its cursor inclusive, which the
// statistics estimate as what it is, the pk of a row the backfill read.
// The consumed rows add the vnodes' unbiased estimates (RowEstimate.Mean),
// whose errors cancel over vnodes; the bounds add theirs.
//
// Over several upstream tables, the vnodes of each table are asked
// together, and the figure is Σ consumed over Σ live rows of every table:
// each table weighs as its rows do.
func (StatsEstimator) Account(in Input) Account {
	if in.Phase != nil {
		return phased(in)
	}
	a := Account{Vnodes: make([]VnodeEstimate, len(in.Vnodes))}
	qs := make([]stats.RangeQuery, 0, len(in.Vnodes))
	at := make([]int, 0, len(in.Vnodes)) // index in in.Vnodes of each query
	var es []stats.RowEstimate
	for u, t := range in.Tables() {
		qs, at = qs[:0], at[:0]
		for i, v := range in.Vnodes {
			if v.Upstream == u && v.inProgress() {
				qs = append(qs, stats.RangeQuery{Vnode: v.Vnode, Hi: v.Cursor, HiInclusive: true})
				at = append(at, i)
			}
		}
		if len(qs) == 0 {
			continue
		}
		es = in.Stats.AppendEstimates(es[:0], t, qs)
		for j, e := range es {
			a.Vnodes[at[j]] = VnodeEstimate{Consumed: e.Mean, Lower: float64(e.Lower), Upper: float64(e.Upper)}
		}
	}
	for i, v := range in.Vnodes {
		ve := &a.Vnodes[i]
		ve.Total = float64(max(0, in.Stats.Live.Vnode(in.table(v), v.Vnode).Rows))
		if v.Finished {
			ve.Consumed, ve.Lower, ve.Upper = ve.Total, ve.Total, ve.Total
		}
		a.Consumed += ve.Consumed
		a.Lower += ve.Lower
		a.Upper += ve.Upper
		a.Total += ve.Total
	}
	return a
}

// An Accountant is an Estimator that also accounts for every vnode and
// bounds its figure. The tracker asks it instead of Estimate.
type Accountant interface {
	Estimator
	Account(in Input) Account
}

// Account is an Accountant's figure at a checkpoint, in rows.
type Account struct {
	Consumed, Total float64
	// Lower and Upper bound the consumed rows: the truth lies between them
	// whenever the statistics are exact.
	Lower, Upper float64
	// Vnodes are the accounts of the vnodes, by index of Input.Vnodes.
	Vnodes []VnodeEstimate
}

// VnodeEstimate is the account of one vnode, in rows.
type VnodeEstimate struct {
	Consumed float64 `json:"consumed"`
	Lower    float64 `json:"lower"`
	Upper    float64 `json:"upper"`
	Total    float64 `json:"total"`
}

// Figure is one approach's progress at a checkpoint. The JSON form is the
// lsmstats CLI's worker protocol.
type Figure struct {
	Approach string `json:"approach"`
	// Consumed and Total are the estimator's raw numbers, before any
	// display rule; Raw is 100*Consumed/Total (100 when Total is 0). The
	// figures of several jobs over disjoint vnodes of the same tables (a
	// job's parts, JobConfig.Vnodes) add up exactly: Σ Consumed over
	// Σ Total, the bounds Σ Bounds.LowerRows and Σ Bounds.UpperRows.
	Consumed float64 `json:"consumed"`
	Total    float64 `json:"total"`
	Raw      float64 `json:"raw"`
	// Pct, Shown are what the tracker displays (high-water mark applied).
	Pct   float64 `json:"pct"`
	Shown string  `json:"shown"`
	// Bounds, if the estimator gives them (an Accountant), bound the truth
	// in percent. They are the current figure's, not the high-water mark's:
	// a figure held up by the display rules can lie above them.
	Bounds *Bounds `json:"bounds,omitempty"`
	// Time and CPU are the wall and CPU time the estimator took, as the
	// caller measured them around it (JobConfig.OnEstimate; bench times
	// the thread the estimator runs on): the tracker itself leaves them
	// zero. On a busy machine the wall time also counts the time the
	// estimator waited for a core; CPU is its cost.
	Time time.Duration `json:"time_ns"`
	CPU  time.Duration `json:"cpu_ns"`
}

// Bounds are a figure's lower and upper bounds, in percent, and in rows:
// LowerRows and UpperRows are the sums of the vnodes' bounds on their
// consumed rows, which a caller adds up over several jobs' figures (the
// parts of one job over several stores) as it adds Consumed and Total.
type Bounds struct {
	Lower     float64 `json:"lower"`
	Upper     float64 `json:"upper"`
	LowerRows float64 `json:"lower_rows"`
	UpperRows float64 `json:"upper_rows"`
}

// FigureOf returns the figure of an approach among figs (an empty figure of
// that approach if there is none).
func FigureOf(figs []Figure, approach string) Figure {
	for _, f := range figs {
		if f.Approach == approach {
			return f
		}
	}
	return Figure{Approach: approach}
}

// Progress is the job's progress at one checkpoint.
type Progress struct {
	Epoch    uint64
	Finished bool
	Figures  []Figure
	Vnodes   []VnodeState
	// Estimates are the account of each vnode (by index of Vnodes) of the
	// first Accountant among the estimators; nil without one.
	Estimates []VnodeEstimate
	// VnodesFinished is set when every vnode finished its snapshot; a
	// snapshot backfill has Finished only once it also joined the
	// upstream.
	VnodesFinished bool
	// Upstreams are the figures of each upstream table alone, by index:
	// raw figures (Consumed, Total, Raw, Bounds), shown beside the job's,
	// with no display rule of their own (Pct is Raw within 0 and 100).
	Upstreams []UpstreamProgress
}

// UpstreamProgress is the progress of one upstream table of a job.
type UpstreamProgress struct {
	Table uint32 `json:"table"`
	// Finished is set when every vnode of the table finished.
	Finished bool     `json:"finished"`
	Figures  []Figure `json:"figures"`
	// Truth is the table's truth in percent, as JobConfig.Score set it
	// (-1 without).
	Truth float64 `json:"truth"`
}

// ErrEpochOrder is a progress report whose epoch does not increase.
var ErrEpochOrder = errors.New("lsmstats/backfill: progress epochs must increase")

// ProgressTracker aggregates the reports of a job's actors (the meta side). Safe
// for concurrent use.
type ProgressTracker struct {
	upstreams  []uint32
	estimators []Estimator
	// around, if set, runs each estimator's figure (JobConfig.OnEstimate).
	around func(approach string, estimate func())
	// owned, if set, are the job's vnodes (JobConfig.Vnodes; Input.Owned).
	owned *roaring.Bitmap

	mu      sync.Mutex
	reports map[int]*report
	hwm     map[string]Figure
}

type report struct {
	epoch    uint64
	states   []VnodeState
	finished bool
}

// NewProgressTracker returns a tracker for a job reading upstream, with the given
// estimators (at least one).
func NewProgressTracker(upstream uint32, estimators ...Estimator) *ProgressTracker {
	return NewProgressTrackerOf([]uint32{upstream}, estimators...)
}

// NewProgressTrackerOf returns a tracker for a job reading several upstream tables
// (VnodeState.Upstream indexes them), with the given estimators.
func NewProgressTrackerOf(upstreams []uint32, estimators ...Estimator) *ProgressTracker {
	return &ProgressTracker{upstreams: slices.Clone(upstreams), estimators: estimators, reports: map[int]*report{}, hwm: map[string]Figure{}}
}

// Restore sets the persisted high-water marks (after a restart).
func (t *ProgressTracker) Restore(hwm []Figure) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, f := range hwm {
		t.hwm[f.Approach] = f
	}
}

// HighWater returns the displayed high-water marks, to persist.
func (t *ProgressTracker) HighWater() []Figure {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Figure, 0, len(t.estimators))
	for _, e := range t.estimators {
		if f, ok := t.hwm[e.Name()]; ok {
			out = append(out, f)
		}
	}
	return out
}

// Reporter is one actor's progress reporter.
type Reporter struct {
	t     *ProgressTracker
	actor int
}

// Reporter returns the reporter of an actor; an actor restarted under the
// same id continues its report.
func (t *ProgressTracker) Reporter(actor int) *Reporter {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.reports[actor]; !ok {
		t.reports[actor] = &report{}
	}
	return &Reporter{t: t, actor: actor}
}

// Update reports the actor's vnode states at epoch.
func (r *Reporter) Update(epoch uint64, states []VnodeState) error {
	return r.t.record(r.actor, epoch, states, false)
}

// Finish reports that all the actor's vnodes finished at epoch. Further
// reports keep it finished.
func (r *Reporter) Finish(epoch uint64, states []VnodeState) error {
	return r.t.record(r.actor, epoch, states, true)
}

func (t *ProgressTracker) record(actor int, epoch uint64, states []VnodeState, finished bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	rep := t.reports[actor]
	if rep == nil {
		return errors.Newf("lsmstats/backfill: report of unknown actor %d", actor)
	}
	if epoch <= rep.epoch {
		return errors.Wrapf(ErrEpochOrder, "actor %d reported epoch %d after %d", actor, epoch, rep.epoch)
	}
	rep.epoch, rep.finished = epoch, rep.finished || finished
	// Deep copy: the actor keeps advancing its cursors in place.
	rep.states = make([]VnodeState, len(states))
	for i, s := range states {
		rep.states[i] = s
		rep.states[i].Cursor = slices.Clone(s.Cursor)
	}
	return nil
}

// Progress computes the job's figures at a checkpoint epoch, which every
// actor must have reported, from the store's statistics.
func (t *ProgressTracker) Progress(epoch uint64, st stats.Snapshot) (Progress, error) {
	return t.PhaseProgress(epoch, st, nil)
}

// PhaseProgress is Progress for a snapshot backfill, in the phase ph says
// (nil: an arrangement backfill): the job finished only once every vnode
// finished and it joined the upstream.
func (t *ProgressTracker) PhaseProgress(epoch uint64, st stats.Snapshot, ph *PhaseInput) (Progress, error) {
	return t.progressAt(nil, epoch, st, ph)
}

// reportsAt is the actors' reports as they stand: copies that later
// reports leave alone (a report's states are never changed, only
// replaced), for the figures of a checkpoint whose commit ends after the
// actors reported the next barrier (Job's pipelined commits).
type reportsAt map[int]*report

func (t *ProgressTracker) freeze() reportsAt {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(reportsAt, len(t.reports))
	for id, rep := range t.reports {
		c := *rep
		out[id] = &c
	}
	return out
}

// finished reports whether every actor reported all its vnodes finished.
func (r reportsAt) finished() bool {
	for _, rep := range r {
		if !rep.finished {
			return false
		}
	}
	return len(r) > 0
}

// progressAt is PhaseProgress from reports frozen earlier (nil: the
// reports as they stand).
func (t *ProgressTracker) progressAt(reports reportsAt, epoch uint64, st stats.Snapshot, ph *PhaseInput) (Progress, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if reports == nil {
		reports = t.reports
	}
	p := Progress{Epoch: epoch, Finished: len(reports) > 0}
	for id, rep := range reports {
		if rep.epoch != epoch {
			return p, errors.Newf("lsmstats/backfill: progress at epoch %d: actor %d last reported epoch %d", epoch, id, rep.epoch)
		}
		p.Finished = p.Finished && rep.finished
		p.Vnodes = append(p.Vnodes, rep.states...)
	}
	slices.SortFunc(p.Vnodes, func(a, b VnodeState) int {
		return cmp.Or(cmp.Compare(a.Upstream, b.Upstream), cmp.Compare(a.Vnode, b.Vnode))
	})
	for _, v := range p.Vnodes {
		if v.Upstream < 0 || v.Upstream >= len(t.upstreams) {
			return p, errors.Newf("lsmstats/backfill: progress at epoch %d: vnode %d of upstream %d, job of %d upstreams",
				epoch, v.Vnode, v.Upstream, len(t.upstreams))
		}
	}
	if ph != nil {
		p.VnodesFinished = p.Finished
		p.Finished = p.Finished && ph.Phase == PhaseJoined
	}
	in := Input{Epoch: epoch, Upstream: t.upstreams[0], Upstreams: t.upstreams, Vnodes: p.Vnodes, Owned: t.owned, Stats: st, Phase: ph}
	p.Upstreams = make([]UpstreamProgress, len(t.upstreams))
	for u := range p.Upstreams {
		p.Upstreams[u] = UpstreamProgress{Table: t.upstreams[u], Finished: true, Truth: -1}
	}
	for _, v := range p.Vnodes {
		p.Upstreams[v.Upstream].Finished = p.Upstreams[v.Upstream].Finished && v.Finished
	}
	if ph == nil {
		p.VnodesFinished = p.Finished
	}
	for _, e := range t.estimators {
		var a Account
		var bounded bool
		estimate := func() {
			if ac, ok := e.(Accountant); ok {
				a, bounded = ac.Account(in), true
			} else {
				a.Consumed, a.Total = e.Estimate(in)
			}
		}
		if t.around != nil {
			t.around(e.Name(), estimate)
		} else {
			estimate()
		}
		f := Figure{Approach: e.Name(), Consumed: a.Consumed, Total: a.Total, Raw: percent(a.Consumed, a.Total)}
		if bounded {
			f.Bounds = &Bounds{Lower: percent(a.Lower, a.Total), Upper: percent(a.Upper, a.Total), LowerRows: a.Lower, UpperRows: a.Upper}
			if p.Estimates == nil && len(a.Vnodes) == len(p.Vnodes) {
				p.Estimates = a.Vnodes
			}
		}
		t.display(&f, p.Finished)
		p.Figures = append(p.Figures, f)
		t.upstreamFigures(&p, in, e, a, bounded, f)
	}
	return p, nil
}

// upstreamFigures adds an estimator's figure of each upstream table to p:
// an Accountant's is the sum of its vnodes' accounts, another estimator is
// asked about each table's vnodes alone. With one upstream, the job's
// figure is the table's.
func (t *ProgressTracker) upstreamFigures(p *Progress, in Input, e Estimator, a Account, bounded bool, job Figure) {
	raw := func(consumed, total float64) Figure {
		f := Figure{Approach: e.Name(), Consumed: consumed, Total: total, Raw: percent(consumed, total)}
		f.Pct = min(max(f.Raw, 0), 100)
		return f
	}
	if len(p.Upstreams) == 1 && in.Phase == nil {
		f := raw(job.Consumed, job.Total)
		f.Bounds = job.Bounds
		p.Upstreams[0].Figures = append(p.Upstreams[0].Figures, f)
		return
	}
	for u := range p.Upstreams {
		var f Figure
		if bounded && a.Vnodes != nil && len(a.Vnodes) == len(in.Vnodes) {
			var c, lo, hi, tot float64
			for i, v := range in.Vnodes {
				if v.Upstream == u {
					ve := a.Vnodes[i]
					c, lo, hi, tot = c+ve.Consumed, lo+ve.Lower, hi+ve.Upper, tot+ve.Total
				}
			}
			f = raw(c, tot)
			f.Bounds = &Bounds{Lower: percent(lo, tot), Upper: percent(hi, tot), LowerRows: lo, UpperRows: hi}
		} else {
			sub := Input{Epoch: in.Epoch, Upstream: in.Upstreams[u], Upstreams: in.Upstreams[u : u+1], Owned: in.Owned, Stats: in.Stats}
			if ph := in.Phase; ph != nil {
				// A table's own figure is its snapshot's: the log store
				// holds every table's changes together.
				sub.Phase = &PhaseInput{Phase: ph.Phase, SnapshotEpoch: ph.SnapshotEpoch, SnapshotTotals: ph.SnapshotTotals[u : u+1]}
			}
			for _, v := range in.Vnodes {
				if v.Upstream == u {
					v.Upstream = 0
					sub.Vnodes = append(sub.Vnodes, v)
				}
			}
			f = raw(e.Estimate(sub))
		}
		p.Upstreams[u].Figures = append(p.Upstreams[u].Figures, f)
	}
}

// maxUnfinished is the largest figure shown before the job finished.
const maxUnfinished = 99.99

// display applies the display rules and the high-water mark.
func (t *ProgressTracker) display(f *Figure, finished bool) {
	shownC, shownT := f.Consumed, f.Total
	switch {
	case finished:
		f.Pct = 100
		shownC = shownT
	default:
		// An estimate may stray past its range by about a row (the
		// unbiased sum of the vnodes' estimates): what is shown stays
		// within 0 and the total.
		f.Pct = min(max(math.Floor(f.Raw*100)/100, 0), maxUnfinished)
		shownC = min(max(shownC, 0), shownT)
		if h, ok := t.hwm[f.Approach]; ok && h.Pct > f.Pct && h.Pct < 100 {
			f.Pct, shownC, shownT = h.Pct, h.Consumed, h.Total
		}
	}
	var bounds string
	if b := f.Bounds; b != nil && !finished {
		// Rounded outwards, so that the printed bounds still hold the
		// truth; a finished job's figure is exact.
		bounds = fmt.Sprintf(" [%.2f–%.2f]", math.Floor(b.Lower*100)/100, math.Ceil(b.Upper*100)/100)
	}
	f.Shown = fmt.Sprintf("%.2f%%%s (%d/%d)", f.Pct, bounds, int64(math.Round(shownC)), int64(math.Round(shownT)))
	t.hwm[f.Approach] = Figure{Approach: f.Approach, Pct: f.Pct, Consumed: shownC, Total: shownT}
}

func percent(consumed, total float64) float64 {
	if total <= 0 {
		return 100
	}
	return 100 * consumed / total
}
