// Package bench runs the backfill workloads end to end and summarises how
// close each progress approach came to the truth and at what cost. Run
// drives the job with backfill.Driver (the restarts of Config.RestartAt
// are its crashes and rescales) and measures around it; it uses the
// public APIs of backfill and lsm only, and runs a user's table, source
// and oracle as well (Config.User). The benchmarks of bench_test.go, the
// lsmstats CLI and `make results` all use it.
package bench

import (
	"context"
	"fmt"
	"math"
	"runtime/pprof"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/bench/genjob"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/lsm"
)

// Table ids of a run.
const (
	UpstreamTable = 1
	MVTable       = 2
	StateTable    = 3
	MetaTable     = 4
	// LogStoreTable is a snapshot backfill's log store.
	LogStoreTable = 5
)

// UpstreamTableOf returns the ids of upstream i's table, MV and state
// table in a run over several upstreams: upstream 0's are UpstreamTable,
// MVTable and StateTable, upstream i's 10i+1, 10i+2 and 10i+3.
func UpstreamTableOf(i int) (upstream, mv, state uint32) {
	if i == 0 {
		return UpstreamTable, MVTable, StateTable
	}
	return uint32(10*i + 1), uint32(10*i + 2), uint32(10*i + 3)
}

// Config is one run.
type Config struct {
	Dir      string
	Workload workload.Params
	// Upstreams, if set, run a job over several upstream tables, one
	// workload each (genjob.Multi; Workload is then ignored, and RunRaw
	// does not apply): upstream i's tables are UpstreamTableOf(i).
	Upstreams []workload.Params
	// Mode is the kind of backfill (backfill.JobConfig.Mode). A snapshot
	// backfill's truth is asked about its pinned epoch, which the
	// workload's model does not know: its oracle is a scan of each table
	// (backfilltest.ScanOracle), slower, in the harness's time.
	Mode backfill.JobMode
	// SnapshotOrder: see backfill.JobConfig.
	SnapshotOrder backfill.SnapshotOrder
	// Actors, ChunkSize, BarrierRows, CheckpointEvery, RateLimit: see
	// backfill.JobConfig.
	Actors, ChunkSize, BarrierRows, CheckpointEvery int
	RateLimit                                       float64
	// RateChanges: see backfill.JobConfig.
	RateChanges []backfill.RateChange
	// Approaches are "rowcount" and/or "stats"; empty means both.
	Approaches []string
	// Store options (nil: defaults).
	Store *lsm.Options
	// RawOptions, if set, returns the Pebble options of the raw-Pebble
	// pipelines (RunRaw; new options for each database, e.g.
	// PebbleDefaults); nil means the store's (Store.PebbleOptions()).
	RawOptions func() *pebble.Options
	// Checked makes the upstream writer read before each write
	// (backfill.JobConfig.Unchecked false). By default it trusts the
	// generator, which is consistent by construction, and writes blind, as
	// raw Pebble does; the upstream's live statistics are then flagged as
	// possibly containing estimates (Verify still recounts them).
	Checked bool
	// OnCheckpoint, if set, sees every record (backfill.Driver's: each
	// checkpoint's, and the figure of each job reopened from the store,
	// marked Reopened), with the times of its figures
	// (backfill.Figure.Time and CPU) that the run measured.
	OnCheckpoint func(backfill.Record)
	// OnPhase, if set, sees the pipeline's phases (backfill.JobConfig).
	OnPhase func(string)
	// OnStart, if set, is called by Run and RunRaw with their session
	// once everything is open, right before the load; OnEnd with the
	// finished session, before it closes. RunRaw's sessions have only Raw
	// set. For measurements outside the timed work.
	OnStart func(*Session)
	OnEnd   func(*Session)
	// OnOpen, if set, is called by Run with each session it opens (the
	// job recovered from cfg.Dir, and again after RestartAt), before its
	// first step and before OnCheckpoint gets the reopened job's figure
	// (Session.Initial); an error ends the run. OnLoadStep, if set, is
	// called after each load step with the source's step and the last load
	// step. The lsmstats CLI's worker reports through them.
	OnOpen     func(*Session) error
	OnLoadStep func(step, last uint64)
	// User, if set, runs the job over a user's table, source and oracle
	// instead of the workload's (Workload is then ignored, and RunRaw does
	// not apply): the same driver, measurements and restart.
	User *UserJob
	// Truth says how the run computes the truth of its checkpoints
	// (TruthInline by default: in the job's steps), and OnTruth, if set,
	// gets each one computed apart (TruthConcurrent), from a goroutine of
	// its own, in the order of the checkpoints.
	Truth   TruthMode
	OnTruth func(TruthResult)
	// RestartAt, if positive, drops the run after that many records of
	// the job (or once it finished), without closing it (its uncommitted
	// work is lost, as in a crash: backfill.RestartCrash), and reopens it
	// from what the store persisted; the figure the reopened job shows
	// before its first new checkpoint is a record too. RescaleTo, if
	// positive, is the reopened job's number of actors.
	RestartAt, RescaleTo int
}

