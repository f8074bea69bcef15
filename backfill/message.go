package backfill

import (
	"strconv"

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
	// CheckedDelete and CheckedUpdate are the checked forms of a delete and
	// an update, for a source that does not know the stored row: a
	// CheckedDelete carries no row, a CheckedUpdate the new row alone. The
	// job reads the stored old row itself, in the upstream writer's view
	// (the step's earlier ops, the epochs not committed yet, then the
	// committed table), and sends the actors a Delete, or an UpdateDelete
	// and UpdateInsert pair. A pk with no live row is an error
	// (lsm.ErrInconsistentOp). Only a Source's ops may use them. Their cost
	// is one point read of the upstream per op (doc.go, "Upstream ops").
	CheckedDelete
	CheckedUpdate
)

func (k OpKind) String() string {
	if int(k) >= len(opKindNames) {
		return "OpKind(" + strconv.Itoa(int(k)) + ")"
	}
	return opKindNames[k]
}

var opKindNames = [...]string{"Insert", "Delete", "UpdateDelete", "UpdateInsert", "CheckedDelete", "CheckedUpdate"}

// RowOp is one row change of a stream chunk.
type RowOp struct {
	Kind OpKind
	// Upstream is the index of the op's upstream table among the job's
	// (JobConfig.Upstreams); 0, the only one, for a job over one table.
	Upstream int
	Vnode    uint16
	PK       []byte
	// Row is the inserted row, or the deleted one; a CheckedUpdate's new
	// row; nil for a CheckedDelete.
	Row []byte
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
//
// ReadAhead lets an actor that ran the barrier read the next barrier's
// snapshot rows, and write them into the MV, as soon as it acknowledged
// this one, while the job commits Prev. The job sets it when another
// barrier may follow (Job.Run; not Job.Step, whose actors stop after the
// step). The output is the same either way; only the time of the work
// changes.
type Barrier struct {
	Prev, Curr uint64
	Checkpoint bool
	ReadAhead  bool
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
