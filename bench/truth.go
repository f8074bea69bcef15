package bench

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/lsm"
)

// TruthMode says how a run computes the truth of its checkpoints
// (docs/design.md §7), which the job itself does not know.
type TruthMode uint8

const (
	// TruthInline scores each checkpoint in the job's step
	// (backfill.JobConfig.Score): the records carry their truth as the job
	// hands them on, and the scoring's time is the harness's, taken out of
	// the run's times (Summary.Harness) but not out of its path.
	TruthInline TruthMode = iota
	// TruthConcurrent scores each checkpoint on a goroutine of its own, so
	// that the job's steps never wait for it: from a copy of the workload's
	// model (workload.Counts) that follows the source's ops, or, for a
	// snapshot backfill, by scans of snapshots pinned at the checkpoint
	// (a scan that falls behind skips to the latest checkpoint:
	// Summary.Truth counts the skipped ones). The records the job hands on
	// (OnCheckpoint) carry no truth (-1); Config.OnTruth gets each truth
	// when it is ready, and the Summary's records carry them all. A user's
	// job (Config.User), whose oracle answers for the latest epoch only,
	// cannot: Run returns an error.
	TruthConcurrent
	// TruthOff computes no truth: every record's is -1, and the Summary
	// has no errors.
	TruthOff
)

// String returns "inline", "concurrent" or "off".
func (m TruthMode) String() string {
	switch m {
	case TruthInline:
		return "inline"
	case TruthConcurrent:
		return "concurrent"
	case TruthOff:
		return "off"
	}
	return "TruthMode(?)"
}

// TruthResult is the truth of one checkpoint record, computed apart
// (TruthConcurrent): the record is the one with the same Barrier, Epoch
// and Reopened.
type TruthResult struct {
	Barrier, Epoch uint64
	Reopened       bool
	// Truth, Upstreams (each upstream table's truth, by index),
	// VnodeErrMean and VnodeErrMax are what backfilltest.Truth sets in a
	// record.
	Truth                     float64
	Upstreams                 []float64
	VnodeErrMean, VnodeErrMax float64
	// Time and CPU are the wall and CPU time of the scoring, and SoFar
	// the run's cost of the truth up to this one (it included).
	Time, CPU time.Duration
	SoFar     TruthCost
}

// apply sets the result's truth in r.
func (t TruthResult) apply(r *backfill.Record) {
	r.Truth, r.VnodeErrMean, r.VnodeErrMax = t.Truth, t.VnodeErrMean, t.VnodeErrMax
	if len(t.Upstreams) == len(r.Upstreams) {
		r.Upstreams = slices.Clone(r.Upstreams)
		for u := range r.Upstreams {
			r.Upstreams[u].Truth = t.Upstreams[u]
		}
	}
}

// matches reports whether the result is r's.
func (t TruthResult) matches(r backfill.Record) bool {
	return t.Barrier == r.Barrier && t.Epoch == r.Epoch && t.Reopened == r.Reopened
}

// TruthCost is what computing the truth cost a run: the checkpoints
// scored and skipped (TruthConcurrent, a scan behind the job), and the
// wall and CPU time it took (TruthConcurrent: on its own goroutine, the
// ops applied to the model's copy included; TruthInline: in the job's
// steps, counted in Summary.Harness too).
type TruthCost struct {
	Scored, Skipped int
	Time, CPU       time.Duration
}

// truthTally accumulates a run's TruthCost across its sessions; the
// scorers add to it from their goroutines.
type truthTally struct {
	scored, skipped atomic.Int64
	wall, cpu       atomic.Int64 // nanoseconds
	mu              sync.Mutex
	results         []TruthResult
}

func (t *truthTally) cost() TruthCost {
	return TruthCost{Scored: int(t.scored.Load()), Skipped: int(t.skipped.Load()),
		Time: time.Duration(t.wall.Load()), CPU: time.Duration(t.cpu.Load())}
}

// add counts a piece of work of the scorer's.
func (t *truthTally) add(wall, cpu time.Duration) {
	t.wall.Add(int64(wall))
	t.cpu.Add(int64(cpu))
}

// fill sets the truth of each record of records that has a result.
func (t *truthTally) fill(records []backfill.Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, res := range t.results {
		for i := len(records) - 1; i >= 0; i-- {
			if res.matches(records[i]) {
				res.apply(&records[i])
				break
			}
		}
	}
}

// countOp is an upstream op that changes the live rows: an insert or a
// delete of a workload's row.
type countOp struct {
	upstream int
	vnode    uint16
	id       int32
	insert   bool
}

