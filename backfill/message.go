package backfill

import (
	"github.com/lsmstats/lsmstats/replicated"
	"github.com/lsmstats/lsmstats/stats"
)

// OpKind is the kind of a row op in a stream chunk.
type OpKind uint8

const (
	Insert OpKind = iota
	Delete
	// UpdateDelete and UpdateInsert come in pairs with the same pk: the old
	// row, then the new one.
	UpdateDelete
	UpdateInsert
)

func (k OpKind) String() string {
	return [...]string{"Insert", "Delete", "UpdateDelete", "UpdateInsert"}[k]
}

// RowOp is one row change of a stream chunk.
type RowOp struct {
	Kind  OpKind
	Vnode uint16
	PK    []byte
	Row   []byte // the inserted row, or the deleted one
}

// Message is what flows between the parts of the pipeline: a Chunk or a
// Barrier.
type Message interface{ isMessage() }

// Chunk is a batch of row ops of the current epoch.
type Chunk struct {
	Ops []RowOp
}

// Barrier ends epoch Prev and starts epoch Curr. Data between two barriers
// belongs to the first one's Curr. A checkpoint barrier's Prev is committed
// once every part has handled it.
type Barrier struct {
	Prev, Curr uint64
	Checkpoint bool
}

func (Chunk) isMessage()   {}
func (Barrier) isMessage() {}

// replicatedOps converts chunk ops into overlay changes of a replicated
// table: inserts (and the insert half of updates) add a live row, deletes
// remove one.
func replicatedOps(ops []RowOp) []replicated.Op {
	out := make([]replicated.Op, len(ops))
	for i, op := range ops {
		n := int64(len(op.PK) + len(op.Row))
		switch op.Kind {
		case Insert, UpdateInsert:
			out[i] = replicated.Op{Vnode: op.Vnode, PK: op.PK, Live: true, Row: op.Row, Delta: stats.LiveCounts{Rows: 1, Bytes: n}}
		default:
			out[i] = replicated.Op{Vnode: op.Vnode, PK: op.PK, Delta: stats.LiveCounts{Rows: -1, Bytes: -n}}
		}
	}
	return out
}