// UserJob is a job over a user's table: the table (created if missing),
// and the source and oracle of each opening of the job. Its tables are
// allocated by name (backfill.JobConfig.Name). A user's program that needs
// no measurements runs its job with backfill.Driver instead.
type UserJob struct {
	Table lsm.TableDef
	// Name names the job's tables (backfill.JobConfig.Name); empty means
	// "bench".
	Name string
	// New returns the job's source and oracle (nil: no truth) on the store
	// just opened, or reopened after a restart.
	New func(*lsm.Store) (backfill.Source, backfilltest.Oracle)
}

// Estimators returns the estimators of the named approaches.
func Estimators(names []string) ([]backfill.Estimator, error) {
	if len(names) == 0 {
		names = []string{"rowcount", "stats"}
	}
	var out []backfill.Estimator
	for _, n := range names {
		switch n {
		case "rowcount":
			out = append(out, backfill.RowCountEstimator{})
		case "stats":
			out = append(out, backfill.StatsEstimator{})
		default:
			return nil, errors.Newf("bench: unknown approach %q (rowcount or stats)", n)
		}
	}
	return out, nil
}

// Session is an open run: the store, the generator (nil for a user's job),
// the source and the job.
type Session struct {
	Store *lsm.Store
	// Gen is the generator (the first, over several upstreams; nil for a
	// user's job), and Gens every upstream's.
	Gen    *workload.Generator
	Gens   []*workload.Generator
	Source backfill.Source
	Job    *backfill.Job
	// Raw is the database of a raw-Pebble run (RunRaw), whose OnEnd gets
	// a Session with this field alone.
	Raw *pebble.DB
	h   *harness
	// pt times the job's estimators (JobConfig.OnEstimate) and src is the
	// job's Source, timed, which counts its steps.
	pt  *progressTimer
	src *timedSource
	// initial is the job's Initial record, with the times of its figures.
	initial *backfill.Record
	// truth computes the truth apart (TruthConcurrent), nil otherwise;
	// tally is the run's cost of the truth.
	truth *truthScorer
	tally *truthTally
	// jobStart is when this session's backfill started (Run), and
	// harnessAtStart the harness's time then.
	jobStart       time.Time
	harnessAtStart time.Duration
	// closers run first in Close (OnClose).
	closers []func()
}

// OnClose registers f to run when the session closes, before the job and
// the store close (so that a server reading them stops first); the last
// registered runs first.
func (s *Session) OnClose(f func()) { s.closers = append(s.closers, f) }

func (s *Session) runClosers() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// Initial returns the job's figure at the opening of a started job
// (backfill.Job.Initial), with the times of its figures; nil for a job
// that had not started.
func (s *Session) Initial() *backfill.Record { return s.initial }

// Harness returns the time the run spent in the workload model since Open
// returned: generating the steps and computing each checkpoint's truth
// inline (TruthInline). It is the harness's, not the store's: Summary's
// times exclude it.
func (s *Session) Harness() time.Duration { return s.h.d }

// TruthCost returns what computing the truth cost the run so far (every
// session of a Run); safe to call from OnTruth and beside the job.
func (s *Session) TruthCost() TruthCost { return s.tally.cost() }