// truthTask is one piece of a scorer's work: the ops of a step, or a
// checkpoint to score (with the snapshots pinned for it, for a scan).
type truthTask struct {
	step uint64 // the step of ops
	ops  []countOp
	rec  *backfill.Record
	pins []*lsm.Snapshot // per upstream table, then the log store's
}

func (t *truthTask) release() {
	for _, p := range t.pins {
		p.Close()
	}
	t.pins = nil
}

// truthScorer computes a session's truths on a goroutine of its own
// (TruthConcurrent). The job's goroutine calls observe (each step's ops)
// and score (each checkpoint, from JobConfig.Score); close waits for the
// work queued and stops the goroutine.
type truthScorer struct {
	gens     []*workload.Generator // the model's, nil for a scan
	counts   []*workload.Counts    // copied at the first score
	store    *lsm.Store
	tables   []uint32 // a scan's upstream tables, by index
	logStore uint32   // a snapshot backfill's log store
	tally    *truthTally
	onTruth  func(TruthResult)

	mu     sync.Mutex
	queue  []*truthTask
	held   *truthTask // the last step's ops, until hold or score queues them
	closed bool
	err    error // the first error of the goroutine
	wake   chan struct{}
	done   chan struct{}
}

func newTruthScorer(gens []*workload.Generator, store *lsm.Store, tables []uint32, logStore uint32,
	tally *truthTally, onTruth func(TruthResult)) *truthScorer {
	s := &truthScorer{gens: gens, store: store, tables: tables, logStore: logStore, tally: tally, onTruth: onTruth,
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	go s.loop()
	return s
}

// scan reports whether the scorer scans pinned snapshots (a snapshot
// backfill) rather than following the model.
func (s *truthScorer) scan() bool { return s.gens == nil }

func (s *truthScorer) push(t *truthTask) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		t.release()
		return
	}
	if t.rec != nil && s.scan() {
		// A scan behind the job skips to the latest checkpoint: the ones
		// still waiting are dropped.
		kept := s.queue[:0]
		for _, q := range s.queue {
			if q.rec != nil {
				q.release()
				s.tally.skipped.Add(1)
				continue
			}
			kept = append(kept, q)
		}
		s.queue = kept
	}
	s.queue = append(s.queue, t)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// prime copies the model's counts, if not yet copied: the source calls it
// before it gives the backfill's steps, so that the copy is at the step
// before them whatever step the first score is of.
func (s *truthScorer) prime() {
	if s.scan() || s.counts != nil {
		return
	}
	start := time.Now()
	cpu := cpuOf(func() {
		for _, g := range s.gens {
			s.counts = append(s.counts, g.Counts())
		}
	})
	s.tally.add(time.Since(start), cpu)
}

// observe queues the live-row changes of a step's ops for the model's
// copy, once it exists (before the first score, the copy taken then holds
// them). They wait in held for the next step or score: a job whose
// commits pipeline (backfill.JobConfig.ScoreLate) scores a checkpoint
// after the source gave the next step, and its truth is of the model
// before that step's ops.
func (s *truthScorer) observe(step uint64, ops []backfill.RowOp) {
	if s.scan() || s.counts == nil {
		return
	}
	var out []countOp
	for _, op := range ops {
		if op.Kind != backfill.Insert && op.Kind != backfill.Delete {
			continue
		}
		id, ok := workload.RowID(op.Row)
		if !ok {
			id = -1 // Apply says what is wrong
		}
		out = append(out, countOp{upstream: op.Upstream, vnode: op.Vnode, id: id, insert: op.Kind == backfill.Insert})
	}
	if len(out) > 0 {
		s.hold(&truthTask{step: step, ops: out})
	}
}

// swapHeld holds t (nil: nothing) and returns the ops it held before.
func (s *truthScorer) swapHeld(t *truthTask) *truthTask {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.held
	s.held = t
	return prev
}

// hold keeps t, a step's ops, and queues the ops it kept before.
func (s *truthScorer) hold(t *truthTask) {
	if prev := s.swapHeld(t); prev != nil {
		s.push(prev)
	}
}

// queueScore queues a record's task r with the ops held: those of a later
// step than the record's after it, others before it.
func (s *truthScorer) queueScore(r *truthTask) {
	switch h := s.swapHeld(nil); {
	case h == nil:
		s.push(r)
	case h.step > r.rec.Step:
		s.push(r)
		s.push(h)
	default:
		s.push(h)
		s.push(r)
	}
}

