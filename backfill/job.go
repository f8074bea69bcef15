package backfill

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/lsmstats/lsmstats/stats"
	"golang.org/x/time/rate"
)

// Source is the upstream: a sequence of steps of row ops, one step per
// epoch. It resumes from the job's durable position: OpenJob tells it the
// last step the job committed (Resume), and it continues from the step
// after it. Nothing is replayed from the beginning: a source keeps its own
// durable position (a log offset, a table it reads) or rebuilds its state
// from the committed upstream table, which Position gives it.
//
// These two methods are all a source needs. One whose first steps load
// the upstream table before the backfill starts also implements Loader,
// and one that wants to know when the backfill finished (to stop its
// writes after a few more steps, say) implements FinishListener; the job
// finds them with type assertions. A source that wraps another (to time
// it, or to keep a model of the table up to date) should forward both,
// or the job will not see them through it.
type Source interface {
	// Resume positions the source after the job's last committed step: its
	// next Next returns step at.Step+1. OpenJob calls it once, before any
	// Next (at.Step is 0 for a new job). The job counts the steps from
	// there: the k-th Next after Resume is step at.Step+k.
	Resume(at Position) error
	// Next returns the ops of the next step; an update is an UpdateDelete
	// and UpdateInsert pair. An error stops the job's step (Run returns it).
	Next(ctx context.Context) ([]RowOp, error)
}

// Loader is a Source whose first steps load the upstream table: the steps
// before BackfillStep only write the table, and the backfill starts at
// step BackfillStep. A Source without it (or whose BackfillStep is 0 or
// 1) starts the backfill at its first step: its table was loaded before
// the job.
type Loader interface {
	BackfillStep() uint64
}

// FinishListener is a Source that is told when the backfill finished, at
// the step of the checkpoint that showed it: Run then asks for
// JobConfig.TailSteps more steps and no others. Finished is called once
// per opened job (by OpenJob for a job that had finished before).
type FinishListener interface {
	Finished(step uint64)
}

// Position is where a job resumes: the last step it committed, at the
// store's committed epoch, and the upstream table as committed then.
type Position struct {
	Step, Epoch uint64
	Store       *lsm.Store
	// Upstream is the job's (first) upstream table, and Upstreams all of
	// them, by index (RowOp.Upstream).
	Upstream  lsm.TableDef
	Upstreams []lsm.TableDef
}

// JobConfig configures a backfill job and the pipeline around it.
type JobConfig struct {
	Store *lsm.Store
	// Upstream is the upstream table (created if missing); with an ID of 0
	// and no pk schema, the table of the store's catalog named Upstream.Name.
	// MV, State and Meta are the ids of the MV, the backfill state table and
	// the job's metadata table (created if missing).
	Upstream        lsm.TableDef
	MV, State, Meta uint32
	// Upstreams, if set, are the job's upstream tables (a job over several,
	// as a join MV backfills each of its inputs), each with its MV and
	// state table; Upstream, MV and State must then be unset.
	// The same actors read them all: each actor owns a contiguous range of
	// the vnodes of each table, and the state persists per (table, vnode),
	// in each table's state table. A source's ops name their table
	// (RowOp.Upstream, the index here). Without Upstreams, the job reads
	// the one table Upstream: the case of one.
	Upstreams []UpstreamConfig
	// Vnodes, if set, are the upstream tables' vnodes this job owns: the
	// job is one node's part of a job whose vnodes several stores share
	// (doc.go, "A job over a subset of the vnodes"). Its actors split
	// these only; it reads and writes the state rows, the upstream and the
	// MV of these only; its figures, Record.Vnodes, Finished and Compare
	// are over these only; a source op on another vnode fails the step
	// (ErrUnownedVnode). A reopened job may own another set (vnodes moved
	// in with their state rows resume from them, others start fresh).
	// Every upstream table must have the same vnode count, every vnode of
	// the set be below it, and the set hold at least Actors vnodes or none:
	// an empty set is a part with nothing to backfill (a node that holds
	// no vnodes until a move gives it some), whose steps still commit the
	// store's epochs and its metadata row, its figures 0 of 0, finished. A
	// snapshot backfill's part (ModeSnapshot) logs and consumes the changes
	// of its vnodes in its log store's same vnodes, which move with the
	// other tables' (doc.go); its parts must start at the same step (one
	// snapshot epoch), and each vnode it owns once started must have been
	// some part's when the job started. Nil means every vnode.
	// The job keeps a copy: change the set by reopening the job.
	Vnodes *roaring.Bitmap
	// Mode is the kind of backfill: ModeArrangement (the default) or
	// ModeSnapshot (snapshot.go). A reopened job must have the mode it was
	// created with.
	Mode JobMode
	// LogStore is the id of a snapshot backfill's log-store table (created
	// if missing; allocated by Name when Name is set, as
	// Name+".log_store").
	LogStore uint32
	// Name, if set, names the job's tables in the store's catalog (the MV
	// is Name, the others Name+".backfill_state" and Name+".backfill_job";
	// with several upstreams, upstream i > 0's are Name+".i" and
	// Name+".i.backfill_state") and has the catalog allocate their ids: MV,
	// State and Meta must then be 0. A reopened job finds its tables by
	// the same name (Job.Tables, Job.Upstreams).
	Name string
	// Actors is the number of backfill actors; each gets a contiguous range
	// of vnodes. A restart may use another count (rescale).
	Actors int
	// ChunkSize and BarrierRows: see ActorConfig.
	ChunkSize, BarrierRows int
	// SnapshotOrder is the order in which each actor reads its vnodes:
	// VnodeOrder (the default: one vnode after another, the faster on an
	// embedded store) or Interleaved (one row of each in turn, as
	// RisingWave's arrangement backfill). A restarted job may use another
	// order; the vnodes' cursors serve either.
	SnapshotOrder SnapshotOrder
	// CheckpointEvery makes every n-th barrier a checkpoint; 0 means 1.
	CheckpointEvery int
	// RateLimit limits the job's snapshot reads, in rows per second over
	// all its actors, each of which gets an equal share (an actor whose
	// vnodes finished early leaves its share unused); 0 is unlimited.
	// SetRateLimit and RateChanges change it while the job runs; the limit
	// in force is persisted and survives restarts.
	RateLimit float64
	// RateChanges change the rate limit when the job's figure (the first
	// Accountant's raw figure, Stats by default) reaches each one's
	// AtPercent, at the checkpoint that shows it: the limit is that of the
	// last change reached. A restarted job applies them from the figure it
	// recovers.
	RateChanges []RateChange
	Source      Source
	// Score, if set, sees each checkpoint's record before the job keeps
	// and hands it on (Run's and Step's records, Initial, OnCheckpoint,
	// the metrics), and may complete it: a test or a benchmark sets its
	// truth there (backfilltest.Truth), which the job does not know. It
	// runs in the step, with the step's ctx, while a snapshot backfill's
	// snapshot is still pinned; its error fails the step.
	Score func(ctx context.Context, rec *Record) error
	// ScoreLate says that Score takes a checkpoint's record after the
	// source gave the next step's ops (it scores from what it kept of the
	// checkpoint, not from the source as it is), so that Run may commit a
	// checkpoint beside the next step with Score set too. Without Score,
	// Run does so regardless.
	ScoreLate bool
	// TailSteps is the number of upstream steps after the job finished
	// before Run returns; 0 means 2.
	TailSteps int
	// Estimators default to RowCount and Stats.
	Estimators []Estimator
	// OnCheckpoint is called after every checkpoint with its record.
	OnCheckpoint func(Record)
	// OnEstimate, if set, runs each estimator's figure at every
	// checkpoint (and at the opening of a started job): it must call
	// estimate once, on its own goroutine, before it returns. The job
	// does not time its estimators; a benchmark does it here (bench's
	// progress CPU per checkpoint), and may set the figures' Time and CPU
	// in the records it hands on. Where Run's commits run beside the next
	// step (Run), it runs on the commit's goroutine, while the job's
	// goroutine runs that step (and OnPhase), and before the checkpoint's
	// OnCheckpoint.
	OnEstimate func(approach string, estimate func())
	// OnPhase, if set, is called when the pipeline enters a phase of a step:
	// "upstream" (writing the step's ops), "backfill" (actors handling the
	// barrier: snapshot reads, forwarding, state), "commit", "progress".
	// Where Run's commits run beside the next step (Run),
	// "commit" is the wait for the last checkpoint's commit, after the
	// barrier of the step it ran beside, and "progress" that checkpoint's
	// record.
	OnPhase func(phase string)
	// KeepRecords makes Run return the record of every checkpoint
	// (Result.Records), for tests and short jobs. A record holds the state
	// and estimate of each vnode, so a job's records grow with its table:
	// over the 3,900 checkpoints of a 16M-row backfill on 256 vnodes they
	// took the live Go heap from 35 to 130 MB (about 24 KB a record). Without it,
	// Run keeps the last one, and OnCheckpoint sees each.
	KeepRecords bool
	// Unchecked makes the upstream writer skip its read-before-write check
	// (the generator is consistent by construction); the live statistics of
	// the upstream table are then flagged as possibly estimated.
	Unchecked bool
}