// Backfilled returns the time this session's backfill has run in Run, as
// Summary.Backfill counts it (the harness's time taken out): from the
// job's start (after the load, or after the job reopened in a new
// session) to now; 0 before the start.
func (s *Session) Backfilled() time.Duration {
	if s.jobStart.IsZero() {
		return 0
	}
	return time.Since(s.jobStart) - (s.h.d - s.harnessAtStart)
}

// harness times the workload model's work inside a run: its wall time d
// and its CPU time cpu. The job calls its source and oracle from one
// goroutine.
type harness struct {
	d, cpu time.Duration
	ops    uint64
}

// time runs f and adds its wall and CPU time.
func (h *harness) time(f func()) {
	start := time.Now()
	h.cpu += cpuOf(f)
	h.d += time.Since(start)
}

// timedSource is the job's source, timed. It counts the steps, from the
// one the job resumed it at, and forwards the source's optional methods.
type timedSource struct {
	backfill.Source
	h     *harness
	step  uint64 // the last step produced
	truth *truthScorer
}

func (s *timedSource) Resume(at backfill.Position) error {
	err := s.Source.Resume(at)
	s.step = at.Step
	return err
}

func (s *timedSource) Next(ctx context.Context) ([]backfill.RowOp, error) {
	var ops []backfill.RowOp
	var err error
	if s.truth != nil && s.step+1 >= s.BackfillStep() {
		s.truth.prime()
	}
	s.h.time(func() { ops, err = s.Source.Next(ctx) })
	if err == nil {
		s.step++
		if s.truth != nil {
			s.truth.observe(s.step, ops)
		}
	}
	for _, op := range ops {
		if op.Kind != backfill.UpdateInsert {
			s.h.ops++ // an update is one op of the workload
		}
	}
	return ops, err
}

// BackfillStep is the source's (backfill.Loader), 0 without.
func (s *timedSource) BackfillStep() uint64 {
	if l, ok := s.Source.(backfill.Loader); ok {
		return l.BackfillStep()
	}
	return 0
}

// Finished tells the source, if it listens (backfill.FinishListener).
func (s *timedSource) Finished(step uint64) {
	if f, ok := s.Source.(backfill.FinishListener); ok {
		f.Finished(step)
	}
}

// timedOracle is an oracle of the run's truth, timed.
type timedOracle struct {
	backfilltest.Oracle
	h *harness
}

func (o timedOracle) Rows(epoch uint64, vnode uint16, cursor []byte) (behind, total int64, err error) {
	o.h.time(func() { behind, total, err = o.Oracle.Rows(epoch, vnode, cursor) })
	return behind, total, err
}

// Open opens (or recovers) a run in cfg.Dir.
func Open(cfg Config) (*Session, error) {
	sess, jc, err := newSession(cfg, &truthTally{})
	if err != nil {
		return nil, err
	}
	j, err := backfill.OpenJob(jc)
	if err != nil {
		_ = sess.Store.Close()
		return nil, err
	}
	sess.opened(j)
	return sess, nil
}

// opened sets the session's job, just opened.
func (s *Session) opened(j *backfill.Job) {
	s.Job = j
	// Recovery resumed the source (the generator rebuilt its model from
	// the upstream table): that is Open's work, not the run's.
	*s.h = harness{}
	if rec := j.Initial(); rec != nil {
		r := s.pt.stamp(*rec)
		s.initial = &r
	}
}

