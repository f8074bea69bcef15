package genjob

import (
	"context"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/bench/workload"
)

// Part is the upstream of one part of a job whose vnodes several stores
// share (backfill.JobConfig.Vnodes): the whole table's generator, whose
// steps it filters to the ops on the part's vnodes. Every part of the job
// runs a generator of the same parameters, so the parts' ops together are
// the whole table's, each on the store that owns its vnode. The set can
// change between steps (SetVnodes: a node's vnodes change at a move);
// the job over the part must then be reopened with the same set.
//
// Its Resume cannot rebuild the generator's model from the store, as
// Source's does: the store holds the part's vnodes only, and the next
// steps' ops depend on every vnode's rows. It replays the generator from
// step 0 to the job's committed step instead (workload.Generator.Replay,
// deterministic: step k's ops depend on the seed, k and the model after
// step k-1 only), in memory: it costs the generation of every op of those
// steps (O(ops), each row's value generated; TestPart logs the time),
// about what generating them cost the first time, and none of their
// writes or reads. A part's generator therefore holds the whole
// table's model, on every store.
//
// Not safe for concurrent use.
type Part struct {
	// G is the generator, at the step the part last produced; Resume may
	// replace it with a new one.
	G      *workload.Generator
	vnodes *roaring.Bitmap
}

var _ backfill.Source = (*Part)(nil)

// NewPart returns the part of g's table over vnodes (a copy is kept).
func NewPart(g *workload.Generator, vnodes *roaring.Bitmap) *Part {
	return &Part{G: g, vnodes: vnodes.Clone()}
}

// SetVnodes changes the part's vnodes from the next step on (a copy is
// kept).
func (p *Part) SetVnodes(vnodes *roaring.Bitmap) { p.vnodes = vnodes.Clone() }

// Vnodes returns a copy of the part's vnodes.
func (p *Part) Vnodes() *roaring.Bitmap { return p.vnodes.Clone() }

// Next implements backfill.Source: the generator's next step, its ops on
// the part's vnodes only.
func (p *Part) Next(context.Context) ([]backfill.RowOp, error) {
	ops := p.G.Next()
	kept := ops[:0]
	for _, op := range ops {
		if p.vnodes.Contains(uint32(op.Vnode)) {
			kept = append(kept, op)
		}
	}
	return appendOps(nil, 0, kept), nil
}

// Resume implements backfill.Source: the generator replays steps 1 to
// at.Step in memory (a new generator of the same parameters when it is
// past at.Step already); the store is not read.
func (p *Part) Resume(at backfill.Position) error {
	if p.G.Step() > at.Step {
		g, err := workload.New(p.G.Params())
		if err != nil {
			return errors.Wrap(err, "genjob: part")
		}
		p.G = g
	}
	p.G.Replay(at.Step)
	return nil
}

// Step implements backfill.Source.
func (p *Part) Step() uint64 { return p.G.Step() }

// BackfillStep implements backfill.Source.
func (p *Part) BackfillStep() uint64 { return p.G.BackfillStep() }

// Finished implements backfill.Source.
func (p *Part) Finished(uint64) {}

// Oracle returns the exact truth of the part's vnodes from the generator's
// model (as Oracle): asked about a vnode the part does not own, it
// returns an error naming it. It follows the part's generator and vnodes
// as they change.
func (p *Part) Oracle() backfilltest.Oracle { return partOracle{p} }

type partOracle struct{ p *Part }

func (o partOracle) Rows(epoch uint64, vnode uint16, cursor []byte) (behind, total int64, err error) {
	if !o.p.vnodes.Contains(uint32(vnode)) {
		return 0, 0, errors.Newf("genjob: the oracle of a part over %d vnodes asked about vnode %d, not one of them",
			o.p.vnodes.GetCardinality(), vnode)
	}
	return Oracle{G: o.p.G}.Rows(epoch, vnode, cursor)
}