// UpstreamConfig is one upstream table of a job over several
// (JobConfig.Upstreams): the table (created if missing; with an ID of 0 and
// no pk schema, the table of the store's catalog named Table.Name) and the
// ids of its MV and backfill state table (0 when JobConfig.Name allocates
// them).
type UpstreamConfig struct {
	Table     lsm.TableDef
	MV, State uint32
}

// jobUpstream is a job's side of one upstream table: its definition,
// tables, writer and the actor owning each of its vnodes.
type jobUpstream struct {
	def       lsm.TableDef
	mv, state uint32
	writer    *lsm.Writer
	owner     []int
}

// RateChange is a change of a job's rate limit at a progress figure.
type RateChange struct {
	// AtPercent is the figure, in percent, from which Limit applies.
	AtPercent float64
	// Limit is the job's new limit in rows/s (see JobConfig.RateLimit);
	// 0 is unlimited.
	Limit float64
}

// Record is the progress of one checkpoint barrier, or of a job reopened
// from the store (Reopened).
type Record struct {
	// Barrier counts checkpoints since the job started, across restarts.
	Barrier uint64
	Epoch   uint64
	Step    uint64
	// Reopened marks the figure a job reopened from the store shows before
	// its first new barrier (Job.Initial): computed at the committed epoch
	// from the persisted state, it is no checkpoint of its own, and its
	// Barrier, Epoch and Step are those of the last checkpoint before the
	// restart. Driver.OnCheckpoint gets it after every reopening; a job's
	// own JobConfig.OnCheckpoint does not.
	Reopened bool
	// Time is the wall time the figures were computed at.
	Time time.Time
	// SnapshotRows is the number of snapshot rows the job's vnodes read
	// (Σ VnodeState.RowCount: across restarts with the RowCountEstimator,
	// which persists it, else since this process opened the job).
	SnapshotRows uint64
	// RateLimit is the job's rate limit in force (rows/s, 0: none).
	RateLimit float64
	// ETA is the job's ETA after this checkpoint (ETAWarming without an
	// Accountant among the estimators). It carries over restarts and
	// rescales through the job's metadata row.
	ETA ETAForecast
	// Background is the store's background work the ETA took with this
	// checkpoint (lsm.Store.Background), so that a replay of the records
	// (RecordObservation) gives the same forecasts.
	Background *ETABackground
	// Truth is the truth (docs/design.md §7) in percent, as
	// JobConfig.Score set it; -1 without.
	Truth    float64
	Figures  []Figure
	Finished bool
	// Upstreams are the figures and truth of each upstream table alone, by
	// index, beside the job's (one for a job over one table).
	Upstreams []UpstreamProgress
	// Phase is a snapshot backfill's phase at the checkpoint ("snapshot",
	// "log store", "joined"; empty for an arrangement backfill), with the
	// log rows it consumed so far and those the log store still holds
	// (its table's live statistics, less the vnodes' account rows); a
	// job part's (JobConfig.Vnodes) of its vnodes.
	Phase                   string
	LogConsumed, LogPending uint64
	// SnapshotEpoch is a snapshot backfill's pinned epoch, and
	// SnapshotTotals the live rows of each upstream table at it (by
	// index), as the statistics counted them when it was pinned; a job
	// part's of its vnodes.
	SnapshotEpoch  uint64
	SnapshotTotals []int64
	// Vnodes are the states the figures were computed from, and
	// Estimates the accounts of the same vnodes by the first Accountant
	// among the estimators (Stats by default): consumed rows, bounds, live
	// rows.
	Vnodes    []VnodeState
	Estimates []VnodeEstimate
	// VnodeErrMean and VnodeErrMax are the errors of the per-vnode
	// estimates behind the stats figure (vnodes in progress), in percent of
	// each vnode's live rows, as JobConfig.Score set them (zero without).
	VnodeErrMean, VnodeErrMax float64
}

// Job runs an upstream workload and an arrangement backfill into an MV.
type Job struct {
	cfg     JobConfig
	store   *lsm.Store
	ups     []jobUpstream
	meta    *lsm.Writer
	tracker *ProgressTracker
	actors  []*Actor
	metaRow []byte // the persisted meta row, nil if none

	step     uint64 // committed source step
	srcStep  uint64 // the last step the source produced
	epoch    uint64 // the next epoch
	barrier  uint64 // checkpoints since the job started
	started  bool
	finished bool
	tail     int
	barriers int // barriers since the job started in this process
	initial  *Record

	// The rate limit in force (job-wide) and the actors' limiters, under
	// limitMu (SetRateLimit may run beside Run); the rate changes already
	// applied.
	limitMu  sync.Mutex
	limit    float64
	limiters []*rate.Limiter
	changes  int
	eta      *ETA
	run      uint64 // the ETA's run of this process

	// stopped is the error that stopped a step: the job must be reopened.
	stopped error

	// pipeline lets Run's checkpoints commit beside the next step
	// (pipelines); inflight is the checkpoint whose commit runs, nil if
	// none.
	pipeline bool
	inflight *inflightCommit

	// A snapshot backfill's phase, snapshot epoch and its live rows per
	// upstream (of the job's vnodes), the log store's table, vnode count
	// and writer, the accounts of the job's vnodes of it (by vnode, nil
	// for another's), its rows consumed, the log cursor (every epoch up to
	// it consumed in this opening), the rows appended since the last
	// commit, appendLog's sequences, and the pin of the snapshot epoch.
	phase          Phase
	snapEpoch      uint64
	snapTotals     []int64
	logTable       uint32
	logVnodes      int
	logW           *lsm.Writer
	accounts       []*logAccount
	logConsumed    uint64
	logEpoch       uint64
	logUncommitted int
	logSeq         []uint64
	pin            *lsm.Snapshot

	// The last checkpoint's record (Progress), under lastMu: a metrics
	// scrape reads it while Run runs.
	lastMu sync.Mutex
	last   *Record

	// The actors' goroutines while Run runs.
	inputs []chan Message
	acks   chan Ack
	wg     sync.WaitGroup
}