// newSession opens the store in cfg.Dir and returns a session without a
// job yet, and the configuration to open the job with (its OnCheckpoint
// stamps each record with its figures' times, then calls
// cfg.OnCheckpoint).
func newSession(cfg Config, tally *truthTally) (*Session, backfill.JobConfig, error) {
	var jc backfill.JobConfig
	est, err := Estimators(cfg.Approaches)
	if err != nil {
		return nil, jc, err
	}
	switch cfg.Truth {
	case TruthInline, TruthOff:
	case TruthConcurrent:
		if cfg.User != nil {
			return nil, jc, errors.New("bench: a user's job has its truth inline only (TruthConcurrent needs the workload's model)")
		}
	default:
		return nil, jc, errors.Newf("bench: unknown truth mode %d", cfg.Truth)
	}
	var gs []*workload.Generator
	var g *workload.Generator
	if cfg.User == nil {
		ps := cfg.Upstreams
		if len(ps) == 0 {
			ps = []workload.Params{cfg.Workload}
		}
		for _, p := range ps {
			g, err := workload.New(p)
			if err != nil {
				return nil, jc, err
			}
			gs = append(gs, g)
		}
		g = gs[0]
	}
	s, err := lsm.Open(cfg.Dir, cfg.Store)
	if err != nil {
		return nil, jc, err
	}
	h := &harness{}
	// The job does not time its estimators: the run does, and sets the
	// times in the records it hands on.
	pt := newProgressTimer()
	jc = backfill.JobConfig{
		Store: s, Actors: cfg.Actors, ChunkSize: cfg.ChunkSize, BarrierRows: cfg.BarrierRows,
		CheckpointEvery: cfg.CheckpointEvery, RateLimit: cfg.RateLimit, RateChanges: cfg.RateChanges,
		Estimators: est, OnEstimate: pt.estimate, OnPhase: cfg.OnPhase, Unchecked: !cfg.Checked, Mode: cfg.Mode,
		SnapshotOrder: cfg.SnapshotOrder,
		OnCheckpoint: func(r backfill.Record) {
			r = pt.stamp(r)
			if cfg.OnCheckpoint != nil {
				cfg.OnCheckpoint(r)
			}
		},
	}
	snapshot := cfg.Mode == backfill.ModeSnapshot
	oracleOf := func(o backfilltest.Oracle, table uint32) backfilltest.Oracle {
		if snapshot {
			return backfilltest.ScanOracle{Store: s, Table: table}
		}
		return o
	}
	var src backfill.Source
	var oracles []backfilltest.Oracle
	if cfg.User != nil {
		var oracle backfilltest.Oracle
		src, oracle = cfg.User.New(s)
		if oracle != nil {
			oracles = append(oracles, oracle)
		}
		jc.Upstream, jc.Name = cfg.User.Table, cfg.User.Name
		if jc.Name == "" {
			jc.Name = "bench"
		}
	} else if len(cfg.Upstreams) > 0 {
		m := genjob.NewMulti(gs...)
		src = m
		for i, o := range m.Oracles() {
			up, mv, state := UpstreamTableOf(i)
			def := gs[i].Params().TableDef(up)
			if i > 0 {
				def.Name = fmt.Sprintf("upstream%d", i)
			}
			jc.Upstreams = append(jc.Upstreams, backfill.UpstreamConfig{Table: def, MV: mv, State: state})
			oracles = append(oracles, oracleOf(o, up))
		}
		jc.Meta = MetaTable
	} else {
		src, oracles = genjob.Source{G: g}, []backfilltest.Oracle{oracleOf(genjob.Oracle{G: g}, UpstreamTable)}
		jc.Upstream, jc.MV, jc.State, jc.Meta = g.Params().TableDef(UpstreamTable), MVTable, StateTable, MetaTable
	}
	if snapshot && cfg.User == nil {
		jc.LogStore = LogStoreTable
	}
	timed := &timedSource{Source: src, h: h}
	jc.Source = timed
	sess := &Session{Store: s, Gen: g, Gens: gs, Source: src, h: h, pt: pt, src: timed, tally: tally}
	switch {
	case cfg.Truth == TruthOff || len(oracles) == 0:
	case cfg.Truth == TruthConcurrent:
		var tables []uint32
		gens := gs
		if snapshot {
			gens = nil
			for i := range max(1, len(cfg.Upstreams)) {
				up, _, _ := UpstreamTableOf(i)
				tables = append(tables, up)
			}
		}
		sess.truth = newTruthScorer(gens, s, tables, jc.LogStore, tally, cfg.OnTruth)
		timed.truth = sess.truth
		jc.Score = func(_ context.Context, r *backfill.Record) error {
			// Before OpenJob returns, the record is the reopened job's
			// first figure (Job.Initial).
			return sess.truth.score(r, sess.Job == nil)
		}
		jc.ScoreLate = true // the scorer orders records and steps (truthScorer.observe)
	default:
		// The job knows no truth: the run scores each checkpoint.
		truth := backfilltest.Truth{Store: s, LogStore: jc.LogStore}
		for _, o := range oracles {
			truth.Oracles = append(truth.Oracles, timedOracle{o, h})
		}
		jc.Score = func(ctx context.Context, r *backfill.Record) error {
			if snapshot && truth.LogStore == 0 {
				// A user's job has its log store allocated by name.
				def, _, err := backfill.TableByName(s, jc.Name+".log_store")
				if err != nil {
					return err
				}
				truth.LogStore = def.ID
			}
			start := time.Now()
			var err error
			cpu := cpuOf(func() { err = truth.Score(ctx, r) })
			tally.add(time.Since(start), cpu)
			if err == nil {
				tally.scored.Add(1)
			}
			return err
		}
	}
	return sess, jc, nil
}

