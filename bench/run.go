// Package bench runs the backfill workloads end to end and summarises how
// close each progress approach came to the truth and at what cost. The
// benchmarks of bench_test.go, the lsmstats CLI and `make results` all use
// it.
package bench

import (
	"context"
	"math"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/lsm"
)

// Table ids of a run.
const (
	UpstreamTable = 1
	MVTable       = 2
	StateTable    = 3
	MetaTable     = 4
)

// Config is one run.
type Config struct {
	Dir      string
	Workload workload.Params
	// Actors, ChunkSize, BarrierRows, CheckpointEvery, RateLimit: see
	// backfill.JobConfig.
	Actors, ChunkSize, BarrierRows, CheckpointEvery int
	RateLimit                                       float64
	// Approaches are "rowcount" and/or "stats"; empty means both.
	Approaches []string
	// Store options (nil: defaults).
	Store *lsm.Options
	// OnCheckpoint, if set, sees every checkpoint record.
	OnCheckpoint func(backfill.Record)
	// OnPhase, if set, sees the pipeline's phases (backfill.JobConfig).
	OnPhase func(string)
	// RestartAt, if positive, drops the run after that many checkpoints of
	// the job, without closing it (its uncommitted work is lost, as in a
	// crash), and reopens it from what the store persisted; the figure the
	// reopened job shows before its first new checkpoint is a record too.
	RestartAt int
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
			out = append(out, backfill.RowCount{})
		case "stats":
			out = append(out, backfill.Stats{})
		default:
			return nil, errors.Newf("bench: unknown approach %q (rowcount or stats)", n)
		}
	}
	return out, nil
}

// Session is an open run: the store, the generator and the job.
type Session struct {
	Store *lsm.Store
	Gen   *workload.Generator
	Job   *backfill.Job
}

// Open opens (or recovers) a run in cfg.Dir.
func Open(cfg Config) (*Session, error) {
	est, err := Estimators(cfg.Approaches)
	if err != nil {
		return nil, err
	}
	g, err := workload.New(cfg.Workload)
	if err != nil {
		return nil, err
	}
	s, err := lsm.Open(cfg.Dir, cfg.Store)
	if err != nil {
		return nil, err
	}
	j, err := backfill.OpenJob(backfill.JobConfig{
		Store: s, Upstream: g.Params().TableDef(UpstreamTable), MV: MVTable, State: StateTable, Meta: MetaTable,
		Actors: cfg.Actors, ChunkSize: cfg.ChunkSize, BarrierRows: cfg.BarrierRows,
		CheckpointEvery: cfg.CheckpointEvery, RateLimit: cfg.RateLimit,
		Source: workload.Source{G: g}, Oracle: workload.Oracle{G: g},
		Estimators: est, OnCheckpoint: cfg.OnCheckpoint, OnPhase: cfg.OnPhase,
	})
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	return &Session{Store: s, Gen: g, Job: j}, nil
}

// Close closes the job and the store.
func (s *Session) Close() error {
	return errors.CombineErrors(s.Job.Close(), s.Store.Close())
}

// ErrorStats summarise one approach's raw figure - truth over checkpoints,
// in percentage points: the mean and largest absolute error, and the mean
// signed error (the bias: negative when the figure trails the truth).
type ErrorStats struct {
	MeanPP   float64 `json:"mean_pp"`
	MaxPP    float64 `json:"max_pp"`
	SignedPP float64 `json:"signed_mean_pp"`
	N        int     `json:"checkpoints"`
}

func (e *ErrorStats) add(d float64) {
	n := float64(e.N)
	e.MeanPP = (e.MeanPP*n + math.Abs(d)) / (n + 1)
	e.SignedPP = (e.SignedPP*n + d) / (n + 1)
	e.MaxPP = math.Max(e.MaxPP, math.Abs(d))
	e.N++
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
}

// AddError adds raw - truth of an approach's figure at a checkpoint to
// errs; a negative truth (no oracle) is skipped.
func AddError(errs map[string]*ErrorStats, approach string, raw, truth float64) {
	if truth < 0 {
		return
	}
	e := errs[approach]
	if e == nil {
		e = &ErrorStats{}
		errs[approach] = e
	}
	e.add(raw - truth)
}

// Summary is what a run measured.
type Summary struct {
	Records []backfill.Record
	Errors  map[string]*ErrorStats
	// SnapshotRows is the number of snapshot rows the backfill read.
	SnapshotRows uint64
	// Load is the time of the load and churn before the backfill; Backfill
	// the time from the job's start to its end.
	Load, Backfill time.Duration
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
}

// Summarize computes error statistics of records.
func Summarize(records []backfill.Record) map[string]*ErrorStats {
	out := map[string]*ErrorStats{}
	for _, r := range records {
		for _, f := range r.Figures {
			AddError(out, f.Approach, f.Raw, r.Truth)
		}
	}
	return out
}

// Run opens a fresh run and drives it to the end.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	var sum Summary
	start := time.Now()
	var jobStart time.Time
	user := cfg.OnCheckpoint
	cfg.OnCheckpoint = func(r backfill.Record) {
		sum.Records = append(sum.Records, r)
		if user != nil {
			user(r)
		}
	}
	s, err := Open(cfg)
	if err != nil {
		return sum, err
	}
	defer func() { _ = s.Close() }()
	for !s.Job.Started() {
		if _, _, err := s.Job.Step(ctx); err != nil {
			return sum, err
		}
	}
	jobStart = time.Now()
	sum.Load = jobStart.Sub(start)
	if cfg.RestartAt > 0 {
		for len(sum.Records) < cfg.RestartAt && !s.Job.Finished() {
			if _, _, err := s.Job.Step(ctx); err != nil {
				return sum, err
			}
		}
		// The job is dropped unclosed: only what the last checkpoint
		// committed survives the store's Close.
		if err := s.Store.Close(); err != nil {
			return sum, err
		}
		if s, err = Open(cfg); err != nil {
			return sum, err
		}
		if rec := s.Job.Initial(); rec != nil {
			cfg.OnCheckpoint(*rec)
		}
	}
	res, err := s.Job.Run(ctx)
	if err != nil {
		return sum, err
	}
	sum.Backfill = time.Since(jobStart)
	sum.Epoch = res.Epoch
	finish(&sum, s)
	return sum, nil
}

// finish fills the summary's derived fields from a finished session.
func finish(sum *Summary, s *Session) {
	sum.Errors = Summarize(sum.Records)
	sum.ProgressNanos, sum.ProgressWallNanos = map[string]float64{}, map[string]float64{}
	n := 0
	for _, r := range sum.Records {
		for _, f := range r.Figures {
			sum.ProgressNanos[f.Approach] += float64(f.CPU.Nanoseconds())
			sum.ProgressWallNanos[f.Approach] += float64(f.Time.Nanoseconds())
		}
		n++
		if r.Finished {
			var rows uint64
			for _, v := range r.Vnodes {
				rows += v.RowCount
			}
			sum.SnapshotRows = max(sum.SnapshotRows, rows)
		}
	}
	for k := range sum.ProgressNanos {
		sum.ProgressNanos[k] /= float64(max(n, 1))
		sum.ProgressWallNanos[k] /= float64(max(n, 1))
	}
	if n > 0 {
		written, _ := s.Job.StateBytes()
		sum.StateBytesPerBarrier = float64(written) / float64(n)
	}
	if err := s.Job.Compare(); err != nil {
		sum.MVError = err.Error()
	} else {
		sum.MVMatches = true
	}
}