// OpenJob creates the tables if needed and recovers the job from the
// committed state: the source resumes after the committed step, and if the
// backfill had started, actors are created over the current vnode split and
// load their vnodes' states. The first progress figure is then available
// (Initial) before any new barrier. A job that fails to open releases the
// writers it took.
func OpenJob(cfg JobConfig) (_ *Job, err error) {
	if cfg.Actors <= 0 {
		cfg.Actors = 1
	}
	if cfg.CheckpointEvery <= 0 {
		cfg.CheckpointEvery = 1
	}
	if cfg.TailSteps <= 0 {
		cfg.TailSteps = 2
	}
	if len(cfg.Estimators) == 0 {
		cfg.Estimators = []Estimator{RowCountEstimator{}, StatsEstimator{}}
	}
	s := cfg.Store
	ups, err := openUpstreams(&cfg)
	if err != nil {
		return nil, err
	}
	cfg.RateChanges = slices.Clone(cfg.RateChanges)
	slices.SortStableFunc(cfg.RateChanges, func(a, b RateChange) int { return cmp.Compare(a.AtPercent, b.AtPercent) })
	for _, c := range cfg.RateChanges {
		if math.IsNaN(c.AtPercent) || math.IsNaN(c.Limit) || c.Limit < 0 || math.IsInf(c.Limit, 0) {
			return nil, errors.Newf("lsmstats/backfill: rate change %g rows/s at %g%%: want a finite limit >= 0 at a percentage", c.Limit, c.AtPercent)
		}
	}
	if !cfg.SnapshotOrder.valid() {
		return nil, errors.Newf("lsmstats/backfill: invalid snapshot order %d", cfg.SnapshotOrder)
	}
	if math.IsNaN(cfg.RateLimit) || cfg.RateLimit < 0 || math.IsInf(cfg.RateLimit, 0) {
		return nil, errors.Newf("lsmstats/backfill: rate limit %g rows/s: want a finite limit >= 0", cfg.RateLimit)
	}
	ids := make([]uint32, len(ups))
	for i, u := range ups {
		if cfg.Actors > u.def.VnodeCount {
			return nil, errors.Newf("lsmstats/backfill: %d actors for %d vnodes of upstream %d", cfg.Actors, u.def.VnodeCount, u.def.ID)
		}
		ids[i] = u.def.ID
	}
	if cfg.Mode > ModeSnapshot {
		return nil, errors.Newf("lsmstats/backfill: unknown mode %d", cfg.Mode)
	}
	if cfg.Vnodes != nil {
		if cfg.Vnodes, err = checkVnodes(cfg, ups); err != nil {
			return nil, err
		}
	}
	j := &Job{cfg: cfg, store: s, ups: ups, tracker: NewProgressTrackerOf(ids, cfg.Estimators...), logTable: cfg.LogStore}
	j.tracker.around, j.tracker.owned = cfg.OnEstimate, cfg.Vnodes
	// A writer left open would keep its vnodes (no later job could take
	// them) and block every later commit of the store (ErrNotSealed).
	defer func() {
		if err != nil {
			_ = j.Close()
		}
	}()
	for i := range j.ups {
		if j.ups[i].writer, err = s.NewWriter(j.ups[i].def.ID, cfg.Vnodes, &lsm.WriterOptions{Unchecked: cfg.Unchecked}); err != nil {
			return nil, err
		}
	}
	if j.meta, err = s.NewWriter(cfg.Meta, nil, nil); err != nil {
		return nil, err
	}
	m, err := j.loadMeta()
	if err != nil {
		return nil, err
	}
	if j.metaRow != nil && m.mode != cfg.Mode {
		return nil, errors.Newf("lsmstats/backfill: the job was created in mode %s, reopened in mode %s", m.mode, cfg.Mode)
	}
	if m.upstreams != nil && !slices.Equal(m.upstreams, ids) {
		return nil, errors.Newf("lsmstats/backfill: the job was created over upstream tables %v, reopened over %v", m.upstreams, ids)
	}
	if cfg.Mode == ModeSnapshot {
		if err := j.openLogStore(m); err != nil {
			return nil, err
		}
	}
	j.step, j.barrier, j.started, j.finished = m.step, m.barrier, m.started, m.finished
	j.limit = cfg.RateLimit
	if m.version >= 2 {
		j.limit = m.limit
	}
	j.eta = NewETA(&ETAOptions{Resume: &m.resume})
	j.run = m.resume.Run + 1
	j.epoch = s.EpochFloor() + 1
	if cfg.Vnodes == nil {
		// A job part's figure is of its vnodes, which a reopening may
		// change: it keeps no high-water mark across openings (doc.go).
		j.tracker.Restore(m.hwm)
	}
	defs := make([]lsm.TableDef, len(ups))
	for i, u := range ups {
		defs[i] = u.def
	}
	if err := cfg.Source.Resume(Position{Step: j.step, Epoch: s.CommittedEpoch(), Store: s, Upstream: defs[0], Upstreams: defs}); err != nil {
		return nil, errors.Wrapf(err, "lsmstats/backfill: resuming the source at step %d", j.step)
	}
	j.srcStep = j.step
	if j.finished && !j.started {
		j.sourceFinished(j.step)
	}
	if j.started {
		// Finished again once the vnodes' states say so (j.progress tells
		// the source): a job part reopened with vnodes moved in that had
		// not finished is not finished.
		j.finished = false
		if err := j.startActors(false); err != nil {
			return nil, err
		}
		rec, err := j.progress(context.Background(), s.CommittedEpoch(), j.srcStep, j.barrier, nil)
		if err != nil {
			return nil, err
		}
		j.applyRateChanges(rec)
		rec.Reopened = true // not a new checkpoint: OnCheckpoint does not see it
		j.initial = &rec
		j.setLast(rec)
	}
	return j, nil
}

// backfillStep is the step at which the backfill starts (Loader; 0 for a
// source without it: at once).
func (j *Job) backfillStep() uint64 {
	if l, ok := j.cfg.Source.(Loader); ok {
		return l.BackfillStep()
	}
	return 0
}

// sourceFinished tells the source, if it listens, that the backfill
// finished at step.
func (j *Job) sourceFinished(step uint64) {
	if f, ok := j.cfg.Source.(FinishListener); ok {
		f.Finished(step)
	}
}

