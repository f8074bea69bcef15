package backfill

import (
	"context"
	"fmt"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/lsm"
)

// Driver runs a backfill job to its end through every opening it takes:
// it opens the job (OpenJob, with the configuration Open returns), runs
// it, and when Restart asks for it after a checkpoint, stops the job
// there, as a cancel, a crash or a rescale would, and opens it again from
// what the store persisted. OnCheckpoint gets every record on the way, in
// order: each new checkpoint's, and after each opening of a job that had
// started before (a restart, or a Run in a new process after a crash or a
// cancel) the figure the reopened job shows before its first new barrier,
// marked Record.Reopened.
//
// A Driver holds no state between Runs, and one Run at a time may use it.
// A Run that returns an error, ctx's included, leaves the job as its last
// checkpoint committed it: Run again (in this process, or in the next
// one) to resume it, and OnCheckpoint's first record is then the
// reopened figure.
type Driver struct {
	// Open returns the configuration of the job for each opening: the
	// same job (the same tables, or the same Name) on the store to use,
	// with its Source, which OpenJob resumes after the last committed step.
	// It may return the same Source each time. Its JobConfig.OnCheckpoint,
	// if set, still sees the job's new checkpoints (not the reopened
	// figures); Actors is replaced by the last Restart's, if positive. It
	// is required.
	Open func(Opening) (JobConfig, error)

	// OnOpen, if set, is called with each job OpenJob opened, before the
	// driver delivers its reopened figure and runs it; an error ends Run
	// (the job is closed). It may run steps of the job itself (Job.Step):
	// bench times the steps that load its table apart that way. Their
	// checkpoints' records reach OnCheckpoint too, but Restart is not
	// asked about them.
	OnOpen func(*Job) error

	// OnCheckpoint, if set, gets every record, the reopened figures
	// included (Record.Reopened), on the goroutine that called Run.
	OnCheckpoint func(Record)

	// Restart, if set, is asked after each new checkpoint of Run (its
	// record already delivered) whether to stop the job there and open it
	// again at once; ok false goes on. Nil means no restart. A job
	// reopened after it finished runs its TailSteps again, so a Restart
	// that keeps saying yes never lets Run end: count the restarts. With
	// Restart set, each checkpoint commits before the next step starts
	// (not beside it, as Job.Run's do), so that a restart stops the job
	// right after the checkpoint it was asked at.
	Restart func(Record) (r Restart, ok bool)

	// OnEnd, if set, is called with the job once it finished and ran its
	// JobConfig.TailSteps, before the driver closes it: to compare the MV
	// with its upstream (Job.Compare), say. Its error is Run's.
	OnEnd func(*Job) error
}

// Opening is what Driver.Open is told about the opening it configures.
type Opening struct {
	// N counts the openings of this Run, from 0.
	N int
	// Restart is how the opening before this one ended; nil for the
	// first opening of a Run.
	Restart *Restart
	// Store is the store of the opening before, still open: after a
	// RestartClose or a RestartCancel. It is nil for the first opening of
	// a Run and after a RestartCrash, whose store the driver closed: Open
	// opens it again (lsm.Open on the same directory).
	Store *lsm.Store
}

// Restart is how a Driver stops a job that it then opens again at once.
type Restart struct {
	// Kind is how the job stops.
	Kind RestartKind
	// Actors, if positive, is the number of actors of the reopened job and
	// of every later opening of the Run (a rescale: the vnodes are split
	// anew, each resuming from its persisted state); 0 keeps Open's.
	Actors int
}

// RestartKind is how a Driver stops a job before opening it again.
type RestartKind int

const (
	// RestartClose closes the job (Job.Close) after its checkpoint: what
	// a deliberate restart does. The store stays open.
	RestartClose RestartKind = iota
	// RestartCancel cancels the job's context right after its checkpoint,
	// while its actors read the next barrier's snapshot rows ahead
	// (Barrier.ReadAhead), then closes it: what a caller's cancellation
	// does, its work in flight discarded. The store stays open.
	RestartCancel
	// RestartCrash drops the job after its checkpoint without closing
	// it, its writers holding their uncommitted work, and closes the store
	// under it: what a crash of the process leaves behind, the store
	// keeping what the last checkpoint committed. Open gets no store
	// (Opening.Store is nil) and opens it again.
	RestartCrash
)

