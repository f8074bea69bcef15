package soak

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/bench/genjob"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/lsm"
)

// JobSpec is one backfill job of the soak: its workload and its tables.
// Jobs follow one another in one store; job i uses tables 10(i+1)+1 to +4.
type JobSpec struct {
	Index           int             `json:"index"`
	Workload        workload.Params `json:"workload"`
	Preset          string          `json:"preset"`
	ChunkSize       int             `json:"chunk_size"`
	BarrierRows     int             `json:"barrier_rows"`
	CheckpointEvery int             `json:"checkpoint_every"`
	// SnapshotOrder is the actors' read order.
	SnapshotOrder backfill.SnapshotOrder `json:"snapshot_order"`
}

// presets are the churning workloads the soak rotates through.
var presets = []string{"update-churn", "delete-churn", "insert-during", "mixed"}

// jobSpec derives job i from the soak's seed.
func jobSpec(seed uint64, i int) JobSpec {
	r := rand.New(rand.NewPCG(seed, uint64(i)+1000))
	preset := presets[i%len(presets)]
	vnodes := []int{8, 16, 32, 64}[r.IntN(4)]
	rows := 8000 + r.IntN(32000)
	p, err := workload.Preset(preset, rows, vnodes, seed^uint64(i)*0x9e3779b97f4a7c15)
	if err != nil {
		panic(err) // the presets above exist
	}
	if r.IntN(3) == 0 {
		p.Zipf = 1.1 + r.Float64() // skewed: hot vnodes
	}
	spec := JobSpec{Index: i, Workload: p, Preset: preset, ChunkSize: 32 << r.IntN(3),
		BarrierRows: 64 << r.IntN(3), CheckpointEvery: 1 + r.IntN(2)}
	// Loads of several steps, and churn spread over about the backfill.
	spec.Workload.BatchRows = 2000 + r.IntN(4000)
	spec.Workload.DuringSteps = max(2, rows/(2*spec.BarrierRows))
	spec.SnapshotOrder = []backfill.SnapshotOrder{backfill.Interleaved, backfill.VnodeOrder}[r.IntN(2)]
	return spec
}

func (j JobSpec) String() string {
	return fmt.Sprintf("job %d (%s, %d rows, %d vnodes, zipf %.2f, %s order)", j.Index, j.Preset, j.Workload.Rows,
		j.Workload.VnodeCount, j.Workload.Zipf, j.SnapshotOrder)
}

// Table ids of a job.
func (j JobSpec) upstream() uint32 { return uint32(10*(j.Index+1) + 1) }
func (j JobSpec) mv() uint32       { return j.upstream() + 1 }
func (j JobSpec) state() uint32    { return j.upstream() + 2 }
func (j JobSpec) meta() uint32     { return j.upstream() + 3 }

// Hooks report what a job does; nil functions are skipped.
type Hooks struct {
	// OnInitial sees the figure recovered at open (a started job only).
	OnInitial func(backfill.Record)
	// OnStep sees each committed step of the load (before the backfill).
	OnStep func(step uint64)
	// OnCheckpoint sees each checkpoint of the backfill.
	OnCheckpoint func(backfill.Record)
}

// jobConfig is the backfill configuration of a job: the workers run it,
// the checks open it to recover the committed state.
func jobConfig(s *lsm.Store, spec JobSpec, actors int, g *workload.Generator, h Hooks) backfill.JobConfig {
	return backfill.JobConfig{
		Store: s, Upstream: g.Params().TableDef(spec.upstream()), MV: spec.mv(), State: spec.state(), Meta: spec.meta(),
		Actors: actors, ChunkSize: spec.ChunkSize, BarrierRows: spec.BarrierRows, CheckpointEvery: spec.CheckpointEvery,
		SnapshotOrder: spec.SnapshotOrder, Source: genjob.Source{G: g}, Score: backfilltest.Oracles(genjob.Oracle{G: g}), OnCheckpoint: h.OnCheckpoint,
	}
}

// RunJob recovers a job from the committed state of the store and runs it
// to its end (the backfill finished and its tail steps ran), or until ctx
// is done or an error stops it. It is the soak's only driver of a job: to
// soak another job API, port this function (and jobConfig).
func RunJob(ctx context.Context, s *lsm.Store, spec JobSpec, actors int, h Hooks) (finished bool, err error) {
	g, err := workload.New(spec.Workload)
	if err != nil {
		return false, err
	}
	j, err := backfill.OpenJob(jobConfig(s, spec, actors, g, h))
	if err != nil {
		return false, err
	}
	defer func() { err = errors.CombineErrors(err, j.Close()) }()
	if r := j.Initial(); r != nil && h.OnInitial != nil {
		h.OnInitial(*r)
	}
	for !j.Started() {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if _, _, err := j.Step(ctx); err != nil {
			return false, err
		}
		// The step that starts the backfill is its first barrier, committed
		// only when it is a checkpoint (OnCheckpoint reports it then): it is
		// no committed step of the load.
		if h.OnStep != nil && !j.Started() {
			h.OnStep(g.Step())
		}
	}
	res, err := j.Run(ctx)
	return res.Finished, err
}
