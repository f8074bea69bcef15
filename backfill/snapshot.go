package backfill

import (
	"encoding/binary"
	"strconv"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
)

// Snapshot backfill (JobConfig.Mode = ModeSnapshot), as RisingWave runs it
// by default: three phases (docs/design.md §6, "Snapshot backfill").
//
//  1. Snapshot: the actors read every upstream table at one pinned epoch E0
//     (the committed epoch when the job started), which holds the store's
//     garbage collection back; the upstream changes committed after E0 are
//     not forwarded but appended to the log store, a state table of the
//     store with its own statistics.
//  2. Log store: once every vnode finished, the pin is released, and at
//     each barrier the job consumes the oldest log epochs (at least one, up
//     to Actors x BarrierRows rows, whole epochs), sends their changes to
//     the actors, which materialize them, and deletes them from the log
//     store; the upstream's new changes keep going into it.
//  3. Joined: at the barrier whose consumption reaches the end of the log
//     store, the step's own changes follow the last log rows to the actors
//     instead of into the log store, and from then on the job forwards the
//     upstream as an arrangement backfill does once finished.
//
// The job's metadata row persists the phase, E0, the snapshot's live rows
// per upstream table, the log rows consumed and the log cursor; each vnode's
// state persists its cursor and row count, so a restart resumes in the
// phase it was in (re-pinning E0 in the snapshot phase).

// JobMode is the kind of backfill a job runs.
type JobMode uint8

const (
	// ModeArrangement is the arrangement backfill: snapshots read at each
	// barrier's previous epoch, upstream changes forwarded by the cursor
	// rule.
	ModeArrangement JobMode = iota
	// ModeSnapshot is the snapshot backfill: a fixed snapshot, then the
	// log store, then the upstream.
	ModeSnapshot
)

func (m JobMode) String() string {
	switch m {
	case ModeArrangement:
		return "arrangement"
	case ModeSnapshot:
		return "snapshot"
	}
	return "JobMode(" + strconv.Itoa(int(m)) + ")"
}

// Phase is the phase of a snapshot backfill.
type Phase uint8

const (
	// PhaseSnapshot reads the snapshot at the pinned epoch.
	PhaseSnapshot Phase = iota
	// PhaseLogStore consumes the log store, epoch by epoch.
	PhaseLogStore
	// PhaseJoined forwards the upstream: the job caught up.
	PhaseJoined
)

func (p Phase) String() string {
	switch p {
	case PhaseSnapshot:
		return "snapshot"
	case PhaseLogStore:
		return "log store"
	case PhaseJoined:
		return "joined"
	}
	return "Phase(" + strconv.Itoa(int(p)) + ")"
}

// LogStoreTableDef is the definition of a snapshot backfill's log-store
// table: one vnode, rows keyed by (epoch, sequence in the epoch), each an
// upstream change (encodeLogOp).
func LogStoreTableDef(id uint32) lsm.TableDef {
	return lsm.TableDef{ID: id, Name: "log_store", VnodeCount: 1, PK: keys.Schema{keys.Uint64, keys.Uint64}}
}

func logPK(epoch uint64, seq uint64) []byte {
	return keys.AppendUint64(keys.AppendUint64(nil, epoch), seq)
}

// ErrCorruptLog marks a log-store row that does not decode. It is also
// lsmstats.ErrCorruption.
var ErrCorruptLog = lsmstats.NewCorruptionSentinel("lsmstats/backfill: corrupt log-store row")

// encodeLogOp encodes an upstream change as a log-store row:
//
//	kind u8 | upstream uvarint | vnode u16 | pk length uvarint | pk | row
func encodeLogOp(op RowOp) []byte {
	b := make([]byte, 0, 8+len(op.PK)+len(op.Row))
	b = append(b, byte(op.Kind))
	b = binary.AppendUvarint(b, uint64(op.Upstream))
	b = binary.BigEndian.AppendUint16(b, op.Vnode)
	b = binary.AppendUvarint(b, uint64(len(op.PK)))
	b = append(b, op.PK...)
	return append(b, op.Row...)
}

func decodeLogOp(b []byte, upstreams int) (RowOp, error) {
	bad := func(what string) (RowOp, error) {
		return RowOp{}, errors.Wrapf(ErrCorruptLog, "%s (%x)", what, b)
	}
	if len(b) < 1 || OpKind(b[0]) > UpdateInsert {
		return bad("op kind")
	}
	op := RowOp{Kind: OpKind(b[0])}
	rest := b[1:]
	u, n := binary.Uvarint(rest)
	if n <= 0 || u >= uint64(upstreams) {
		return bad("upstream")
	}
	op.Upstream, rest = int(u), rest[n:]
	if len(rest) < 2 {
		return bad("vnode")
	}
	op.Vnode, rest = binary.BigEndian.Uint16(rest), rest[2:]
	l, n := binary.Uvarint(rest)
	if n <= 0 || l > uint64(len(rest)-n) {
		return bad("pk length")
	}
	rest = rest[n:]
	op.PK, op.Row = rest[:l:l], rest[l:]
	return op, nil
}