// String returns "close", "cancel" or "crash".
func (k RestartKind) String() string {
	switch k {
	case RestartClose:
		return "close"
	case RestartCancel:
		return "cancel"
	case RestartCrash:
		return "crash"
	}
	return fmt.Sprintf("RestartKind(%d)", int(k))
}

// Run drives the job to its end: it opens it, runs it (Job.Run) and
// restarts it whenever Restart asks, until a job has finished and run its
// JobConfig.TailSteps; then it calls OnEnd and closes the job. The Result
// sums every opening: Checkpoints counts the new checkpoints, Last is the
// last record delivered, Records (with the JobConfig's KeepRecords) holds
// every record delivered, reopened figures included, and Epoch and
// Finished are the last job's. Run closes every job it opened, but the
// one a RestartCrash drops, whose store it closes instead; the store of
// the last opening stays open: it is the caller's (Open's) to close. On
// an error, Run returns what it had delivered so far.
func (d *Driver) Run(ctx context.Context) (Result, error) {
	var res Result
	if d.Open == nil {
		return res, errors.New("lsmstats/backfill: Driver.Open is required")
	}
	var o Opening
	actors := 0
	for ; ; o.N++ {
		cfg, err := d.Open(o)
		if err != nil {
			return res, errors.Wrapf(err, "lsmstats/backfill: opening %d of the job", o.N)
		}
		if actors > 0 {
			cfg.Actors = actors
		}
		keep := cfg.KeepRecords
		cfg.KeepRecords = false // the driver keeps them, across openings
		deliver := func(r Record) {
			res.Last = r
			if keep {
				res.Records = append(res.Records, r)
			}
			if d.OnCheckpoint != nil {
				d.OnCheckpoint(r)
			}
		}
		own := cfg.OnCheckpoint
		cfg.OnCheckpoint = func(r Record) {
			if own != nil {
				own(r)
			}
			res.Checkpoints++
			deliver(r)
		}
		j, err := OpenJob(cfg)
		if err != nil {
			return res, err
		}
		if d.OnOpen != nil {
			if err := d.OnOpen(j); err != nil {
				return res, errors.CombineErrors(err, j.Close())
			}
		}
		if r := j.Initial(); r != nil {
			deliver(*r)
		}
		runCtx, cancel := context.WithCancel(ctx)
		var restart *Restart
		var stop func(Record) bool // nil: no restart to ask, so Run's commits may pipeline
		if d.Restart != nil {
			stop = func(r Record) bool {
				rs, ok := d.Restart(r)
				if !ok {
					return false
				}
				restart = &rs
				if rs.Kind == RestartCancel {
					cancel() // the actors reading ahead see it
				}
				return true
			}
		}
		run, err := j.runUntil(runCtx, stop)
		cancel()
		if err != nil {
			return res, errors.CombineErrors(err, j.Close())
		}
		if restart == nil {
			res.Epoch, res.Finished = run.Epoch, run.Finished
			if d.OnEnd != nil {
				if err := d.OnEnd(j); err != nil {
					return res, errors.CombineErrors(err, j.Close())
				}
			}
			return res, j.Close()
		}
		o.Restart, o.Store = restart, cfg.Store
		if restart.Actors > 0 {
			actors = restart.Actors
		}
		switch restart.Kind {
		case RestartClose, RestartCancel:
			if err := j.Close(); err != nil {
				return res, err
			}
		case RestartCrash:
			// The job's writers stay open: the store's Close discards
			// what they buffered, as a crash would.
			o.Store = nil
			if err := cfg.Store.Close(); err != nil {
				return res, errors.Wrap(err, "lsmstats/backfill: closing the store under a crashed job")
			}
		default:
			_ = j.Close()
			return res, errors.Newf("lsmstats/backfill: unknown restart kind %d", int(restart.Kind))
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
	}
}
