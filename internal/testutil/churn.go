package testutil

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
)

// ChurnWriter is what Churn writes through: the methods of lsm.Writer it
// uses. An interface, so that package lsm's own tests can use Churn.
type ChurnWriter interface {
	Insert(epoch uint64, vnode uint16, pk, row []byte) error
	Update(epoch uint64, vnode uint16, pk, old, row []byte) error
	Delete(epoch uint64, vnode uint16, pk, old []byte) error
}

// OpKind is the kind of a ChurnOp.
type OpKind uint8

const (
	OpInsert OpKind = iota
	OpUpdate
	OpDelete
)

// ChurnOp is one op that Churn wrote: its pk, and the row after it ("" for
// a delete).
type ChurnOp struct {
	Kind OpKind
	PK   uint64
	Row  string
}

// Churn is the tests' one generator of churn: random inserts, updates and
// deletes of rows with a u64 pk (keys.Uint64: 8 bytes, big-endian; this
// package cannot import keys, whose tests import it), written through a
// writer, with the rows as that writer sees them (its own uncommitted ops
// included). Its choices come from its own seeded source, so a seed gives
// the same ops whatever else the test draws.
type Churn struct {
	r       *rand.Rand
	vnodeOf func(pk []byte) uint16
	// RowLen bounds the random filler of each row (24 by default): a row
	// is "r<epoch>.<op>." and 0 to RowLen-1 bytes of filler.
	RowLen int

	live    map[uint64]string
	livePKs []uint64 // live's pks, for picks in O(1)
	liveAt  map[uint64]int
	nextPK  uint64
}

// NewChurn returns a generator seeded with seed, over a table whose vnode
// of a pk is vnodeOf (lsm.TableDef.VnodeOf).
func NewChurn(seed uint64, vnodeOf func(pk []byte) uint16) *Churn {
	return &Churn{
		r: rand.New(rand.NewPCG(seed, 11)), vnodeOf: vnodeOf, RowLen: 24,
		live: map[uint64]string{}, liveAt: map[uint64]int{},
	}
}

// Live returns the live rows by pk, as the writer sees them. The map is
// the generator's own: read it, do not change it.
func (c *Churn) Live() map[uint64]string { return c.live }

// Reset makes rows the live rows (a copy), and new pks start past the
// largest: after a crash dropped the epochs that were not committed.
func (c *Churn) Reset(rows map[uint64]string) {
	c.live, c.livePKs, c.liveAt, c.nextPK = map[uint64]string{}, nil, map[uint64]int{}, 0
	for pk, row := range rows {
		c.setLive(pk, row, true)
		c.nextPK = max(c.nextPK, pk+1)
	}
}

// Write writes n ops at epoch through w: updPct% updates and delPct%
// deletes of random live rows, inserts of new pks, in increasing order,
// otherwise (and whenever no row is live).
func (c *Churn) Write(w ChurnWriter, epoch uint64, n, updPct, delPct int) ([]ChurnOp, error) {
	ops := make([]ChurnOp, 0, n)
	for i := range n {
		p := c.r.IntN(100)
		op := ChurnOp{Kind: OpInsert}
		if p < updPct+delPct && len(c.livePKs) > 0 {
			op.PK, op.Kind = c.livePKs[c.r.IntN(len(c.livePKs))], OpUpdate
			if p >= updPct {
				op.Kind = OpDelete
			}
		} else {
			op.PK = c.nextPK
			c.nextPK++
		}
		if err := c.apply(w, epoch, i, &op); err != nil {
			return ops, err
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// Toggle writes n ops at epoch through w, each on a pk drawn from [0,
// universe): an insert where the pk is not live, else an update or a
// delete at even odds. Over a small universe every pk changes many times.
func (c *Churn) Toggle(w ChurnWriter, epoch uint64, n, universe int) ([]ChurnOp, error) {
	ops := make([]ChurnOp, 0, n)
	for i := range n {
		op := ChurnOp{PK: uint64(c.r.IntN(universe))}
		if _, live := c.live[op.PK]; live {
			op.Kind = OpUpdate + OpKind(c.r.IntN(2))
		}
		c.nextPK = max(c.nextPK, op.PK+1)
		if err := c.apply(w, epoch, i, &op); err != nil {
			return ops, err
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// apply writes op, the i-th of epoch, and follows it in the live rows.
func (c *Churn) apply(w ChurnWriter, epoch uint64, i int, op *ChurnOp) error {
	key := binary.BigEndian.AppendUint64(nil, op.PK)
	vn := c.vnodeOf(key)
	old := c.live[op.PK]
	if op.Kind != OpDelete {
		op.Row = fmt.Sprintf("r%d.%d.%s", epoch, i, strings.Repeat("x", c.r.IntN(max(1, c.RowLen))))
	}
	var err error
	switch op.Kind {
	case OpInsert:
		err = w.Insert(epoch, vn, key, []byte(op.Row))
	case OpUpdate:
		err = w.Update(epoch, vn, key, []byte(old), []byte(op.Row))
	case OpDelete:
		err = w.Delete(epoch, vn, key, []byte(old))
	}
	if err != nil {
		return fmt.Errorf("churn: epoch %d op %d on pk %d: %w", epoch, i, op.PK, err)
	}
	c.setLive(op.PK, op.Row, op.Kind != OpDelete)
	return nil
}

func (c *Churn) setLive(pk uint64, row string, live bool) {
	if live {
		if _, ok := c.live[pk]; !ok {
			c.liveAt[pk] = len(c.livePKs)
			c.livePKs = append(c.livePKs, pk)
		}
		c.live[pk] = row
		return
	}
	if i, ok := c.liveAt[pk]; ok {
		last := c.livePKs[len(c.livePKs)-1]
		c.livePKs[i] = last
		c.liveAt[last] = i
		c.livePKs = c.livePKs[:len(c.livePKs)-1]
		delete(c.liveAt, pk)
		delete(c.live, pk)
	}
}