// openUpstreams resolves the job's upstream tables (cfg.Upstreams, or the
// one of cfg.Upstream), creates them and their MVs and state tables and the
// job's metadata table, and allocates the ids of a named job. It sets
// cfg.Upstream, MV and State to the first upstream's.
func openUpstreams(cfg *JobConfig) ([]jobUpstream, error) {
	s := cfg.Store
	specs := cfg.Upstreams
	if len(specs) == 0 {
		specs = []UpstreamConfig{{Table: cfg.Upstream, MV: cfg.MV, State: cfg.State}}
	} else if cfg.Upstream.ID != 0 || cfg.Upstream.Name != "" || len(cfg.Upstream.PK) != 0 || cfg.MV != 0 || cfg.State != 0 {
		return nil, errors.New("lsmstats/backfill: a job with Upstreams has no Upstream, MV or State of its own")
	}
	ups := make([]jobUpstream, len(specs))
	seen := map[uint32]int{}
	for i, spec := range specs {
		def := spec.Table
		if def.ID == 0 && len(def.PK) == 0 && def.Name != "" {
			d, ok, err := TableByName(s, def.Name)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, errors.Wrapf(lsm.ErrUnknownTable, "lsmstats/backfill: no upstream table named %q", def.Name)
			}
			def = d
		}
		if err := s.CreateTable(def); err != nil {
			return nil, err
		}
		up, err := s.Table(def.ID)
		if err != nil {
			return nil, err
		}
		if k, dup := seen[up.ID]; dup {
			return nil, errors.Newf("lsmstats/backfill: upstreams %d and %d are both table %d", k, i, up.ID)
		}
		seen[up.ID] = i
		ups[i] = jobUpstream{def: up, mv: spec.MV, state: spec.State}
	}
	meta := lsm.TableDef{ID: cfg.Meta, Name: "backfill_job", VnodeCount: 1, PK: keys.Schema{keys.Uint64}}
	if cfg.Name != "" {
		for i, u := range ups {
			if u.mv != 0 || u.state != 0 {
				return nil, errors.Newf("lsmstats/backfill: job %q has its table ids allocated by name: the MV and State of upstream %d must be 0, not %d and %d",
					cfg.Name, i, u.mv, u.state)
			}
		}
		if cfg.Meta != 0 {
			return nil, errors.Newf("lsmstats/backfill: job %q has its table ids allocated by name: MV, State and Meta must be 0, not %d, %d and %d",
				cfg.Name, ups[0].mv, ups[0].state, cfg.Meta)
		}
	}
	for i := range ups {
		u := &ups[i]
		mv := u.def
		mv.ID, mv.Name = u.mv, "mv"
		state := StateTableDef(u.state, u.def.VnodeCount)
		if cfg.Name == "" {
			for _, def := range []lsm.TableDef{mv, state} {
				if err := s.CreateTable(def); err != nil {
					return nil, err
				}
			}
			continue
		}
		name := cfg.Name
		if i > 0 {
			name = fmt.Sprintf("%s.%d", cfg.Name, i)
		}
		mv.Name, state.Name = name, name+".backfill_state"
		var err error
		if u.mv, err = createNamed(s, mv); err != nil {
			return nil, err
		}
		if u.state, err = createNamed(s, state); err != nil {
			return nil, err
		}
	}
	if cfg.Name != "" {
		meta.Name = cfg.Name + ".backfill_job"
		var err error
		if cfg.Meta, err = createNamed(s, meta); err != nil {
			return nil, err
		}
	} else if err := s.CreateTable(meta); err != nil {
		return nil, err
	}
	if cfg.Mode == ModeSnapshot {
		vnodes := 0
		for _, u := range ups {
			vnodes = max(vnodes, u.def.VnodeCount)
		}
		log := LogStoreTableDef(cfg.LogStore, vnodes)
		if err := checkLogStoreLayout(s, *cfg, log); err != nil {
			return nil, err
		}
		switch {
		case cfg.Name != "" && cfg.LogStore != 0:
			return nil, errors.Newf("lsmstats/backfill: job %q has its table ids allocated by name: LogStore must be 0, not %d", cfg.Name, cfg.LogStore)
		case cfg.Name != "":
			log.Name = cfg.Name + ".log_store"
			var err error
			if cfg.LogStore, err = createNamed(s, log); err != nil {
				return nil, err
			}
		case cfg.LogStore == 0:
			return nil, errors.New("lsmstats/backfill: a snapshot backfill needs a log-store table: set LogStore (or Name)")
		default:
			if err := s.CreateTable(log); err != nil {
				return nil, err
			}
		}
	}
	cfg.Upstream, cfg.MV, cfg.State = ups[0].def, ups[0].mv, ups[0].state
	return ups, nil
}

func (j *Job) metaPK() []byte { return keys.AppendUint64(nil, 1) }

func (j *Job) loadMeta() (jobMeta, error) {
	row, ok, err := j.store.Get(j.cfg.Meta, 0, j.metaPK())
	if err != nil || !ok {
		return jobMeta{}, err
	}
	j.metaRow = row
	return decodeMeta(row)
}

// Tables returns the ids of the job's tables: the (first) upstream, its
// MV and backfill state table, and the job's metadata table.
func (j *Job) Tables() (upstream, mv, state, meta uint32) {
	return j.cfg.Upstream.ID, j.cfg.MV, j.cfg.State, j.cfg.Meta
}

// Upstreams returns the job's upstream tables, by index, with the ids of
// their MVs and state tables.
func (j *Job) Upstreams() []UpstreamConfig {
	out := make([]UpstreamConfig, len(j.ups))
	for i, u := range j.ups {
		out[i] = UpstreamConfig{Table: u.def, MV: u.mv, State: u.state}
	}
	return out
}

// Initial returns the progress at the committed epoch when the job was
// opened after a restart, marked Record.Reopened (nil for a job that had
// not started). JobConfig.OnCheckpoint does not get it; a Driver's
// OnCheckpoint does.
func (j *Job) Initial() *Record { return j.initial }

// Started reports whether the backfill started.
func (j *Job) Started() bool { return j.started }

// Finished reports whether every vnode of the backfill finished, as of the
// last checkpoint.
func (j *Job) Finished() bool { return j.finished }

// ProgressTracker returns the job's progress tracker.
func (j *Job) ProgressTracker() *ProgressTracker { return j.tracker }

// vnodeRanges splits a set of vnodes (in increasing order) into ranges of
// consecutive members, one per actor, of sizes within one of each other.
func vnodeRanges(vnodes []uint32, actors int) []*roaring.Bitmap {
	n := len(vnodes)
	out := make([]*roaring.Bitmap, actors)
	for i := range actors {
		out[i] = roaring.BitmapOf(vnodes[i*n/actors : (i+1)*n/actors]...)
	}
	return out
}

// allVnodes returns vnodes 0 to n-1.
func allVnodes(n int) []uint32 {
	out := make([]uint32, n)
	for v := range out {
		out[v] = uint32(v)
	}
	return out
}

// ownedVnodes returns the job's vnodes of an upstream table of vnodeCount
// vnodes, in increasing order: JobConfig.Vnodes, or every vnode.
func (j *Job) ownedVnodes(vnodeCount int) []uint32 {
	if j.cfg.Vnodes != nil {
		return j.cfg.Vnodes.ToArray()
	}
	return allVnodes(vnodeCount)
}

// ErrUnownedVnode is a source op on a vnode the job does not own
// (JobConfig.Vnodes).
var ErrUnownedVnode = errors.New("lsmstats/backfill: op on a vnode the job does not own")

// checkVnodes checks a job's JobConfig.Vnodes against its upstream tables
// and returns a copy of it.
func checkVnodes(cfg JobConfig, ups []jobUpstream) (*roaring.Bitmap, error) {
	vn := cfg.Vnodes.Clone()
	count := ups[0].def.VnodeCount
	for i, u := range ups[1:] {
		if u.def.VnodeCount != count {
			return nil, errors.Newf("lsmstats/backfill: JobConfig.Vnodes over upstream tables of different vnode counts: "+
				"table %d (upstream 0) has %d, table %d (upstream %d) %d", ups[0].def.ID, count, u.def.ID, i+1, u.def.VnodeCount)
		}
	}
	if !vn.IsEmpty() {
		if m := vn.Maximum(); m >= uint32(count) {
			return nil, errors.Wrapf(lsm.ErrInvalidVnode, "lsmstats/backfill: JobConfig.Vnodes holds vnode %d, upstream table %d has %d vnodes",
				m, ups[0].def.ID, count)
		}
	}
	if n := vn.GetCardinality(); n > 0 && uint64(cfg.Actors) > n {
		return nil, errors.Newf("lsmstats/backfill: %d actors for the %d vnodes of JobConfig.Vnodes", cfg.Actors, n)
	}
	return vn, nil
}

// vnodeSetString describes a set of vnodes for an error.
func vnodeSetString(b *roaring.Bitmap) string {
	if b.IsEmpty() {
		return "no vnodes"
	}
	if b.GetCardinality() == uint64(b.Maximum()-b.Minimum()+1) {
		return fmt.Sprintf("[%d, %d]", b.Minimum(), b.Maximum())
	}
	return fmt.Sprintf("%d vnodes in [%d, %d]", b.GetCardinality(), b.Minimum(), b.Maximum())
}