// Close runs the functions OnClose registered, waits for the truths
// computed apart, then closes the job and the store.
func (s *Session) Close() error {
	s.runClosers()
	return errors.CombineErrors(s.closeTruth(), errors.CombineErrors(s.Job.Close(), s.Store.Close()))
}

// closeTruth waits for the truths computed apart (TruthConcurrent), if
// any, and returns the first error computing them.
func (s *Session) closeTruth() error {
	if s.truth == nil {
		return nil
	}
	return s.truth.close()
}

// ErrorStats summarise one approach's raw figure - truth over checkpoints,
// in percentage points: the mean and largest absolute error, and the mean
// signed error (the bias: negative when the figure trails the truth). For
// figures with bounds they count the checkpoints whose truth lay outside
// them and the bounds' mean and largest width.
type ErrorStats struct {
	MeanPP   float64 `json:"mean_pp"`
	MaxPP    float64 `json:"max_pp"`
	SignedPP float64 `json:"signed_mean_pp"`
	N        int     `json:"checkpoints"`

	Bounded     int     `json:"bounded,omitempty"`
	Outside     int     `json:"outside_bounds,omitempty"`
	WidthMeanPP float64 `json:"width_mean_pp,omitempty"`
	WidthMaxPP  float64 `json:"width_max_pp,omitempty"`
}

// boundsSlack is how far outside its bounds, in percentage points, a truth
// may lie and count as inside: the rounding of two divisions.
const boundsSlack = 1e-9

func (e *ErrorStats) add(f backfill.Figure, truth float64) {
	d := f.Raw - truth
	n := float64(e.N)
	e.MeanPP = (e.MeanPP*n + math.Abs(d)) / (n + 1)
	e.SignedPP = (e.SignedPP*n + d) / (n + 1)
	e.MaxPP = math.Max(e.MaxPP, math.Abs(d))
	e.N++
	if b := f.Bounds; b != nil {
		w := b.Upper - b.Lower
		e.WidthMeanPP = (e.WidthMeanPP*float64(e.Bounded) + w) / float64(e.Bounded+1)
		e.WidthMaxPP = math.Max(e.WidthMaxPP, w)
		e.Bounded++
		if truth < b.Lower-boundsSlack || truth > b.Upper+boundsSlack {
			e.Outside++
		}
	}
}

// merge adds the checkpoints of o to e.
func (e *ErrorStats) merge(o *ErrorStats) {
	if o == nil || o.N == 0 {
		return
	}
	n, m := float64(e.N), float64(o.N)
	e.MeanPP = (e.MeanPP*n + o.MeanPP*m) / (n + m)
	e.SignedPP = (e.SignedPP*n + o.SignedPP*m) / (n + m)
	e.MaxPP = math.Max(e.MaxPP, o.MaxPP)
	e.N += o.N
	if o.Bounded > 0 {
		b, c := float64(e.Bounded), float64(o.Bounded)
		e.WidthMeanPP = (e.WidthMeanPP*b + o.WidthMeanPP*c) / (b + c)
		e.WidthMaxPP = math.Max(e.WidthMaxPP, o.WidthMaxPP)
		e.Bounded += o.Bounded
		e.Outside += o.Outside
	}
}

// AddError adds a figure of an approach at a checkpoint, against that
// checkpoint's truth, to errs; a negative truth (no oracle) is skipped.
func AddError(errs map[string]*ErrorStats, f backfill.Figure, truth float64) {
	if truth < 0 {
		return
	}
	e := errs[f.Approach]
	if e == nil {
		e = &ErrorStats{}
		errs[f.Approach] = e
	}
	e.add(f, truth)
}

