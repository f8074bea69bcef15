package backfill

import (
	"bytes"
	"encoding/binary"
	"math"
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
//     store with its own statistics, partitioned as the upstream (a
//     change of vnode v in its vnode v, LogStoreTableDef).
//  2. Log store: once every vnode finished, the pin is released, and at
//     each barrier the job consumes the oldest log epochs of its vnodes (at
//     least one, up to Actors x BarrierRows rows, whole epochs, merged in
//     epoch order across the vnodes), sends their changes to the actors,
//     which materialize them, and deletes them from the log store; the
//     upstream's new changes keep going into it.
//  3. Joined: at the barrier whose consumption reaches the end of the log
//     store, the step's own changes follow the last log rows to the actors
//     instead of into the log store, and from then on the job forwards the
//     upstream as an arrangement backfill does once finished.
//
// The job's metadata row persists the phase and E0; each log-store vnode's
// account row its live rows per upstream table at E0 and its log rows
// consumed; each vnode's state its cursor and row count. So a restart
// resumes in the phase it was in (re-pinning E0 in the snapshot phase),
// and a part of the job (JobConfig.Vnodes) reopened with vnodes moved in
// or out takes the phase of its vnodes (openLogStore), the accounts of
// the moved vnodes having moved with their log.

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
// table over upstream tables of vnodeCount vnodes (the largest count of the
// job's upstreams), partitioned as they are: a change to vnode v of an
// upstream table is logged in vnode v, so that a move of vnodes [lo, hi)
// of the table moves exactly those vnodes' pending changes, with the
// upstream's, the MV's and the state table's same range. It is vnode-keyed,
// pk (vnode, epoch, sequence in the epoch's changes of the vnode); each row
// an upstream change (encodeLogOp), but for the vnode's account at
// (vnode, 0, 0) (encodeLogAccount): the vnode's live rows in each upstream
// at the snapshot epoch and its log rows consumed, which move with it.
func LogStoreTableDef(id uint32, vnodeCount int) lsm.TableDef {
	return lsm.TableDef{ID: id, Name: "log_store", VnodeCount: vnodeCount, PK: keys.Schema{keys.Uint64, keys.Uint64, keys.Uint64}, VnodeKeyed: true}
}

// logPK is the pk of a log-store row: (vnode, epoch, seq). A change's
// epoch is at least 1: (vnode, 0, 0) is the vnode's account row.
func logPK(vnode uint16, epoch, seq uint64) []byte {
	return keys.AppendUint64(keys.AppendUint64(keys.AppendUint64(make([]byte, 0, 27), uint64(vnode)), epoch), seq)
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

// logAccount is one log-store vnode's account, persisted in its account
// row: the snapshot epoch it was read at, its live rows in each upstream
// at that epoch (by upstream index), and the log rows of the vnode
// consumed so far. A part's figure sums its vnodes' accounts, so that a
// move takes a vnode's share of the figure with it and the parts' figures
// add up to the job's.
type logAccount struct {
	epoch    uint64
	snapRows []int64
	consumed uint64
	row      []byte // the persisted row; nil if none yet
	dirty    bool   // changed since it was last written
}

const logAccountVersion = 1

// encodeLogAccount encodes an account row:
//
//	version u8 (= 1) | snapshot epoch uvarint | m uvarint |
//	m x snapshot live rows uvarint | log rows consumed uvarint
func encodeLogAccount(a *logAccount) []byte {
	b := []byte{logAccountVersion}
	b = binary.AppendUvarint(b, a.epoch)
	b = binary.AppendUvarint(b, uint64(len(a.snapRows)))
	for _, n := range a.snapRows {
		b = binary.AppendUvarint(b, uint64(max(0, n)))
	}
	return binary.AppendUvarint(b, a.consumed)
}

func decodeLogAccount(vnode uint16, b []byte) (*logAccount, error) {
	bad := func(what string) (*logAccount, error) {
		return nil, errors.Wrapf(ErrCorruptLog, "account row of vnode %d: %s (%x)", vnode, what, b)
	}
	if len(b) < 1 || b[0] != logAccountVersion {
		return bad("unknown version")
	}
	rest := b[1:]
	uv := func() (uint64, bool) {
		v, n := binary.Uvarint(rest)
		if n <= 0 {
			return 0, false
		}
		rest = rest[n:]
		return v, true
	}
	a := &logAccount{row: b}
	var ok bool
	if a.epoch, ok = uv(); !ok {
		return bad("snapshot epoch")
	}
	m, ok := uv()
	if !ok || m > uint64(len(rest)) {
		return bad("upstreams")
	}
	for range m {
		n, ok := uv()
		if !ok || n > math.MaxInt64 {
			return bad("snapshot live rows")
		}
		a.snapRows = append(a.snapRows, int64(n))
	}
	if a.consumed, ok = uv(); !ok {
		return bad("log rows consumed")
	}
	if len(rest) != 0 {
		return bad("trailing bytes")
	}
	return a, nil
}

// ownedLogVnodes returns the job's vnodes of the log-store table.
func (j *Job) ownedLogVnodes() []uint32 { return j.ownedVnodes(j.logVnodes) }

// sumAccounts sets the job's snapshot live rows per upstream and its log
// rows consumed: the sums of its vnodes' accounts.
func (j *Job) sumAccounts() {
	j.snapTotals, j.logConsumed = make([]int64, len(j.ups)), 0
	for _, a := range j.accounts {
		if a == nil {
			continue
		}
		for u, n := range a.snapRows {
			j.snapTotals[u] += n
		}
		j.logConsumed += a.consumed
	}
}

// loadAccounts reads the account rows of the job's log-store vnodes at
// the committed epoch: each must be there, of the job's snapshot epoch
// and upstream count (a vnode moved in from a part that read another
// snapshot, or that no part owned when the job started, cannot be
// accounted for).
func (j *Job) loadAccounts() error {
	j.accounts = make([]*logAccount, j.logVnodes)
	for _, v := range j.ownedLogVnodes() {
		vn := uint16(v)
		row, ok, err := j.store.Get(j.logTable, vn, logPK(vn, 0, 0))
		if err != nil {
			return err
		}
		if !ok {
			return errors.Newf("lsmstats/backfill: the snapshot backfill's vnode %d has no account row in its log store (table %d): "+
				"a snapshot backfill's vnodes must each belong to a part when it starts, and move with every table of the job, the log store's too", vn, j.logTable)
		}
		a, err := decodeLogAccount(vn, row)
		if err != nil {
			return err
		}
		if a.epoch != j.snapEpoch {
			return errors.Newf("lsmstats/backfill: the snapshot backfill's vnode %d was read at snapshot epoch %d, this part's snapshot epoch is %d: "+
				"the parts of a snapshot backfill must start at the same epoch", vn, a.epoch, j.snapEpoch)
		}
		if len(a.snapRows) != len(j.ups) {
			return errors.Wrapf(ErrCorruptLog, "account row of vnode %d: the live rows of %d upstream tables, job of %d", vn, len(a.snapRows), len(j.ups))
		}
		j.accounts[v] = a
	}
	j.sumAccounts()
	return nil
}

// writeAccounts writes the accounts changed since the last write at epoch.
func (j *Job) writeAccounts(epoch uint64) error {
	for v, a := range j.accounts {
		if a == nil || !a.dirty {
			continue
		}
		row, pk := encodeLogAccount(a), logPK(uint16(v), 0, 0)
		var err error
		if a.row == nil {
			err = j.logW.Insert(epoch, uint16(v), pk, row)
		} else {
			err = j.logW.Update(epoch, uint16(v), pk, a.row, row)
		}
		if err != nil {
			return errors.Wrap(err, "lsmstats/backfill: log store")
		}
		a.row, a.dirty = row, false
	}
	return nil
}

// pendingLog reports whether any of the job's log-store vnodes holds a
// committed change.
func (j *Job) pendingLog() (bool, error) {
	for _, v := range j.ownedLogVnodes() {
		it, err := j.store.NewIter(j.logTable, uint16(v), logPK(uint16(v), 1, 0), nil)
		if err != nil {
			return false, err
		}
		ok := it.First()
		if err := it.Close(); err != nil {
			return false, err
		}
		if ok {
			return true, nil
		}
	}
	return false, nil
}

// appendLog appends a step's changes to the log store at epoch, each in
// its vnode, in their order.
func (j *Job) appendLog(epoch uint64, ops []RowOp) error {
	if j.logSeq == nil {
		j.logSeq = make([]uint64, j.logVnodes)
	}
	clear(j.logSeq)
	for _, op := range ops {
		if int(op.Vnode) >= j.logVnodes {
			return errors.Wrapf(lsm.ErrInvalidVnode, "lsmstats/backfill: log store: vnode %d, table %d has %d", op.Vnode, j.logTable, j.logVnodes)
		}
		seq := j.logSeq[op.Vnode]
		j.logSeq[op.Vnode]++
		if err := j.logW.Insert(epoch, op.Vnode, logPK(op.Vnode, epoch, seq), encodeLogOp(op)); err != nil {
			return errors.Wrap(err, "lsmstats/backfill: log store")
		}
	}
	j.logUncommitted += len(ops)
	return nil
}

// logHead is the next committed log row of one vnode in consumeLog.
type logHead struct {
	vnode uint16
	it    *lsm.Iter
	epoch uint64 // the epoch of the row it is at
}

// consumeLog reads the oldest committed log rows of the job's vnodes after
// the log cursor (the epochs consumed in this opening), up to quota rows
// in whole epochs (at least one epoch), in epoch order across the vnodes
// (a merge of one iterator per vnode; within an epoch, vnode by vnode, each
// in its changes' order), deletes them at epoch, counts them in their
// vnodes' accounts, and returns their changes, and whether the committed
// log store of the job's vnodes holds no more.
func (j *Job) consumeLog(epoch uint64, quota int) (_ []RowOp, _ bool, err error) {
	snap, err := j.store.Snapshot()
	if err != nil {
		return nil, false, err
	}
	defer snap.Close()
	var heads []*logHead
	defer func() {
		for _, h := range heads {
			if h.it != nil {
				err = errors.CombineErrors(err, h.it.Close())
			}
		}
	}()
	corrupt := func(h *logHead, what string, err error) error {
		return errors.Mark(lsmstats.MarkCorruption(errors.Wrapf(err, "log-store pk %x of vnode %d: %s", h.it.PK(), h.vnode, what)), ErrCorruptLog)
	}
	// at reads the epoch of the row h is at (ok false: h is done).
	at := func(h *logHead, ok bool) error {
		if !ok {
			err := h.it.Close()
			h.it = nil
			return err
		}
		pk := h.it.PK()
		v, rest, err := keys.DecodeUint64(pk)
		if err == nil && v != uint64(h.vnode) {
			err = errors.Newf("vnode %d in the pk", v)
		}
		if err == nil {
			h.epoch, _, err = keys.DecodeUint64(rest)
		}
		if err == nil && h.epoch == 0 {
			err = errors.New("epoch 0 past the account row")
		}
		if err != nil {
			return corrupt(h, "pk", err)
		}
		return nil
	}
	for _, v := range j.ownedLogVnodes() {
		it, err := snap.NewIter(j.logTable, uint16(v), logPK(uint16(v), j.logEpoch+1, 0), nil)
		if err != nil {
			return nil, false, err
		}
		h := &logHead{vnode: uint16(v), it: it}
		heads = append(heads, h)
		if err := at(h, it.First()); err != nil {
			return nil, false, err
		}
	}
	var out []RowOp
	for {
		e := uint64(0) // the oldest epoch ahead
		for _, h := range heads {
			if h.it != nil && (e == 0 || h.epoch < e) {
				e = h.epoch
			}
		}
		if e == 0 {
			break // the committed log store is consumed
		}
		if len(out) >= quota {
			j.logConsumed += uint64(len(out))
			return out, false, nil // whole epochs: the next one waits for the next barrier
		}
		for _, h := range heads {
			for h.it != nil && h.epoch == e {
				op, err := decodeLogOp(h.it.Row(), len(j.ups))
				if err != nil {
					return nil, false, err
				}
				if op.Vnode != h.vnode {
					return nil, false, corrupt(h, "row", errors.Newf("a change of vnode %d", op.Vnode))
				}
				pk, row := bytes.Clone(h.it.PK()), bytes.Clone(h.it.Row())
				op.PK, op.Row = bytes.Clone(op.PK), bytes.Clone(op.Row)
				if err := j.logW.Delete(epoch, h.vnode, pk, row); err != nil {
					return nil, false, errors.Wrap(err, "lsmstats/backfill: log store")
				}
				out = append(out, op)
				a := j.accounts[h.vnode]
				a.consumed++
				a.dirty = true
				if err := at(h, h.it.Next()); err != nil {
					return nil, false, err
				}
			}
		}
		j.logEpoch = e
	}
	j.logConsumed += uint64(len(out))
	return out, true, nil
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
	var accounts int64
	for _, a := range j.accounts {
		if a != nil {
			accounts++
		}
	}
	return &PhaseInput{Phase: j.phase, SnapshotEpoch: j.snapEpoch, SnapshotTotals: j.snapTotals,
		LogTable: j.logTable, LogConsumed: j.logConsumed, logVnodes: j.cfg.Vnodes, accounts: accounts}
}

// startSnapshot fixes a new snapshot backfill's epoch at the committed one
// and opens the account of each of its log-store vnodes: its live rows in
// each upstream table at that epoch, written at the step's epoch.
func (j *Job) startSnapshot() {
	j.snapEpoch = j.store.CommittedEpoch()
	st := j.store.Stats()
	j.accounts = make([]*logAccount, j.logVnodes)
	for _, v := range j.ownedLogVnodes() {
		a := &logAccount{epoch: j.snapEpoch, snapRows: make([]int64, len(j.ups)), dirty: true}
		for u, up := range j.ups {
			if int(v) < up.def.VnodeCount {
				a.snapRows[u] = max(0, st.Live.Vnode(up.def.ID, uint16(v)).Rows)
			}
		}
		j.accounts[v] = a
	}
	j.sumAccounts()
	j.logEpoch = 0
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

// ErrOldLogStore is a snapshot backfill whose log store has the layout
// before it was partitioned by the upstream's vnode (every change in one
// vnode, pk (epoch, sequence); job rows of version 3 and below): this
// version does not read it. Finish such a job with the version that
// started it, or drop its tables and start it again.
var ErrOldLogStore = errors.New("lsmstats/backfill: the snapshot backfill's log store has the layout of an older version " +
	"(every change in one vnode), which this version does not read: finish the job with the version that started it, or drop its tables and start it again")

// checkLogStoreLayout refuses a log-store table of the old layout (one
// vnode, pk (epoch, sequence)) with ErrOldLogStore, before CreateTable
// would refuse it as a table of another definition.
func checkLogStoreLayout(s *lsm.Store, cfg JobConfig, want lsm.TableDef) error {
	var def lsm.TableDef
	switch {
	case cfg.Name != "":
		d, ok, err := TableByName(s, cfg.Name+".log_store")
		if err != nil || !ok {
			return err
		}
		def = d
	case cfg.LogStore != 0:
		d, err := s.Table(cfg.LogStore)
		if err != nil {
			return nil // none yet: CreateTable creates it
		}
		def = d
	default:
		return nil
	}
	if !def.VnodeKeyed && len(def.PK) == 2 && len(want.PK) == 3 {
		return errors.Wrapf(ErrOldLogStore, "table %d (%d vnode, pk (epoch, sequence))", def.ID, def.VnodeCount)
	}
	return nil
}

// openLogStore opens a snapshot backfill's log store on OpenJob: its
// writer over the job's vnodes and, once the job started, their accounts;
// and it sets the phase of the vnodes this opening owns, which a move may
// have changed: vnodes moved in before their snapshot was read take the
// part back to the snapshot phase (the snapshot epoch pinned again), and
// vnodes moved into a part that joined, with changes still in their log,
// take it back to the log-store phase (its new changes logged after them).
func (j *Job) openLogStore(m jobMeta) error {
	if j.metaRow != nil && m.version < 4 {
		return errors.Wrapf(ErrOldLogStore, "job row of version %d", m.version)
	}
	def, err := j.store.Table(j.logTable)
	if err != nil {
		return err
	}
	j.logVnodes = def.VnodeCount
	if j.logW, err = j.store.NewWriter(j.logTable, j.cfg.Vnodes, &lsm.WriterOptions{Unchecked: true}); err != nil {
		return err
	}
	j.phase, j.snapEpoch = m.phase, m.snapEpoch
	if !m.started {
		return nil
	}
	if err := j.loadAccounts(); err != nil {
		return err
	}
	unfinished := false
	for _, up := range j.ups {
		owned := j.ownedVnodes(up.def.VnodeCount)
		vs := make([]uint16, len(owned))
		for i, v := range owned {
			vs[i] = uint16(v)
		}
		states, err := LoadStates(j.store, up.state, up.def, vs)
		if err != nil {
			return err
		}
		for _, st := range states {
			unfinished = unfinished || !st.Finished
		}
	}
	switch {
	case unfinished:
		j.phase = PhaseSnapshot
	case j.phase == PhaseJoined:
		pending, err := j.pendingLog()
		if err != nil {
			return err
		}
		if pending {
			j.phase = PhaseLogStore
		}
	}
	return nil
}