// score queues a checkpoint's record (from JobConfig.Score; reopened for
// the figure of a job reopened from the store, which the job marks so
// only after its score): a copy of the model's counts is taken at the
// first (the model is then at the record's step), and a scan pins the
// epochs it reads.
func (s *truthScorer) score(rec *backfill.Record, reopened bool) error {
	t := &truthTask{rec: new(backfill.Record)}
	*t.rec = *rec // its Vnodes and Estimates are the record's own, never changed
	t.rec.Reopened = reopened
	if s.scan() {
		at := rec.Epoch
		if rec.Phase != "" {
			at = rec.SnapshotEpoch
		}
		for range s.tables {
			p, err := s.store.Pin(at)
			if err != nil {
				t.release()
				return errors.Wrapf(err, "bench: the truth's snapshot of barrier %d", rec.Barrier)
			}
			t.pins = append(t.pins, p)
		}
		if rec.Phase != "" {
			p, err := s.store.Pin(rec.Epoch)
			if err != nil {
				t.release()
				return errors.Wrapf(err, "bench: the truth's snapshot of barrier %d", rec.Barrier)
			}
			t.pins = append(t.pins, p)
		}
	} else {
		s.prime() // a reopened job's first figure comes before any step
	}
	s.queueScore(t)
	return nil
}

// loop runs the queued work in order until close.
func (s *truthScorer) loop() {
	defer close(s.done)
	for {
		s.mu.Lock()
		if len(s.queue) == 0 {
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return
			}
			<-s.wake
			continue
		}
		t := s.queue[0]
		s.queue = s.queue[1:]
		failed := s.err != nil
		s.mu.Unlock()
		if failed {
			t.release()
			continue
		}
		if err := s.run(t); err != nil {
			s.mu.Lock()
			if s.err == nil {
				s.err = err
			}
			s.mu.Unlock()
		}
	}
}

// run does one task.
func (s *truthScorer) run(t *truthTask) error {
	defer t.release()
	var err error
	var res TruthResult
	start := time.Now()
	cpu := cpuOf(func() {
		if t.rec == nil {
			for _, op := range t.ops {
				if op.upstream < 0 || op.upstream >= len(s.counts) {
					err = errors.Newf("bench: an op of upstream %d, %d tables", op.upstream, len(s.counts))
					return
				}
				if err = s.counts[op.upstream].Apply(op.insert, op.vnode, op.id); err != nil {
					return
				}
			}
			return
		}
		res, err = s.truthOf(t)
	})
	wall := time.Since(start)
	s.tally.add(wall, cpu)
	if err != nil || t.rec == nil {
		return err
	}
	res.Time, res.CPU = wall, cpu
	s.tally.scored.Add(1)
	res.SoFar = s.tally.cost()
	s.tally.mu.Lock()
	s.tally.results = append(s.tally.results, res)
	s.tally.mu.Unlock()
	if s.onTruth != nil {
		s.onTruth(res)
	}
	return nil
}

// truthOf scores a checkpoint (backfilltest.Truth) with the model's copy,
// or with scans of the snapshots pinned for it.
func (s *truthScorer) truthOf(t *truthTask) (TruthResult, error) {
	rec := t.rec
	rec.Upstreams = slices.Clone(rec.Upstreams)
	var truth backfilltest.Truth
	if s.scan() {
		for i, table := range s.tables {
			truth.Oracles = append(truth.Oracles, backfilltest.ScanOracle{Table: table, Snapshot: t.pins[i]})
		}
		truth.LogStore = s.logStore
		if len(t.pins) > len(s.tables) {
			truth.LogSnapshot = t.pins[len(s.tables)]
		}
	} else {
		for _, c := range s.counts {
			truth.Oracles = append(truth.Oracles, countsOracle{c})
		}
	}
	if err := truth.Score(context.Background(), rec); err != nil {
		return TruthResult{}, errors.Wrapf(err, "bench: the truth of barrier %d", rec.Barrier)
	}
	res := TruthResult{Barrier: rec.Barrier, Epoch: rec.Epoch, Reopened: rec.Reopened, Truth: rec.Truth,
		VnodeErrMean: rec.VnodeErrMean, VnodeErrMax: rec.VnodeErrMax}
	for _, u := range rec.Upstreams {
		res.Upstreams = append(res.Upstreams, u.Truth)
	}
	return res, nil
}

// close waits for the work queued, stops the goroutine and returns its
// first error. Safe to call more than once.
func (s *truthScorer) close() error {
	if h := s.swapHeld(nil); h != nil {
		s.push(h)
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// countsOracle is the truth from a copy of a generator's counts, which
// follows the steps scored so far.
type countsOracle struct{ c *workload.Counts }

func (o countsOracle) Rows(_ uint64, vnode uint16, cursor []byte) (behind, total int64, err error) {
	total = o.c.Live(vnode)
	if cursor != nil {
		behind = o.c.RowsAtOrBelow(vnode, cursor)
	}
	return behind, total, nil
}