// Summary is what a run measured.
type Summary struct {
	Records []backfill.Record
	Errors  map[string]*ErrorStats
	// SnapshotRows is the number of snapshot rows the backfill read.
	SnapshotRows uint64
	// Load is the time of the load and churn before the backfill (LoadOps
	// ops), from the opened store to the job's start; Backfill the time
	// from the job's start to its end. Both exclude the workload model's
	// time (Harness: generating steps, computing the truth), which is the
	// harness's, not the store's; the raw-Pebble pipeline's times exclude
	// the generator the same way.
	Load, Backfill time.Duration
	LoadOps        uint64
	Harness        time.Duration
	// Truth is what computing the checkpoints' truth cost (Config.Truth):
	// inline, its time is in Harness too; computed apart, it ran beside
	// the job, and its CPU time is taken out of BackfillCPU.
	Truth TruthCost
	// LoadCPU and BackfillCPU are the process's CPU time in each phase
	// (Pebble's background work included), less the harness's CPU time.
	LoadCPU, BackfillCPU time.Duration
	// LoadLSM and BackfillLSM are the bytes Pebble wrote in each phase.
	LoadLSM, BackfillLSM LSMWrites
	// LoadCommits and BackfillCommits are the latencies of the
	// checkpoints' commits (Store.Commit) in each phase: the time the
	// job's steps spent in them, which for a commit that ran beside the
	// next step (a backfill without restarts) is the wait for its end.
	LoadCommits, BackfillCommits []time.Duration
	// StateBytesPerBarrier is the backfill state bytes (pk and row) written
	// per checkpoint barrier: all state written up to the last checkpoint
	// over the number of checkpoint records (state is also written at
	// barriers that are not checkpoints; it counts at the next checkpoint).
	StateBytesPerBarrier float64
	// ProgressNanos is the mean CPU time per checkpoint of each approach's
	// estimate (Figure.CPU), and ProgressWallNanos its mean wall time, which
	// on a busy machine also counts waiting for a core.
	ProgressNanos, ProgressWallNanos map[string]float64
	MVMatches                        bool
	MVError                          string
	Epoch                            uint64
	// Restart is the index in Records of the reopened job's first record
	// (Config.RestartAt), -1 without a restart.
	Restart int
}

// Tally sums checkpoints' figures: each approach's errors against the
// truth and its progress times. A run's Summary and the lsmstats CLI's
// report (whose checkpoints come from several worker processes) both take
// theirs from it. The zero Tally is ready.
type Tally struct {
	// Errors are the approaches' error statistics (AddError).
	Errors map[string]*ErrorStats
	// N is the number of checkpoints added.
	N         int
	cpu, wall map[string]float64
}

// Add adds a checkpoint's figures and its truth (negative: none).
func (t *Tally) Add(figures []backfill.Figure, truth float64) {
	if t.Errors == nil {
		t.Errors = map[string]*ErrorStats{}
	}
	if t.cpu == nil {
		t.cpu, t.wall = map[string]float64{}, map[string]float64{}
	}
	for _, f := range figures {
		AddError(t.Errors, f, truth)
		t.cpu[f.Approach] += float64(f.CPU.Nanoseconds())
		t.wall[f.Approach] += float64(f.Time.Nanoseconds())
	}
	t.N++
}

// PerCheckpoint returns x over the checkpoints added (x itself for none).
func (t *Tally) PerCheckpoint(x float64) float64 { return x / float64(max(t.N, 1)) }

// ProgressNanos returns each approach's mean CPU and wall time per
// checkpoint (Figure.CPU and Time, as the run measured them).
func (t *Tally) ProgressNanos() (cpu, wall map[string]float64) {
	cpu, wall = map[string]float64{}, map[string]float64{}
	for k := range t.cpu {
		cpu[k], wall[k] = t.PerCheckpoint(t.cpu[k]), t.PerCheckpoint(t.wall[k])
	}
	return cpu, wall
}

// Summarize computes error statistics of records.
func Summarize(records []backfill.Record) map[string]*ErrorStats {
	return tally(records).Errors
}