// startActors creates the actors over the current vnode split and runs their
// first barrier (fresh: the job starts now). On error it closes the actors
// it created.
func (j *Job) startActors(fresh bool) (err error) {
	if j.cfg.Mode == ModeSnapshot {
		if fresh {
			j.startSnapshot()
		}
		if err := j.pinSnapshot(); err != nil {
			return err
		}
	}
	defer func() {
		if err != nil {
			for _, a := range j.actors {
				_ = a.Close()
			}
			j.actors = nil
		}
	}()
	ranges := make([][]*roaring.Bitmap, len(j.ups))
	for u := range j.ups {
		up := &j.ups[u]
		up.owner = make([]int, up.def.VnodeCount)
		for v := range up.owner {
			up.owner[v] = -1 // not the job's (JobConfig.Vnodes)
		}
		ranges[u] = vnodeRanges(j.ownedVnodes(up.def.VnodeCount), j.cfg.Actors)
		for i, vn := range ranges[u] {
			for it := vn.Iterator(); it.HasNext(); {
				up.owner[it.Next()] = i
			}
		}
	}
	for i := range j.cfg.Actors {
		ac := ActorConfig{ID: i, Store: j.store, ChunkSize: j.cfg.ChunkSize, BarrierRows: j.cfg.BarrierRows,
			RowCount: j.persistRowCount(), Reporter: j.tracker.Reporter(i),
			Fixed: j.cfg.Mode == ModeSnapshot, FixedEpoch: j.snapEpoch, Order: j.cfg.SnapshotOrder}
		for u, up := range j.ups {
			ac.Upstreams = append(ac.Upstreams, ActorUpstream{Upstream: up.def.ID, MV: up.mv, State: up.state, Vnodes: ranges[u][i]})
		}
		j.limitMu.Lock()
		lim := rate.NewLimiter(j.actorLimit(), j.actorBurst())
		j.limiters = append(j.limiters, lim)
		j.limitMu.Unlock()
		ac.Limiter = lim
		a, err := NewActor(ac)
		if err != nil {
			return err
		}
		j.actors = append(j.actors, a)
	}
	// The first barrier: snapshots read at the committed epoch.
	prev, curr := j.store.CommittedEpoch(), j.epoch
	for _, a := range j.actors {
		if err := a.OnBarrier(context.Background(), Barrier{Prev: prev, Curr: curr, Checkpoint: true}); err != nil {
			return err
		}
	}
	return nil
}

// actorLimit is an actor's share of the job's rate limit; limitMu is held.
func (j *Job) actorLimit() rate.Limit {
	if j.limit <= 0 {
		return rate.Inf
	}
	return rate.Limit(j.limit / float64(j.cfg.Actors))
}

// actorBurst is an actor's limiter's burst: a second of its share (at
// least a chunk), so that the time a barrier spends outside snapshot reads
// (upstream writes, the commit, the figures) is made up and the limit holds
// as an average rate; limitMu is held.
func (j *Job) actorBurst() int {
	b := max(j.cfg.ChunkSize, 256)
	if l := j.actorLimit(); l != rate.Inf {
		b = max(b, int(math.Min(float64(l), 1<<30)))
	}
	return b
}

// RateLimit returns the job's rate limit in force, rows/s (0: none).
func (j *Job) RateLimit() float64 {
	j.limitMu.Lock()
	defer j.limitMu.Unlock()
	return j.limit
}

// SetRateLimit changes the job's rate limit (rows/s over all its actors; 0
// or less: none) from the actors' next snapshot reads on. It is safe to call
// while Run runs, from one goroutine at a time; the limit is persisted at
// the next checkpoint.
func (j *Job) SetRateLimit(limit float64) {
	if math.IsNaN(limit) || limit <= 0 || math.IsInf(limit, 1) {
		limit = 0
	}
	j.limitMu.Lock()
	defer j.limitMu.Unlock()
	j.limit = limit
	for _, l := range j.limiters {
		l.SetBurst(j.actorBurst())
		l.SetLimit(j.actorLimit())
	}
}

// applyRateChanges applies the rate changes the record's figure reached.
func (j *Job) applyRateChanges(rec Record) {
	pct := -1.0
	for _, f := range rec.Figures {
		if f.Bounds != nil {
			pct = f.Raw
			break
		}
	}
	n := j.changes
	for n < len(j.cfg.RateChanges) && pct >= j.cfg.RateChanges[n].AtPercent {
		n++
	}
	if n > j.changes {
		j.changes = n
		j.SetRateLimit(j.cfg.RateChanges[n-1].Limit)
	}
}

// persistRowCount reports whether an estimator needs per-vnode row counts:
// only then do actors persist them (the row-count approach's extra state).
func (j *Job) persistRowCount() bool {
	if j.cfg.Mode == ModeSnapshot {
		return true // the snapshot's rows read are the figure's
	}
	for _, e := range j.cfg.Estimators {
		if _, ok := e.(RowCountEstimator); ok {
			return true
		}
	}
	return false
}

// StateBytes returns the bytes of backfill state rows (pk and row) the
// actors of this process wrote, and what they would have been without row
// counts (the stats approach persists none).
func (j *Job) StateBytes() (written, statsOnly int64) {
	for _, a := range j.actors {
		written += a.stateBytes
		statsOnly += a.statsOnlyBytes
	}
	return written, statsOnly
}

// Close releases the job's writers; uncommitted work is discarded.
func (j *Job) Close() error {
	var err error
	for _, a := range j.actors {
		err = errors.CombineErrors(err, a.Close())
	}
	j.actors = nil
	j.limitMu.Lock()
	j.limiters = nil
	j.limitMu.Unlock()
	j.releaseSnapshot()
	ws := []*lsm.Writer{j.meta, j.logW}
	for _, u := range j.ups {
		ws = append(ws, u.writer)
	}
	for _, w := range ws {
		if w != nil {
			err = errors.CombineErrors(err, w.Abort())
		}
	}
	return err
}

// Result summarises a Run.
type Result struct {
	// Checkpoints is the number of checkpoints the Run made, and Last the
	// record of the last of them (zero without any).
	Checkpoints int
	Last        Record
	// Records are the record of every checkpoint, when
	// JobConfig.KeepRecords is set; nil otherwise.
	Records  []Record
	Epoch    uint64
	Finished bool
}

// Run drives the pipeline: one source step per epoch, written to the
// upstream table and sent to the actors as chunks over their channels, then a
// barrier; each actor runs in its own goroutine. Steps before the backfill
// only load the upstream table. Run returns when the job has finished and
// TailSteps more steps ran, or when ctx is done.
//
// A checkpoint's commit runs beside the next step, and its record (Score,
// OnCheckpoint, Result) comes once the commit landed, during that step:
// in an arrangement backfill whose Score, if any, sets ScoreLate, until a
// checkpoint at which every actor finished. Each checkpoint is durable
// whole all the same, and a crash leaves the last one that landed
// (docs/design.md, "Commits beside the next step").
func (j *Job) Run(ctx context.Context) (Result, error) { return j.runUntil(ctx, nil) }

// runUntil is Run, which also returns, with no error, after a checkpoint whose
// record stop (if set) returns true for (Driver's restarts).
//
// Without stop, a checkpoint's commit runs beside the next step (see
// pipelines); with it, every checkpoint commits before the next step
// starts, so that the job stops right after the checkpoint stop names.
func (j *Job) runUntil(ctx context.Context, stop func(Record) bool) (Result, error) {
	var res Result
	defer j.stopActors()
	j.pipeline = stop == nil
	defer func() { j.pipeline = false }()
	add := func(rec Record) {
		res.Checkpoints++
		res.Last = rec
		if j.cfg.KeepRecords {
			res.Records = append(res.Records, rec)
		}
	}
loop:
	for !j.finished || j.tail < j.cfg.TailSteps {
		if err := ctx.Err(); err != nil {
			if j.inflight != nil {
				// The checkpoint may have landed, its record untold: the
				// job's state is behind its store, as after a failed step.
				err = errors.CombineErrors(err, j.dropInflight())
				j.stopped = err
			}
			return res, err
		}
		recs, err := j.runStep(ctx, true)
		if err != nil {
			return res, err
		}
		for _, rec := range recs {
			add(rec)
			if stop != nil && stop(rec) {
				break loop
			}
		}
		if j.finished {
			j.tail++
		}
	}
	if j.inflight != nil {
		// Not reached while the pipeline stops at a finishing checkpoint
		// (pipelines); kept so that no commit outlives Run.
		rec, err := j.landInflight(ctx)
		if err != nil {
			j.stopped = err
			return res, err
		}
		add(rec)
	}
	res.Epoch, res.Finished = j.store.CommittedEpoch(), j.finished
	return res, nil
}