// appendLog appends a step's changes to the log store at epoch.
func (j *Job) appendLog(epoch uint64, ops []RowOp) error {
	for i, op := range ops {
		if err := j.logW.Insert(epoch, 0, logPK(epoch, uint64(i)), encodeLogOp(op)); err != nil {
			return errors.Wrap(err, "lsmstats/backfill: log store")
		}
	}
	j.logUncommitted += len(ops)
	return nil
}

// consumeLog reads the oldest committed log rows after the log cursor, up
// to quota rows in whole epochs (at least one epoch), deletes them at epoch
// and returns their changes, and whether the committed log store holds no
// more.
func (j *Job) consumeLog(epoch uint64, quota int) ([]RowOp, bool, error) {
	snap, err := j.store.Snapshot()
	if err != nil {
		return nil, false, err
	}
	defer snap.Close()
	it, err := snap.NewIter(j.logTable, 0, j.logCursor, nil)
	if err != nil {
		return nil, false, err
	}
	var out []RowOp
	var last uint64 // the epoch of the last row taken
	ok := it.First()
	if ok && j.logCursor != nil && string(it.PK()) == string(j.logCursor) {
		ok = it.Next()
	}
	for ; ok; ok = it.Next() {
		e, _, err := keys.DecodeUint64(it.PK())
		if err != nil {
			_ = it.Close()
			return nil, false, errors.Mark(lsmstats.MarkCorruption(errors.Wrapf(err, "log-store pk %x", it.PK())), ErrCorruptLog)
		}
		if len(out) >= quota && e != last {
			break // whole epochs: the next one waits for the next barrier
		}
		op, err := decodeLogOp(it.Row(), len(j.ups))
		if err != nil {
			_ = it.Close()
			return nil, false, err
		}
		pk, row := append([]byte(nil), it.PK()...), append([]byte(nil), it.Row()...)
		op.PK, op.Row = append([]byte(nil), op.PK...), append([]byte(nil), op.Row...)
		if err := j.logW.Delete(epoch, 0, pk, row); err != nil {
			_ = it.Close()
			return nil, false, errors.Wrap(err, "lsmstats/backfill: log store")
		}
		out = append(out, op)
		j.logCursor, last = pk, e
	}
	end := !ok
	if err := it.Close(); err != nil {
		return nil, false, err
	}
	j.logConsumed += uint64(len(out))
	return out, end, nil
}

// route returns the ops the actors get at this step: in a snapshot
// backfill, none in the snapshot phase (the step's changes go to the log
// store), the log rows consumed in the log-store phase (and the step's own
// changes after them at the barrier that catches up), the step's changes
// once joined.
func (j *Job) route(epoch uint64, ops []RowOp) ([]RowOp, error) {
	if j.cfg.Mode != ModeSnapshot || !j.started {
		return ops, nil
	}
	switch j.phase {
	case PhaseSnapshot:
		return nil, j.appendLog(epoch, ops)
	case PhaseLogStore:
		barrierRows := j.cfg.BarrierRows
		if barrierRows <= 0 {
			barrierRows = 2048 // the actors' default
		}
		rows, end, err := j.consumeLog(epoch, j.cfg.Actors*barrierRows)
		if err != nil {
			return nil, err
		}
		if end && j.logUncommitted == 0 {
			// Caught up: this step's changes follow the last log rows.
			j.phase = PhaseJoined
			return append(rows, ops...), nil
		}
		return rows, j.appendLog(epoch, ops)
	default:
		return ops, nil
	}
}

// phaseInput returns the estimators' view of a snapshot backfill (nil for
// an arrangement backfill).
func (j *Job) phaseInput() *PhaseInput {
	if j.cfg.Mode != ModeSnapshot {
		return nil
	}
	return &PhaseInput{Phase: j.phase, SnapshotEpoch: j.snapEpoch, SnapshotTotals: j.snapTotals,
		LogTable: j.logTable, LogConsumed: j.logConsumed}
}

// startSnapshot fixes a new snapshot backfill's epoch at the committed one
// and records its live rows per upstream table.
func (j *Job) startSnapshot() {
	j.snapEpoch = j.store.CommittedEpoch()
	st := j.store.Stats()
	j.snapTotals = make([]int64, len(j.ups))
	for i, u := range j.ups {
		j.snapTotals[i] = max(0, st.Live.Table(u.def.ID).Rows)
	}
	j.phase = PhaseSnapshot
}

// pinSnapshot pins the snapshot epoch for the snapshot phase (after a
// restart too: a garbage-collection pass that ran meanwhile above it makes
// the job fail to open, naming the epoch).
func (j *Job) pinSnapshot() error {
	if j.cfg.Mode != ModeSnapshot || j.phase != PhaseSnapshot || j.pin != nil {
		return nil
	}
	pin, err := j.store.Pin(j.snapEpoch)
	if err != nil {
		return errors.Wrapf(err, "lsmstats/backfill: pinning the snapshot epoch %d of a snapshot backfill", j.snapEpoch)
	}
	j.pin = pin
	return nil
}

// releaseSnapshot releases the snapshot epoch's pin.
func (j *Job) releaseSnapshot() {
	if j.pin != nil {
		j.pin.Close()
		j.pin = nil
	}
}
