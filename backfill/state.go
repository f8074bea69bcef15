package backfill

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

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

// ---- the job's metadata row ---------------------------------------------

// jobMeta is the job's persisted metadata row.
type jobMeta struct {
	step, barrier     uint64
	started, finished bool
	hwm               []Figure
	// Since version 2: the rate limit in force and the ETA's carry-over.
	version byte
	limit   float64
	resume  ETAResume
	// Since version 3: the job's mode and, for a snapshot backfill, its
	// phase, snapshot epoch, the snapshot's live rows per upstream, the
	// log rows consumed and the log cursor.
	mode        JobMode
	phase       Phase
	snapEpoch   uint64
	snapTotals  []int64
	logConsumed uint64
	logCursor   []byte
	// Since version 3 too: the ids of the job's upstream tables.
	upstreams []uint32
}

// metaVersion is the version encodeMeta writes; decodeMeta reads 1 (without
// the rate limit and the ETA), 2 (without the mode and a snapshot
// backfill's phase: an arrangement backfill), 3 and 4. Version 4 has the
// layout of 3; it says that a snapshot backfill's log store is partitioned
// by the upstream's vnode, with an account row per vnode (snapshot.go),
// the snapshot's live rows and the log rows consumed here being the sums
// of the job's vnodes' accounts, and the log cursor empty. OpenJob refuses
// a snapshot backfill of version 3 (ErrOldLogStore). Version 5 adds what the
// ETA measured of the store's background work (ETAResume.BackgroundBusy
// and the rest); a row of an earlier version decodes with them 0.
const metaVersion = 5

func encodeMeta(m jobMeta) []byte {
	b := []byte{metaVersion}
	b = binary.AppendUvarint(b, m.step)
	b = binary.AppendUvarint(b, m.barrier)
	var flags byte
	if m.started {
		flags |= 1
	}
	if m.finished {
		flags |= 2
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(len(m.hwm)))
	for _, f := range m.hwm {
		b = binary.AppendUvarint(b, uint64(len(f.Approach)))
		b = append(b, f.Approach...)
		for _, x := range []float64{f.Pct, f.Consumed, f.Total} {
			b = binary.BigEndian.AppendUint64(b, math.Float64bits(x))
		}
	}
	r := m.resume
	var origin int64
	if !r.Origin.IsZero() {
		origin = r.Origin.UnixNano()
	}
	b = binary.AppendVarint(b, origin)
	b = binary.AppendUvarint(b, r.Run)
	b = binary.AppendUvarint(b, uint64(max(0, r.Actors)))
	b = binary.AppendUvarint(b, uint64(max(0, r.Intervals)))
	for _, x := range []float64{m.limit, r.RateLimit, r.Rate, r.Interval} {
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(x))
	}
	// Version 3: mode u8 | phase u8 | snapshot epoch uvarint | upstreams
	// uvarint, each one's snapshot live rows uvarint | log rows consumed
	// uvarint | log cursor length uvarint | log cursor.
	b = append(b, byte(m.mode), byte(m.phase))
	b = binary.AppendUvarint(b, m.snapEpoch)
	b = binary.AppendUvarint(b, uint64(len(m.snapTotals)))
	for _, n := range m.snapTotals {
		b = binary.AppendUvarint(b, uint64(max(0, n)))
	}
	b = binary.AppendUvarint(b, m.logConsumed)
	b = binary.AppendUvarint(b, uint64(len(m.logCursor)))
	b = append(b, m.logCursor...)
	// ... | upstreams uvarint, each one's table id uvarint.
	b = binary.AppendUvarint(b, uint64(len(m.upstreams)))
	for _, id := range m.upstreams {
		b = binary.AppendUvarint(b, uint64(id))
	}
	// Version 5: the ETA's background figures, f64 each.
	for _, x := range []float64{r.BackgroundBusy, r.BackgroundWritten, r.Slowdown, r.SlowdownBusy} {
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(x))
	}
	return b
}

// ErrCorruptMeta marks a job metadata row that does not decode. It is also
// lsmstats.ErrCorruption.
var ErrCorruptMeta = lsmstats.NewCorruptionSentinel("lsmstats/backfill: corrupt job metadata row")

