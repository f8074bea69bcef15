package backfilltest

import (
	"bytes"
	"context"
	"slices"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/backfill"
)

// Model is an incremental oracle over a user's own upstream ops: it keeps
// the live pks of each vnode, applies every step the job takes from the
// source (Observe), and answers the truth from them, with no scan per
// checkpoint. On a restart it is rebuilt once from the committed upstream
// table (Resume: one scan), never by replaying the source. Not safe for
// concurrent use; the job calls its source and oracle from one goroutine.
//
// In a job over several upstream tables, a model is the oracle of one of
// them (NewModelOf): it applies that table's ops alone, and Observe keeps
// one model per table.
type Model struct {
	vnodes   []modelVnode
	upstream int
}

type modelVnode struct {
	live   map[string]struct{}
	sorted [][]byte // the live pks in order, nil when stale
}

// NewModel returns an empty model of a table with vnodeCount vnodes.
func NewModel(vnodeCount int) *Model { return NewModelOf(0, vnodeCount) }

// NewModelOf returns an empty model of upstream table upstream (its index
// in the job's JobConfig.Upstreams), with vnodeCount vnodes.
func NewModelOf(upstream, vnodeCount int) *Model {
	m := &Model{vnodes: make([]modelVnode, vnodeCount), upstream: upstream}
	for i := range m.vnodes {
		m.vnodes[i].live = map[string]struct{}{}
	}
	return m
}

var _ Oracle = (*Model)(nil)

// Apply applies a step's ops of the model's table (others are skipped);
// checked ops are resolved against the model. An op that contradicts it
// (an insert of a live pk, a delete or update of a pk that is not live)
// is an error.
func (m *Model) Apply(ops []backfill.RowOp) error {
	for _, op := range ops {
		if op.Upstream != m.upstream {
			continue
		}
		if int(op.Vnode) >= len(m.vnodes) {
			return errors.Newf("backfilltest: op of pk %x in vnode %d, model of %d vnodes", op.PK, op.Vnode, len(m.vnodes))
		}
		v := &m.vnodes[op.Vnode]
		_, live := v.live[string(op.PK)]
		switch op.Kind {
		case backfill.Insert:
			if live {
				return errors.Newf("backfilltest: insert of live pk %x in vnode %d", op.PK, op.Vnode)
			}
			v.live[string(op.PK)] = struct{}{}
			v.sorted = nil
		case backfill.Delete, backfill.CheckedDelete:
			if !live {
				return errors.Newf("backfilltest: %s of pk %x in vnode %d, which is not live", op.Kind, op.PK, op.Vnode)
			}
			delete(v.live, string(op.PK))
			v.sorted = nil
		case backfill.UpdateDelete, backfill.CheckedUpdate:
			if !live {
				return errors.Newf("backfilltest: %s of pk %x in vnode %d, which is not live", op.Kind, op.PK, op.Vnode)
			}
		case backfill.UpdateInsert:
		default:
			return errors.Newf("backfilltest: unknown op kind %s", op.Kind)
		}
	}
	return nil
}

// Rows implements Oracle. The model answers for the steps it has
// applied, which at a checkpoint are exactly the committed epoch's.
func (m *Model) Rows(_ uint64, vnode uint16, cursor []byte) (behind, total int64, err error) {
	if int(vnode) >= len(m.vnodes) {
		return 0, 0, errors.Newf("backfilltest: vnode %d, model of %d vnodes", vnode, len(m.vnodes))
	}
	v := &m.vnodes[vnode]
	if v.sorted == nil {
		v.sorted = make([][]byte, 0, len(v.live))
		for pk := range v.live {
			v.sorted = append(v.sorted, []byte(pk))
		}
		slices.SortFunc(v.sorted, bytes.Compare)
	}
	if cursor != nil {
		n, found := slices.BinarySearchFunc(v.sorted, cursor, bytes.Compare)
		if found {
			n++
		}
		behind = int64(n)
	}
	return behind, int64(len(v.sorted)), nil
}

// Resume rebuilds the model from the upstream table at the position a job
// resumes at (one scan of each vnode).
func (m *Model) Resume(at backfill.Position) error {
	for i := range m.vnodes {
		m.vnodes[i] = modelVnode{live: map[string]struct{}{}}
	}
	table := at.Upstream
	if len(at.Upstreams) > 0 {
		if m.upstream >= len(at.Upstreams) {
			return errors.Newf("backfilltest: model of upstream %d, job of %d upstreams", m.upstream, len(at.Upstreams))
		}
		table = at.Upstreams[m.upstream]
	}
	snap, err := at.Store.Pin(at.Epoch)
	if err != nil {
		return errors.Wrapf(err, "backfilltest: model resume at epoch %d", at.Epoch)
	}
	defer snap.Close()
	for vn := range m.vnodes {
		it, err := snap.NewIter(table.ID, uint16(vn), nil, nil)
		if err != nil {
			return err
		}
		for ok := it.First(); ok; ok = it.Next() {
			m.vnodes[vn].live[string(it.PK())] = struct{}{}
		}
		if err := it.Close(); err != nil {
			return err
		}
	}
	return nil
}

// Observe returns src with the models kept up to date: each is rebuilt
// from its table when the job resumes, and applies every step the source
// produces. The result is a backfill.Loader and a backfill.FinishListener
// that forward to src's, if it has them. Pass it as the job's Source and the model as its Oracle
// (Truth; in a job over several tables, one model per table, each its
// table's Oracle).
func Observe(src backfill.Source, ms ...*Model) backfill.Source {
	return &observed{Source: src, ms: ms}
}

type observed struct {
	backfill.Source
	ms []*Model
}

func (o *observed) Resume(at backfill.Position) error {
	if err := o.Source.Resume(at); err != nil {
		return err
	}
	for _, m := range o.ms {
		if err := m.Resume(at); err != nil {
			return err
		}
	}
	return nil
}

// BackfillStep forwards the source's (backfill.Loader; 0 without: the
// backfill starts at once).
func (o *observed) BackfillStep() uint64 {
	if l, ok := o.Source.(backfill.Loader); ok {
		return l.BackfillStep()
	}
	return 0
}

// Finished forwards to the source's, if it has one
// (backfill.FinishListener).
func (o *observed) Finished(step uint64) {
	if f, ok := o.Source.(backfill.FinishListener); ok {
		f.Finished(step)
	}
}

func (o *observed) Next(ctx context.Context) ([]backfill.RowOp, error) {
	ops, err := o.Source.Next(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range o.ms {
		if err := m.Apply(ops); err != nil {
			return nil, err
		}
	}
	return ops, nil
}
