package backfill

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
)

// VnodeState is the backfill state of one vnode, persisted in the backfill
// state table (one row per vnode, keyed by the vnode) and committed with the
// barrier's epoch.
type VnodeState struct {
	// Upstream is the index of the vnode's upstream table among the job's
	// (JobConfig.Upstreams); each upstream has its own state table, so it
	// is not part of the persisted row.
	Upstream int
	Vnode    uint16
	// Cursor is the pk of the last snapshot row read; nil before the first.
	Cursor []byte
	// Finished is set when the vnode's snapshot is exhausted.
	Finished bool
	// RowCount is the number of snapshot rows read. It is persisted only by
	// the row-count approach (RisingWave's); the stats approach needs none.
	RowCount uint64
}

// Started reports whether the vnode's snapshot read has begun.
func (s VnodeState) Started() bool { return s.Cursor != nil || s.Finished }

// inProgress reports whether the vnode's snapshot read has begun and not
// finished.
func (s VnodeState) inProgress() bool { return s.Cursor != nil && !s.Finished }

func (s VnodeState) String() string {
	if s.Upstream != 0 {
		t := s
		t.Upstream = 0
		return fmt.Sprintf("u%d/%s", s.Upstream, t)
	}
	switch {
	case s.Finished:
		return fmt.Sprintf("v%d finished rows=%d", s.Vnode, s.RowCount)
	case s.Cursor == nil:
		return fmt.Sprintf("v%d not started", s.Vnode)
	default:
		return fmt.Sprintf("v%d cursor=%x rows=%d", s.Vnode, s.Cursor, s.RowCount)
	}
}

// ErrCorruptState marks a state row that does not decode. It is also
// lsmstats.ErrCorruption.
var ErrCorruptState = lsmstats.NewCorruptionSentinel("lsmstats/backfill: corrupt backfill state row")

const (
	stateVersion  = 1
	flagFinished  = 1 << 0
	flagRowCount  = 1 << 1
	knownStateBit = flagFinished | flagRowCount
)

// EncodeState encodes a state row:
//
//	version u8 (=1) | flags u8 (bit 0 finished, bit 1 row count present) |
//	cursor length uvarint | cursor | [row count uvarint]
func EncodeState(s VnodeState, withRowCount bool) []byte {
	b := []byte{stateVersion, 0}
	if s.Finished {
		b[1] |= flagFinished
	}
	if withRowCount {
		b[1] |= flagRowCount
	}
	b = binary.AppendUvarint(b, uint64(len(s.Cursor)))
	b = append(b, s.Cursor...)
	if withRowCount {
		b = binary.AppendUvarint(b, s.RowCount)
	}
	return b
}

// uvarintLen is the length of v's uvarint encoding: what a row count adds
// to a state row.
func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// DecodeState decodes a state row of a vnode; hasRowCount reports whether
// the row carried a row count. Every malformed row is an ErrCorruptState
// naming the vnode, never a panic.
func DecodeState(vnode uint16, b []byte) (s VnodeState, hasRowCount bool, err error) {
	bad := func(what string) error {
		return errors.Wrapf(ErrCorruptState, "vnode %d: %s (%x)", vnode, what, b)
	}
	if len(b) < 3 {
		return s, false, bad("truncated")
	}
	if b[0] != stateVersion {
		return s, false, bad(fmt.Sprintf("unknown version %d", b[0]))
	}
	flags := b[1]
	if flags&^knownStateBit != 0 {
		return s, false, bad(fmt.Sprintf("unknown flags %#x", flags))
	}
	s.Vnode = vnode
	s.Finished = flags&flagFinished != 0
	n, w := binary.Uvarint(b[2:])
	if w <= 0 || n > uint64(len(b)-2-w) {
		return s, false, bad("cursor length")
	}
	rest := b[2+w:]
	if n > 0 {
		s.Cursor = append([]byte(nil), rest[:n]...)
	}
	rest = rest[n:]
	if flags&flagRowCount != 0 {
		c, w := binary.Uvarint(rest)
		if w <= 0 {
			return s, false, bad("row count")
		}
		s.RowCount, rest, hasRowCount = c, rest[w:], true
	}
	if len(rest) != 0 {
		return s, false, bad("trailing bytes")
	}
	return s, hasRowCount, nil
}

// StateTableDef is the definition of a backfill state table for an upstream
// table with vnodeCount vnodes: one row per vnode, keyed by the vnode.
func StateTableDef(id uint32, vnodeCount int) lsm.TableDef {
	return lsm.TableDef{ID: id, Name: "backfill_state", VnodeCount: vnodeCount, PK: keys.Schema{keys.Uint64}, VnodeKeyed: true}
}

func statePK(vnode uint16) []byte { return keys.AppendUint64(nil, uint64(vnode)) }

// LoadStates reads the committed states of a set of vnodes; vnodes without a
// row are not started. The schema of cursors is checked against the upstream
// table's pk schema.
func LoadStates(r interface {
	Get(table uint32, vnode uint16, pk []byte) ([]byte, bool, error)
}, stateTable uint32, upstream lsm.TableDef, vnodes []uint16) ([]VnodeState, error) {
	out := make([]VnodeState, len(vnodes))
	for i, v := range vnodes {
		row, ok, err := r.Get(stateTable, v, statePK(v))
		if err != nil {
			return nil, err
		}
		out[i] = VnodeState{Vnode: v}
		if !ok {
			continue
		}
		st, _, err := DecodeState(v, row)
		if err != nil {
			return nil, err
		}
		if st.Cursor != nil {
			if err := upstream.PK.Validate(st.Cursor); err != nil {
				return nil, errors.Mark(lsmstats.MarkCorruption(errors.Wrapf(err, "backfill state of vnode %d: cursor", v)), ErrCorruptState)
			}
		}
		out[i] = st
	}
	return out, nil
}
