// Package genjob runs workload generators as a backfill job's upstream:
// a Generator as the job's Source and its model as an oracle of its truth
// (backfilltest.Oracle), several generators as the source of a job
// over several tables (Multi), and a generator's workload restricted to
// the vnodes of one part of a job over several stores (Part).
// It is the one package that knows both sides, so that package workload
// stays a pure generator and package backfill knows no generator.
package genjob

import (
	"context"
	"slices"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/lsm"
)

// Source adapts a Generator to a backfill job's upstream.
type Source struct{ G *workload.Generator }

var _ backfill.Source = Source{}

// Next implements backfill.Source: updates become UpdateDelete/UpdateInsert
// pairs.
func (s Source) Next(context.Context) ([]backfill.RowOp, error) {
	return appendOps(nil, 0, s.G.Next()), nil
}

// appendOps appends a generator's ops as row ops of upstream u.
func appendOps(out []backfill.RowOp, u int, ops []workload.Op) []backfill.RowOp {
	out = slices.Grow(out, len(ops))
	for _, op := range ops {
		switch op.Kind {
		case workload.Insert:
			out = append(out, backfill.RowOp{Kind: backfill.Insert, Upstream: u, Vnode: op.Vnode, PK: op.PK, Row: op.NewRow})
		case workload.Delete:
			out = append(out, backfill.RowOp{Kind: backfill.Delete, Upstream: u, Vnode: op.Vnode, PK: op.PK, Row: op.OldRow})
		case workload.Update:
			out = append(out,
				backfill.RowOp{Kind: backfill.UpdateDelete, Upstream: u, Vnode: op.Vnode, PK: op.PK, Row: op.OldRow},
				backfill.RowOp{Kind: backfill.UpdateInsert, Upstream: u, Vnode: op.Vnode, PK: op.PK, Row: op.NewRow})
		}
	}
	return out
}

// Step implements backfill.Source.
func (s Source) Step() uint64 { return s.G.Step() }

// Resume implements backfill.Source: the generator rebuilds its model from
// the upstream table at the committed epoch (workload.Generator.Resume),
// which holds exactly what steps 1..at.Step produced; nothing is replayed.
func (s Source) Resume(at backfill.Position) error {
	if at.Step == 0 {
		return nil
	}
	snap, err := at.Store.Pin(at.Epoch)
	if err != nil {
		return err
	}
	defer snap.Close()
	return resume(s.G, at.Step, snap, at.Upstream.ID)
}

// resume sets g to step k from table at a pinned epoch.
// One iterator, re-bounded per vnode (lsm.Iter.Reset), reads the whole
// table: the vnodes come in key order, so Pebble keeps its open SSTs and
// its reads stay sequential, growing to its largest read-ahead. An
// iterator per vnode would start each SST's read-ahead over at its
// smallest: on an object store, several times as many GETs.
func resume(g *workload.Generator, k uint64, snap *lsm.Snapshot, table uint32) (err error) {
	var it *lsm.Iter
	defer func() {
		if it != nil {
			if cerr := it.Close(); err == nil {
				err = cerr
			}
		}
	}()
	return g.Resume(k, func(vnode uint16, f func(pk, row []byte) error) error {
		var err error
		if it == nil {
			it, err = snap.NewIter(table, vnode, nil, nil)
		} else {
			err = it.Reset(vnode, nil, nil)
		}
		if err != nil {
			return err
		}
		for ok := it.First(); ok; ok = it.Next() {
			if err := f(it.PK(), it.Row()); err != nil {
				return err
			}
		}
		return it.Error()
	})
}

// Finished implements backfill.Source: the generator's steps after the
// backfill are empty anyway once its during phase is over.
func (s Source) Finished(uint64) {}

// BackfillStep implements backfill.Source.
func (s Source) BackfillStep() uint64 { return s.G.BackfillStep() }

// Oracle is the exact truth from the generator's model, which equals the
// upstream table at the committed epoch when every step is committed.
type Oracle struct{ G *workload.Generator }

var _ backfilltest.Oracle = Oracle{}

// Rows implements backfilltest.Oracle. The model answers for the step the
// generator is at, which at a checkpoint is the committed epoch's.
func (o Oracle) Rows(_ uint64, vnode uint16, cursor []byte) (behind, total int64, err error) {
	total, _ = o.G.Live(vnode)
	if cursor != nil {
		behind = o.G.RowsAtOrBelow(vnode, cursor)
	}
	return behind, total, nil
}

// Multi is the upstream of a job over several tables (JobConfig.Upstreams):
// one generator per table, upstream i's ops tagged Upstream i. The
// generators run in lockstep, each starting late by as many steps as it
// has fewer load and churn steps than the longest, so that every table's
// churn before the backfill ends, and its churn during the backfill
// begins, at the same step: the backfill's.
type Multi struct {
	Gs     []*workload.Generator
	offset []uint64
	step   uint64
}

var _ backfill.Source = (*Multi)(nil)

// NewMulti returns the source of the generators, at step 0.
func NewMulti(gs ...*workload.Generator) *Multi {
	m := &Multi{Gs: gs, offset: make([]uint64, len(gs))}
	var b uint64
	for _, g := range gs {
		b = max(b, g.BackfillStep())
	}
	for i, g := range gs {
		m.offset[i] = b - g.BackfillStep()
	}
	return m
}

// Next implements backfill.Source.
func (m *Multi) Next(context.Context) ([]backfill.RowOp, error) {
	m.step++
	var out []backfill.RowOp
	for i, g := range m.Gs {
		if m.step > m.offset[i] {
			out = appendOps(out, i, g.Next())
		}
	}
	return out, nil
}

// Step implements backfill.Source.
func (m *Multi) Step() uint64 { return m.step }

// BackfillStep implements backfill.Source: the generators' common one.
func (m *Multi) BackfillStep() uint64 {
	if len(m.Gs) == 0 {
		return 1
	}
	return m.offset[0] + m.Gs[0].BackfillStep()
}

// Finished implements backfill.Source.
func (m *Multi) Finished(uint64) {}

// Resume implements backfill.Source: each generator rebuilds its model
// from its table (at.Upstreams, by index) at the committed epoch.
func (m *Multi) Resume(at backfill.Position) error {
	if len(at.Upstreams) != len(m.Gs) {
		return errors.Newf("genjob: %d generators for a job of %d upstream tables", len(m.Gs), len(at.Upstreams))
	}
	m.step = at.Step
	if at.Step == 0 {
		return nil
	}
	snap, err := at.Store.Pin(at.Epoch)
	if err != nil {
		return err
	}
	defer snap.Close()
	for i, g := range m.Gs {
		if at.Step <= m.offset[i] {
			continue
		}
		if err := resume(g, at.Step-m.offset[i], snap, at.Upstreams[i].ID); err != nil {
			return errors.Wrapf(err, "upstream %d", i)
		}
	}
	return nil
}

// Oracles returns the oracle of each generator's table.
func (m *Multi) Oracles() []backfilltest.Oracle {
	out := make([]backfilltest.Oracle, len(m.Gs))
	for i, g := range m.Gs {
		out[i] = Oracle{G: g}
	}
	return out
}