func decodeMeta(b []byte) (jobMeta, error) {
	var m jobMeta
	orig := b
	bad := func(what string) (jobMeta, error) {
		return jobMeta{}, errors.Wrapf(ErrCorruptMeta, "%s (%x)", what, orig)
	}
	if len(b) < 1 || b[0] < 1 || b[0] > metaVersion {
		return bad("unknown version")
	}
	m.version = b[0]
	b = b[1:]
	uv := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	// uvs reads a count, then that many uvarints of at most limit (a
	// count above the bytes left is corrupt: each takes one at least).
	uvs := func(limit uint64) ([]uint64, bool) {
		n, ok := uv()
		if !ok || n > uint64(len(b)) {
			return nil, false
		}
		out := make([]uint64, 0, n)
		for range n {
			v, ok := uv()
			if !ok || v > limit {
				return nil, false
			}
			out = append(out, v)
		}
		return out, true
	}
	var ok bool
	if m.step, ok = uv(); !ok {
		return bad("step")
	}
	if m.barrier, ok = uv(); !ok {
		return bad("barrier")
	}
	if len(b) < 1 || b[0]&^3 != 0 {
		return bad("flags")
	}
	m.started, m.finished = b[0]&1 != 0, b[0]&2 != 0
	b = b[1:]
	n, ok := uv()
	if !ok || n > uint64(len(b)) {
		return bad("figures")
	}
	for range n {
		l, ok := uv()
		if !ok || l > uint64(len(b)) || uint64(len(b))-l < 24 {
			return bad("figure")
		}
		f := Figure{Approach: string(b[:l])}
		b = b[l:]
		f.Pct = math.Float64frombits(binary.BigEndian.Uint64(b))
		f.Consumed = math.Float64frombits(binary.BigEndian.Uint64(b[8:]))
		f.Total = math.Float64frombits(binary.BigEndian.Uint64(b[16:]))
		b = b[24:]
		for _, x := range []float64{f.Pct, f.Consumed, f.Total} {
			if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
				return bad("figure value out of range")
			}
		}
		if f.Pct > 100 {
			return bad("figure above 100%")
		}
		m.hwm = append(m.hwm, f)
	}
	if m.version >= 2 {
		origin, n := binary.Varint(b)
		if n <= 0 || origin < 0 {
			return bad("ETA origin")
		}
		b = b[n:]
		if origin > 0 {
			m.resume.Origin = time.Unix(0, origin)
		}
		var actors, intervals uint64
		if m.resume.Run, ok = uv(); !ok {
			return bad("ETA run")
		}
		if actors, ok = uv(); !ok || actors > math.MaxInt32 {
			return bad("ETA actors")
		}
		if intervals, ok = uv(); !ok || intervals > math.MaxInt32 {
			return bad("ETA intervals")
		}
		m.resume.Actors, m.resume.Intervals = int(actors), int(intervals)
		if len(b) < 32 {
			return bad("rate limit and ETA rates")
		}
		xs := []*float64{&m.limit, &m.resume.RateLimit, &m.resume.Rate, &m.resume.Interval}
		for i, x := range xs {
			*x = math.Float64frombits(binary.BigEndian.Uint64(b[8*i:]))
			if math.IsNaN(*x) || math.IsInf(*x, 0) || *x < 0 {
				return bad("rate value out of range")
			}
		}
		b = b[32:]
	}
	if m.version >= 3 {
		if len(b) < 2 || b[0] > byte(ModeSnapshot) || b[1] > byte(PhaseJoined) {
			return bad("mode and phase")
		}
		m.mode, m.phase = JobMode(b[0]), Phase(b[1])
		b = b[2:]
		if m.snapEpoch, ok = uv(); !ok {
			return bad("snapshot epoch")
		}
		totals, ok := uvs(math.MaxInt64)
		if !ok {
			return bad("snapshot live rows")
		}
		for _, v := range totals {
			m.snapTotals = append(m.snapTotals, int64(v))
		}
		if m.logConsumed, ok = uv(); !ok {
			return bad("log rows consumed")
		}
		l, ok := uv()
		if !ok || l > uint64(len(b)) {
			return bad("log cursor")
		}
		if l > 0 {
			m.logCursor = append([]byte(nil), b[:l]...)
		}
		b = b[l:]
		ids, ok := uvs(math.MaxUint32)
		if !ok {
			return bad("upstream tables")
		}
		for _, id := range ids {
			m.upstreams = append(m.upstreams, uint32(id))
		}
	}
	if m.version >= 5 {
		if len(b) < 32 {
			return bad("ETA background figures")
		}
		r := &m.resume
		for i, x := range []*float64{&r.BackgroundBusy, &r.BackgroundWritten, &r.Slowdown, &r.SlowdownBusy} {
			*x = math.Float64frombits(binary.BigEndian.Uint64(b[8*i:]))
			if math.IsNaN(*x) || math.IsInf(*x, 0) || *x < 0 {
				return bad("ETA background figure out of range")
			}
		}
		b = b[32:]
	}
	if len(b) != 0 {
		return bad("trailing bytes")
	}
	return m, nil
}