func (j *Job) onPhase(p string) {
	if j.cfg.OnPhase != nil {
		j.cfg.OnPhase(p)
	}
}

// Step runs one source step (one epoch and its barrier); ok reports whether
// it ended in a checkpoint of the job, whose record is returned.
func (j *Job) Step(ctx context.Context) (rec Record, ok bool, err error) {
	defer j.stopActors()
	recs, err := j.runStep(ctx, false)
	if err != nil || len(recs) == 0 {
		return Record{}, false, err
	}
	return recs[len(recs)-1], true, nil // one: a Step's commit is its own
}

// spawnActors starts one goroutine per actor.
func (j *Job) spawnActors(ctx context.Context) {
	j.acks = make(chan Ack, len(j.actors))
	for _, a := range j.actors {
		in := make(chan Message, 64)
		j.inputs = append(j.inputs, in)
		j.wg.Add(1)
		go func() {
			defer j.wg.Done()
			if err := a.Run(ctx, in, j.acks); err != nil {
				// Drain the input so the job never blocks on a dead actor.
				// An error in a barrier was acknowledged with it, but an
				// actor that stopped on ctx did so before taking its next
				// barrier: acknowledge those with the error, or the job
				// would wait for their acks forever.
				for m := range in {
					if b, ok := m.(Barrier); ok {
						j.acks <- Ack{Actor: a.cfg.ID, Epoch: b.Prev, Err: err}
					}
				}
			}
		}()
	}
}

func (j *Job) stopActors() {
	for _, in := range j.inputs {
		close(in)
	}
	j.wg.Wait()
	j.inputs = nil
}

// runStep runs one epoch; it returns a record at checkpoints of the job.
// A cancelled ctx stops it at the next point where it checks: between the
// upstream's ops (every cancelCheckOps), in the actors' snapshot reads
// (every chunk), between phases and in JobConfig.Score. A commit
// in progress is not interrupted (it is atomic): the cancellation is seen
// when it returns. Whatever the phase, the error is ctx's own. readAhead
// (Run's steps) lets the actors read the next barrier's rows while the
// step commits (Barrier.ReadAhead).
func (j *Job) runStep(ctx context.Context, readAhead bool) ([]Record, error) {
	if j.stopped != nil {
		return nil, errors.Wrapf(ErrStopped, "%v", j.stopped)
	}
	recs, err := j.step1(ctx, readAhead)
	if err != nil {
		err = errors.CombineErrors(err, j.dropInflight())
	}
	if err != nil && ctx.Err() != nil {
		// The actors' acks wrap ctx's error with their ids; a cancelled
		// step returns the cancellation itself.
		err = ctx.Err()
	}
	if err != nil {
		j.stopped = err
		return nil, err
	}
	return recs, nil
}

// ErrStopped is a Run or Step of a job whose earlier step failed or was
// cancelled: the job holds the stopped step's uncommitted work, and its
// source has moved past it. Close the job and open it again from the store.
var ErrStopped = errors.New("lsmstats/backfill: the job stopped in a step (failed or cancelled): close and reopen it")

// cancelCheckOps is how many upstream ops writeUpstream writes between two
// looks at its context.
const cancelCheckOps = 1024