func tally(records []backfill.Record) *Tally {
	t := &Tally{Errors: map[string]*ErrorStats{}}
	for _, r := range records {
		t.Add(r.Figures, r.Truth)
	}
	return t
}

// Run opens the run in cfg.Dir (a fresh one, or the job it recovers) and
// drives it to the end with backfill.Driver: the load steps first (timed
// apart), then the backfill, restarted once with Config.RestartAt.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	sum := Summary{Restart: -1}
	// A commit's latency runs from its phase to the next one.
	commits := &sum.LoadCommits
	var commitStart time.Time
	userPhase := cfg.OnPhase
	cfg.OnPhase = func(p string) {
		if !commitStart.IsZero() {
			*commits = append(*commits, time.Since(commitStart))
			commitStart = time.Time{}
		}
		if p == "commit" {
			commitStart = time.Now()
		}
		if userPhase != nil {
			userPhase(p)
		}
	}
	// CPU profiles tell the phases apart by this label; goroutines started
	// during a phase (actors, Pebble's compactions) inherit it.
	defer pprof.SetGoroutineLabels(ctx)

	var s *Session // the opening's
	tally := &truthTally{}
	defer func() {
		// The driver closed the jobs; the last store is the run's.
		if s != nil {
			s.runClosers()
			_ = s.closeTruth()
			_ = s.Store.Close()
		}
	}()
	var (
		jobStart       time.Time
		jobCPU         time.Duration
		truthCPU       time.Duration // the truth's CPU at jobStart
		jobLSM         LSMWrites
		restarted      bool
		measuredOpened bool  // the first opening's load measured
		truthErr       error // of a restarted session's truths
	)
	d := backfill.Driver{
		Open: func(backfill.Opening) (backfill.JobConfig, error) {
			sess, jc, err := newSession(cfg, tally)
			if err != nil {
				return jc, err
			}
			s = sess
			jc.OnCheckpoint = nil // the driver's OnCheckpoint sees every record
			return jc, nil
		},
		OnOpen: func(j *backfill.Job) error {
			s.opened(j)
			if restarted {
				sum.Restart = len(sum.Records)
			}
			if cfg.OnOpen != nil {
				if err := cfg.OnOpen(s); err != nil {
					return err
				}
			}
			if measuredOpened {
				// The reopened Pebble counts its bytes from zero.
				var err error
				jobLSM, err = storeWrites(s.Store)
				s.jobStart, s.harnessAtStart = time.Now(), s.h.d
				return err
			}
			measuredOpened = true
			if cfg.OnStart != nil {
				cfg.OnStart(s)
			}
			pprof.SetGoroutineLabels(pprof.WithLabels(ctx, pprof.Labels("phase", "load")))
			lsm0, err := storeWrites(s.Store)
			if err != nil {
				return err
			}
			start, cpu := time.Now(), processCPU()
			// The load is every step before the backfill's first (which
			// starts the actors): the same steps as the raw pipeline's load.
			for !s.Job.Started() && s.src.step+1 < s.src.BackfillStep() {
				if _, _, err := s.Job.Step(ctx); err != nil {
					return err
				}
				if cfg.OnLoadStep != nil {
					cfg.OnLoadStep(s.src.step, s.src.BackfillStep()-1)
				}
			}
			jobStart, jobCPU, truthCPU = time.Now(), processCPU(), tally.cost().CPU
			if jobLSM, err = storeWrites(s.Store); err != nil {
				return err
			}
			sum.LoadLSM = jobLSM.Sub(lsm0)
			sum.LoadOps = s.h.ops
			sum.Load = jobStart.Sub(start) - s.h.d
			sum.LoadCPU = jobCPU - cpu - s.h.cpu
			sum.Harness = s.h.d
			*s.h = harness{}
			s.jobStart = jobStart
			commits = &sum.BackfillCommits
			pprof.SetGoroutineLabels(pprof.WithLabels(ctx, pprof.Labels("phase", "backfill")))
			return nil
		},
		OnCheckpoint: func(r backfill.Record) {
			if r.Reopened && s.initial != nil {
				r = *s.initial // stamped when the job opened
			} else {
				r = s.pt.stamp(r)
			}
			sum.Records = append(sum.Records, r)
			if cfg.OnCheckpoint != nil {
				cfg.OnCheckpoint(r)
			}
		},
		Restart: func(r backfill.Record) (backfill.Restart, bool) {
			if cfg.RestartAt <= 0 || restarted || (len(sum.Records) < cfg.RestartAt && !r.Finished) {
				return backfill.Restart{}, false
			}
			restarted = true
			// The job is dropped unclosed: only what the last checkpoint
			// committed survives the store's Close. The truths of its
			// checkpoints are finished first (they may read its store).
			s.runClosers()
			if err := s.closeTruth(); err != nil {
				truthErr = err
			}
			return backfill.Restart{Kind: backfill.RestartCrash, Actors: cfg.RescaleTo}, true
		},
		OnEnd: func(*backfill.Job) error {
			if !commitStart.IsZero() {
				*commits = append(*commits, time.Since(commitStart))
			}
			sum.Backfill = time.Since(jobStart) - s.h.d
			sum.BackfillCPU = processCPU() - jobCPU - s.h.cpu
			// The truths computed apart: every one of the job's, before the
			// summary's errors are tallied (their CPU is not the job's).
			if err := errors.CombineErrors(truthErr, s.closeTruth()); err != nil {
				return err
			}
			sum.Truth = tally.cost()
			if cfg.Truth == TruthConcurrent {
				sum.BackfillCPU -= sum.Truth.CPU - truthCPU
				tally.fill(sum.Records)
			}
			end, err := storeWrites(s.Store)
			if err != nil {
				return err
			}
			sum.BackfillLSM = end.Sub(jobLSM)
			sum.Harness += s.h.d
			sum.Epoch = s.Store.CommittedEpoch()
			finish(&sum, s)
			if cfg.OnEnd != nil {
				cfg.OnEnd(s)
			}
			s.runClosers() // before the driver closes the job
			return nil
		},
	}
	if cfg.RestartAt <= 0 {
		d.Restart = nil // none to ask for: the job's commits may pipeline (backfill.JobConfig.ScoreLate)
	}
	_, err := d.Run(ctx)
	return sum, err
}