func (j *Job) step1(ctx context.Context, readAhead bool) ([]Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !j.started && j.srcStep+1 >= j.backfillStep() {
		j.started = true
		if err := j.startActors(true); err != nil {
			return nil, err
		}
	}
	if j.started && j.inputs == nil {
		j.spawnActors(ctx)
	}
	epoch := j.epoch
	j.epoch++
	j.onPhase("upstream")
	ops, err := j.cfg.Source.Next(ctx)
	if err != nil {
		return nil, errors.Wrapf(err, "lsmstats/backfill: source step %d", j.srcStep+1)
	}
	j.srcStep++
	if ops, err = j.writeUpstream(ctx, epoch, ops); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if ops, err = j.route(epoch, ops); err != nil {
		return nil, err
	}
	checkpoint := true
	if j.started {
		j.barriers++
		checkpoint = j.barriers%j.cfg.CheckpointEvery == 0
		j.onPhase("backfill")
		if err := j.runActors(ops, Barrier{Prev: epoch, Curr: epoch + 1, Checkpoint: checkpoint, ReadAhead: readAhead}); err != nil {
			return nil, err
		}
		if checkpoint {
			j.barrier++
		}
	}
	// The last checkpoint's commit ran beside this step's upstream ops and
	// barrier: its record comes now, before this step's metadata, which
	// persists the high-water marks that record set.
	var recs []Record
	if j.inflight != nil {
		rec, err := j.landInflight(ctx)
		if err != nil {
			return nil, err
		}
		recs = append(recs, rec)
	}
	if err := j.writeMeta(epoch); err != nil {
		return nil, err
	}
	for _, u := range j.ups {
		if err := u.writer.Seal(epoch); err != nil {
			return nil, err
		}
	}
	if j.logW != nil {
		if err := j.writeAccounts(epoch); err != nil {
			return nil, err
		}
		if err := j.logW.Seal(epoch); err != nil {
			return nil, err
		}
	}
	if !checkpoint {
		return recs, ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if reports := j.tracker.freeze(); j.pipelines(readAhead, reports) {
		c := &inflightCommit{epoch: epoch, step: j.srcStep, barrier: j.barrier, ph: j.phaseInput(), done: make(chan error, 1)}
		go func() {
			err := j.store.Commit(epoch)
			if err == nil {
				// The figures too: the job's next commit waits for this
				// record, so they stay off the path between two commits.
				c.p, c.st, err = j.figures(epoch, reports, c.ph)
			}
			c.done <- err
		}()
		j.inflight = c
		return recs, nil
	}
	j.onPhase("commit")
	if err := j.store.Commit(epoch); err != nil {
		return nil, err
	}
	j.logUncommitted = 0
	j.step = j.srcStep
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !j.started {
		return recs, nil
	}
	j.onPhase("progress")
	rec, err := j.progress(ctx, epoch, j.srcStep, j.barrier, nil)
	if rec, err = j.checkpointed(ctx, rec, err); err != nil {
		return nil, err
	}
	return append(recs, rec), nil
}

// checkpointed completes the record of a committed checkpoint: the job's
// last figures, its rate changes, OnCheckpoint.
func (j *Job) checkpointed(ctx context.Context, rec Record, err error) (Record, error) {
	if err == nil {
		j.setLast(rec) // the checkpoint is committed: its figures stand
		err = ctx.Err()
	}
	if err != nil {
		return Record{}, err
	}
	j.applyRateChanges(rec)
	if j.cfg.OnCheckpoint != nil {
		j.cfg.OnCheckpoint(rec)
	}
	return rec, nil
}

// inflightCommit is a checkpoint whose Store.Commit runs on a goroutine of
// its own while the job runs the next step (pipelines), followed by its
// figures (from the actors' reports at its epoch, which the next barrier
// replaces), with what the rest of its record needs: the source step and
// barrier count it ended. p and st are the goroutine's until done.
type inflightCommit struct {
	epoch, step, barrier uint64
	ph                   *PhaseInput
	p                    Progress
	st                   stats.Snapshot
	done                 chan error
}

// pipelines reports whether a checkpoint of Run commits beside the next
// step, as Hummock syncs an epoch while the next one runs: the commit is
// the longest part of a step of the interleaved order (every vnode's
// buckets sealed anew), and the actors' barrier work and the next step's
// upstream ops need not wait for it. The writers keep the next epoch
// apart, the actors' snapshots read their replicated tables, and the next
// commit waits for this one; the record comes at the next step, from the
// reports frozen here and the statistics of this commit.
//
// Only where the record can come one step late: an arrangement backfill
// run without restarts asked (runUntil's stop), whose Score, if any,
// takes late records (JobConfig.ScoreLate; another reads the store and
// the source as they are at the checkpoint); and not at a checkpoint
// where every actor finished, whose record decides whether the job goes
// on (its tail steps then commit one by one as well).
func (j *Job) pipelines(readAhead bool, reports reportsAt) bool {
	return readAhead && j.pipeline && j.started && !j.finished && (j.cfg.Score == nil || j.cfg.ScoreLate) &&
		j.cfg.Mode != ModeSnapshot && !reports.finished()
}

// landInflight waits for the commit in flight and returns its record.
func (j *Job) landInflight(ctx context.Context) (Record, error) {
	c := j.inflight
	j.inflight = nil
	j.onPhase("commit")
	if err := <-c.done; err != nil {
		return Record{}, err
	}
	j.step = c.step
	j.onPhase("progress")
	rec, err := j.record(ctx, c.p, c.st, c.ph, c.epoch, c.step, c.barrier)
	return j.checkpointed(ctx, rec, err)
}

// dropInflight waits for the commit in flight, if any, whose record a
// failed or cancelled step leaves untold: the checkpoint may be durable
// all the same, as after a crash.
func (j *Job) dropInflight() error {
	c := j.inflight
	if c == nil {
		return nil
	}
	j.inflight = nil
	return <-c.done
}

// runActors sends the step's chunks (by vnode, in chunks of ChunkSize, update
// pairs kept together) and the barrier to every actor, and waits for every
// acknowledgement.
func (j *Job) runActors(ops []RowOp, b Barrier) error {
	per := make([][]RowOp, len(j.actors))
	for _, op := range ops {
		i := j.ups[op.Upstream].owner[op.Vnode]
		per[i] = append(per[i], op)
	}
	size := max(j.cfg.ChunkSize, 1)
	for i, in := range j.inputs {
		rest := per[i]
		for len(rest) > 0 {
			n := min(size, len(rest))
			if n < len(rest) && rest[n].Kind == UpdateInsert {
				n++
			}
			in <- Chunk{Ops: rest[:n]}
			rest = rest[n:]
		}
		in <- b
	}
	var err error
	for range j.inputs {
		ack := <-j.acks
		if ack.Err != nil {
			err = errors.CombineErrors(err, errors.Wrapf(ack.Err, "actor %d at epoch %d", ack.Actor, ack.Epoch))
		}
	}
	return err
}

// writeUpstream writes a step's ops to the upstream table, with the same
// rules as the MV's materialize step, and returns them as the actors get
// them: a checked op (CheckedDelete, CheckedUpdate) becomes the plain form
// with the old row the upstream writer sees, read right before it is
// written (so after the step's earlier ops).
func (j *Job) writeUpstream(ctx context.Context, epoch uint64, ops []RowOp) ([]RowOp, error) {
	for _, op := range ops {
		if op.Upstream < 0 || op.Upstream >= len(j.ups) {
			return nil, errors.Newf("lsmstats/backfill: upstream step %d: %s of pk %x names upstream %d, job of %d upstreams",
				j.srcStep, op.Kind, op.PK, op.Upstream, len(j.ups))
		}
		if j.cfg.Vnodes != nil && !j.cfg.Vnodes.Contains(uint32(op.Vnode)) {
			return nil, errors.Wrapf(ErrUnownedVnode, "upstream step %d: %s of pk %x in vnode %d of upstream %d (table %d): the job owns vnodes %s",
				j.srcStep, op.Kind, op.PK, op.Vnode, op.Upstream, j.ups[op.Upstream].def.ID, vnodeSetString(j.cfg.Vnodes))
		}
	}
	m := &multiMaterialize{j: j}
	var out []RowOp // the resolved ops, once a checked op was met
	done := 0       // ops[:done] are written
	flush := func(end int) error {
		for done < end {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := min(end-done, cancelCheckOps)
			if done+n < end && ops[done+n].Kind == UpdateInsert {
				n++ // an update pair stays together
			}
			if err := m.Apply(epoch, ops[done:done+n]); err != nil {
				return errors.Wrapf(err, "upstream step %d", j.srcStep)
			}
			if out != nil {
				out = append(out, ops[done:done+n]...)
			}
			done += n
		}
		return nil
	}
	for i, op := range ops {
		if op.Kind != CheckedDelete && op.Kind != CheckedUpdate {
			continue
		}
		if err := flush(i); err != nil {
			return nil, err
		}
		if out == nil {
			out = append(make([]RowOp, 0, len(ops)+1), ops[:i]...)
		}
		up := &j.ups[op.Upstream]
		old, ok, err := up.writer.Get(op.Vnode, op.PK)
		if err != nil {
			return nil, errors.Wrapf(err, "upstream step %d: %s of pk %x", j.srcStep, op.Kind, op.PK)
		}
		if !ok {
			return nil, errors.Wrapf(lsm.ErrInconsistentOp, "upstream step %d: %s of pk %s in vnode %d: no live row",
				j.srcStep, op.Kind, up.def.PK.Format(op.PK), op.Vnode)
		}
		var plain []RowOp
		if op.Kind == CheckedDelete {
			plain = []RowOp{{Kind: Delete, Upstream: op.Upstream, Vnode: op.Vnode, PK: op.PK, Row: old}}
		} else {
			plain = []RowOp{{Kind: UpdateDelete, Upstream: op.Upstream, Vnode: op.Vnode, PK: op.PK, Row: old},
				{Kind: UpdateInsert, Upstream: op.Upstream, Vnode: op.Vnode, PK: op.PK, Row: op.Row}}
		}
		if err := m.Apply(epoch, plain); err != nil {
			return nil, errors.Wrapf(err, "upstream step %d", j.srcStep)
		}
		out = append(out, plain...)
		done = i + 1
	}
	if err := flush(len(ops)); err != nil {
		return nil, err
	}
	if out == nil {
		return ops, nil
	}
	return out, nil
}

// multiMaterialize writes ops into their upstream tables, each table's in
// their order.
type multiMaterialize struct{ j *Job }

func (m *multiMaterialize) Apply(epoch uint64, ops []RowOp) error {
	for u, ops := range byUpstream(ops, len(m.j.ups)) {
		if len(ops) == 0 {
			continue
		}
		if err := (&Materialize{w: m.j.ups[u].writer}).Apply(epoch, ops); err != nil {
			if len(m.j.ups) > 1 {
				err = errors.Wrapf(err, "upstream %d", u)
			}
			return err
		}
	}
	return nil
}

func (j *Job) writeMeta(epoch uint64) error {
	m := jobMeta{step: j.srcStep, barrier: j.barrier, started: j.started, finished: j.finished, hwm: j.highWater(),
		limit: j.RateLimit(), resume: j.eta.Resume(), mode: j.cfg.Mode, phase: j.phase, snapEpoch: j.snapEpoch,
		snapTotals: j.snapTotals, logConsumed: j.logConsumed, upstreams: j.tracker.upstreams}
	row := encodeMeta(m)
	var err error
	if j.metaRow == nil {
		err = j.meta.Insert(epoch, 0, j.metaPK(), row)
	} else {
		err = j.meta.Update(epoch, 0, j.metaPK(), j.metaRow, row)
	}
	if err != nil {
		return err
	}
	j.metaRow = row
	return j.meta.Seal(epoch)
}

// highWater returns the display's high-water marks to persist: none for a
// job part (JobConfig.Vnodes), whose figure is of vnodes that a reopening
// may change.
func (j *Job) highWater() []Figure {
	if j.cfg.Vnodes != nil {
		return nil
	}
	return j.tracker.HighWater()
}

// progress computes the figures and the truth at a committed checkpoint
// epoch, which ended source step step and was checkpoint barrier of the
// job, from the actors' reports at it: reports if frozen (a pipelined
// commit's), else as they stand.
func (j *Job) progress(ctx context.Context, epoch, step, barrier uint64, reports reportsAt) (Record, error) {
	ph := j.phaseInput()
	p, st, err := j.figures(epoch, reports, ph)
	if err != nil {
		return Record{}, err
	}
	return j.record(ctx, p, st, ph, epoch, step, barrier)
}

// figures computes the estimators' figures at a committed checkpoint
// epoch from the store's statistics, with the actors' reports frozen at it
// (nil: as they stand). It touches no state of the job's own, so a
// pipelined commit's goroutine computes them beside the next step.
func (j *Job) figures(epoch uint64, reports reportsAt, ph *PhaseInput) (Progress, stats.Snapshot, error) {
	st := j.store.Stats()
	if st.PhysicalErr != nil {
		// The physical statistics lag behind the checkpoint (reading a new
		// SST's properties failed): a figure from them is not the
		// checkpoint's, and one shown now could exceed what a restart
		// computes. Refresh them, or fail the step.
		if err := j.store.RefreshStats(); err != nil {
			return Progress{}, st, errors.Wrapf(err, "lsmstats/backfill: physical statistics of epoch %d", epoch)
		}
		st = j.store.Stats()
	}
	p, err := j.tracker.progressAt(reports, epoch, st, ph)
	return p, st, err
}

// record makes the record of a checkpoint from its figures p (statistics
// st, phase input ph), and hands it to the ETA and to Score.
func (j *Job) record(ctx context.Context, p Progress, st stats.Snapshot, ph *PhaseInput, epoch, step, barrier uint64) (Record, error) {
	rec := Record{Barrier: barrier, Epoch: epoch, Step: step, Time: time.Now(), Truth: -1, Figures: p.Figures, Finished: p.Finished,
		Vnodes: p.Vnodes, Estimates: p.Estimates, RateLimit: j.RateLimit(), Upstreams: p.Upstreams}
	if ph != nil {
		rec.Phase, rec.LogConsumed, rec.LogPending = ph.Phase.String(), ph.LogConsumed, uint64(ph.logPending(st))
		rec.SnapshotEpoch, rec.SnapshotTotals = ph.SnapshotEpoch, slices.Clone(ph.SnapshotTotals)
		if ph.Phase == PhaseSnapshot && p.VnodesFinished {
			// The snapshot is read: the log store is next. The pin goes
			// once JobConfig.Score, which may read the snapshot epoch,
			// has run.
			j.phase = PhaseLogStore
			defer j.releaseSnapshot()
		}
	}
	for _, v := range p.Vnodes {
		rec.SnapshotRows += v.RowCount
	}
	if p.Finished && !j.finished {
		j.finished = true
		j.sourceFinished(step)
	}
	rec.Background = j.background()
	rec.ETA = j.observeETA(rec)
	if j.cfg.Score != nil {
		// Before the deferred release of a snapshot read to its end: the
		// score may read the pinned snapshot.
		if err := j.cfg.Score(ctx, &rec); err != nil {
			return rec, err
		}
	}
	return rec, nil
}

// observeETA feeds the checkpoint to the job's ETA: the first Accountant's
// account of the job and of each actor's vnodes, and the snapshot rows
// read. The run is the ETA's carried run + 1 in a new process (every
// restart, and so every rescale, starts a new run). An observation the ETA
// refuses (a wall clock that went back) leaves its last forecast.
//
// A snapshot backfill's work is one stream over its phases: the ETA sees
// the job's phase-aware figure (snapshot rows read + log rows consumed, of
// the snapshot's rows + the log rows), its rows read counting the log rows
// consumed too, and the log store's growth as the upstream's churn; the job
// finishes once joined.
func (j *Job) observeETA(rec Record) ETAForecast {
	if rec.Phase != "" {
		for _, f := range rec.Figures {
			if f.Bounds == nil {
				continue
			}
			o := ETAObservation{Time: rec.Time, Run: j.run, Actors: len(j.actors), RateLimit: rec.RateLimit}
			o.Consumed, o.ConsumedLow, o.ConsumedHigh, o.Total = f.Consumed, f.Consumed, f.Consumed, f.Total
			o.SnapshotRows, o.Finished = rec.SnapshotRows+rec.LogConsumed, rec.Finished
			o.RateChanges = j.cfg.RateChanges[j.changes:]
			o.Background = rec.Background
			fc, _ := j.eta.Observe(o)
			return fc
		}
		return ETAForecast{Time: rec.Time}
	}
	if rec.Estimates == nil {
		return ETAForecast{Time: rec.Time}
	}
	o := observation(rec, j.run, len(j.actors), func(v VnodeState) (int, bool) {
		if v.Upstream >= len(j.ups) || int(v.Vnode) >= len(j.ups[v.Upstream].owner) || j.ups[v.Upstream].owner[v.Vnode] < 0 {
			return 0, false
		}
		return j.ups[v.Upstream].owner[v.Vnode], true
	})
	o.RateChanges = j.cfg.RateChanges[j.changes:] // the scheduled limits still to come
	fc, _ := j.eta.Observe(o)
	return fc
}

// background returns the store's background work for the ETA.
func (j *Job) background() *ETABackground {
	written, busy := j.store.Background()
	return &ETABackground{Written: written, Busy: busy}
}

// Compare scans each upstream table and its MV at the committed epoch and
// returns an error naming the first difference; a job part
// (JobConfig.Vnodes) compares its vnodes only.
func (j *Job) Compare() error {
	snap, err := j.store.Snapshot()
	if err != nil {
		return err
	}
	defer snap.Close()
	for u, up := range j.ups {
		if err := j.compare(snap, up); err != nil {
			if len(j.ups) > 1 {
				err = errors.Wrapf(err, "upstream %d (table %d)", u, up.def.ID)
			}
			return err
		}
	}
	return nil
}

func (j *Job) compare(snap *lsm.Snapshot, up jobUpstream) error {
	for _, v := range j.ownedVnodes(up.def.VnodeCount) {
		a, err := snap.NewIter(up.def.ID, uint16(v), nil, nil)
		if err != nil {
			return err
		}
		b, err := snap.NewIter(up.mv, uint16(v), nil, nil)
		if err != nil {
			_ = a.Close()
			return err
		}
		okA, okB := a.First(), b.First()
		for okA || okB {
			if !okA || !okB || !bytes.Equal(a.PK(), b.PK()) || !bytes.Equal(a.Row(), b.Row()) {
				// An iterator stopped by an error (a corrupt block) is not a
				// table that ended: report the error, not a difference.
				if err := errors.CombineErrors(a.Error(), b.Error()); err != nil {
					_ = a.Close()
					_ = b.Close()
					return err
				}
				diff := describe("upstream", okA, a) + " vs " + describe("mv", okB, b)
				_ = a.Close()
				_ = b.Close()
				return errors.Newf("lsmstats/backfill: MV differs from upstream in vnode %d at epoch %d: %s", v, snap.Epoch(), diff)
			}
			okA, okB = a.Next(), b.Next()
		}
		if err := errors.CombineErrors(a.Close(), b.Close()); err != nil {
			return err
		}
	}
	return nil
}

func describe(name string, ok bool, it *lsm.Iter) string {
	if !ok {
		return name + " has no more rows"
	}
	return fmt.Sprintf("%s has pk %x row %q", name, it.PK(), truncate(it.Row()))
}

func truncate(b []byte) []byte {
	if len(b) > 16 {
		return b[:16]
	}
	return b
}

// Figure returns the figure of an approach.
func (r Record) Figure(approach string) Figure { return FigureOf(r.Figures, approach) }