// LSMWrites are the bytes Pebble wrote into SSTs, by way.
type LSMWrites struct {
	Ingested, Flushed, Compacted uint64
}

// storeWrites returns the bytes the store's Pebble wrote since it opened.
func storeWrites(s *lsm.Store) (LSMWrites, error) {
	m, err := s.PebbleMetrics()
	if err != nil {
		return LSMWrites{}, err
	}
	return lsmWrites(m), nil
}

// lsmWrites returns the bytes into SSTs that m counts.
func lsmWrites(m *pebble.Metrics) LSMWrites {
	var w LSMWrites
	for _, l := range m.Levels {
		w.Ingested += l.TableBytesIngested
		w.Flushed += l.TableBytesFlushed
		w.Compacted += l.TableBytesCompacted
	}
	return w
}

// Sub returns w - o.
func (w LSMWrites) Sub(o LSMWrites) LSMWrites {
	return LSMWrites{w.Ingested - o.Ingested, w.Flushed - o.Flushed, w.Compacted - o.Compacted}
}

// LoadRate returns load ops per second.
func (s Summary) LoadRate() float64 { return rate(s.LoadOps, s.Load) }

// SnapshotRate returns snapshot rows per second.
func (s Summary) SnapshotRate() float64 { return rate(s.SnapshotRows, s.Backfill) }

// finish fills the summary's derived fields from a finished session.
func finish(sum *Summary, s *Session) {
	t := tally(sum.Records)
	sum.Errors = t.Errors
	sum.ProgressNanos, sum.ProgressWallNanos = t.ProgressNanos()
	for _, r := range sum.Records {
		if r.Finished {
			var rows uint64
			for _, v := range r.Vnodes {
				rows += v.RowCount
			}
			sum.SnapshotRows = max(sum.SnapshotRows, rows)
		}
	}
	if t.N > 0 {
		written, _ := s.Job.StateBytes()
		sum.StateBytesPerBarrier = t.PerCheckpoint(float64(written))
	}
	if err := s.Job.Compare(); err != nil {
		sum.MVError = err.Error()
	} else {
		sum.MVMatches = true
	}
}
