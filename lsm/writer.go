package lsm

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/stats"
)

// Writer is the local store of one actor for one table: it buffers row ops
// of its current epoch in memory, seals epochs, and hands sealed epochs to
// the next Commit. Its vnodes are its own: no two open writers of a table
// share a vnode. A Writer is used by one goroutine at a time.
type Writer struct {
	s       *Store
	def     *TableDef
	vnodes  *roaring.Bitmap
	checked bool
	name    string

	mu      sync.Mutex
	scratch []byte // the prefix of the op being applied
	// sizeHint sizes the entries and the index of a new epoch's piece: the
	// entries of the last piece this writer sealed. spare is the last
	// piece the store released, whose buffers the next piece reuses.
	sizeHint   int
	spare      piece
	closed     bool
	open       *epochBuf   // the epoch being written; nil between seal and the next op
	sealed     []*epochBuf // sealed, uncommitted, by ascending epoch
	lastSealed uint64
}

// NewWriter returns a writer for a table. vnodes is the set of vnodes it
// owns; nil means all of the table's vnodes.
func (s *Store) NewWriter(table uint32, vnodes *roaring.Bitmap, opts *WriterOptions) (*Writer, error) {
	if err := s.checkWritable(); err != nil {
		return nil, err
	}
	def, err := s.table(table)
	if err != nil {
		return nil, err
	}
	if vnodes == nil {
		vnodes = roaring.New()
		vnodes.AddRange(0, uint64(def.VnodeCount))
	} else {
		vnodes = vnodes.Clone()
		if !vnodes.IsEmpty() && vnodes.Maximum() >= uint32(def.VnodeCount) {
			return nil, errors.Wrapf(ErrInvalidVnode, "writer of table %d: vnode %d, vnode count %d", table, vnodes.Maximum(), def.VnodeCount)
		}
	}
	w := &Writer{s: s, def: def, vnodes: vnodes, checked: opts == nil || !opts.Unchecked}
	w.name = fmt.Sprintf("writer(table %d, vnodes %s)", table, vnodeSetString(vnodes))
	s.mu.Lock()
	defer s.mu.Unlock()
	for o := range s.mu.writers {
		if o.def.ID == table && o.vnodes.Intersects(vnodes) {
			v := roaring.And(o.vnodes, vnodes).Minimum()
			return nil, errors.Wrapf(ErrInvalidVnode, "vnode %d of table %d is owned by %s", v, table, o.name)
		}
	}
	if m := s.mu.moving[table]; m != nil && m.Intersects(vnodes) {
		v := roaring.And(m, vnodes).Minimum()
		return nil, errors.Wrapf(ErrInvalidVnode, "vnode %d of table %d is being moved to or from another store (Store.MoveVnodes)", v, table)
	}
	s.mu.writers[w] = struct{}{}
	return w, nil
}

func vnodeSetString(b *roaring.Bitmap) string {
	if b.IsEmpty() {
		return "{}"
	}
	if b.GetCardinality() == uint64(b.Maximum()-b.Minimum()+1) {
		return fmt.Sprintf("%d-%d", b.Minimum(), b.Maximum())
	}
	return fmt.Sprintf("%d vnodes in %d-%d", b.GetCardinality(), b.Minimum(), b.Maximum())
}

// Table returns the writer's table id.
func (w *Writer) Table() uint32 { return w.def.ID }

// Vnodes returns the writer's vnode set (do not modify).
func (w *Writer) Vnodes() *roaring.Bitmap { return w.vnodes }

// epochBuf holds one writer's data of one epoch: spilled pieces (staged SSTs,
// oldest first) and the piece in memory, whose version is (epoch, offset).
type epochBuf struct {
	w      *Writer
	epoch  uint64
	offset uint16
	spills []*spillFile
	piece
	unchecked bool // some op of this epoch was unchecked
}

// piece is the in-memory part of an epochBuf: one entry per prefix with the
// net effect of its ops since the last spill.
//
// While its entries came in ascending prefix order (a backfill writes its
// MV so, a vnode at a time, and a load by sequence does too), the piece
// finds an entry by comparing with its last one and, failing that, by a
// binary search, keeps no index, and needs no sort to be flushed: the
// index, a map from prefix to entry, is built the first time an entry
// comes out of order (see find and add).
type piece struct {
	// ordered says that entries are in ascending prefix order and index
	// is nil.
	ordered bool
	index   map[string]int32
	hint    int // the index's size hint, once built
	entries []entry
	bytes   int64
	// arena holds the entries' prefixes and rows, so that an op costs no
	// allocation of its own; the index's keys are the prefixes in it, which
	// never change. A row replaced by a longer one moves to the heap.
	arena []byte
	// slabs are the arena's slabs of arenaSlab bytes so far, and free
	// those of a dead piece that reserve takes before it allocates (reuse).
	slabs, free [][]byte
}

// arenaSlab is the size of a piece's arena slabs.
const arenaSlab = 64 << 10

// newPiece returns an empty piece (a writer's later pieces reuse a dead
// one's buffers: reuse).
func newPiece() piece { return piece{ordered: true} }

// find returns the index in entries of prefix's entry, or, if it has
// none, where add puts one: len(entries) unless the piece is ordered and
// prefix is below its last entry.
func (p *piece) find(prefix []byte) (int32, bool) {
	n := len(p.entries)
	if !p.ordered {
		if i, ok := p.index[string(prefix)]; ok {
			return i, true
		}
		return int32(n), false
	}
	if n == 0 || bytes.Compare(prefix, p.entries[n-1].prefix) > 0 {
		return int32(n), false // above every entry: the usual case
	}
	i, ok := slices.BinarySearchFunc(p.entries, prefix, func(e entry, prefix []byte) int { return bytes.Compare(e.prefix, prefix) })
	return int32(i), ok
}

// add appends e, whose prefix has no entry yet and would go at (find's
// answer), and indexes it.
func (p *piece) add(e entry, at int32) {
	if p.ordered {
		if n := len(p.entries); int(at) < n {
			p.ordered = false
			p.index = make(map[string]int32, max(p.hint, 2*n))
			for i := range p.entries {
				pr := p.entries[i].prefix
				p.index[unsafe.String(unsafe.SliceData(pr), len(pr))] = int32(i)
			}
		}
	}
	if !p.ordered {
		p.index[unsafe.String(unsafe.SliceData(e.prefix), len(e.prefix))] = int32(len(p.entries))
	}
	p.entries = append(p.entries, e)
}

// reserve makes room for n more bytes in the arena.
func (p *piece) reserve(n int) {
	if len(p.arena)+n <= cap(p.arena) {
		return
	}
	if k := len(p.free); k > 0 && n <= arenaSlab {
		p.arena, p.free = p.free[k-1][:0], p.free[:k-1]
	} else {
		p.arena = make([]byte, 0, max(arenaSlab, n))
	}
	if cap(p.arena) == arenaSlab {
		p.slabs = append(p.slabs, p.arena)
	}
}

// reuse returns an empty piece for hint entries that reuses p's entries
// and arena slabs, up to keepSlabs of them. p must be dead: nothing may
// read its entries, nor the bytes they point to, again (a piece committed
// and released, or spilled). A writer's pieces are about the same size at
// every epoch, and each new one allocated and cleared its slabs and its
// entries anew: 40% of a backfill's allocations.
func (p *piece) reuse(hint int) piece {
	np := piece{ordered: true, hint: hint}
	if cap(p.entries) >= hint {
		np.entries = p.entries[:0]
	} else {
		np.entries = make([]entry, 0, hint)
	}
	np.free = append(p.free, p.slabs...)
	if len(np.free) > keepSlabs {
		np.free = np.free[:keepSlabs]
	}
	return np
}

// keepSlabs bounds the arena slabs a writer keeps between its pieces (4 MB).
const keepSlabs = 64

// copyBytes returns a copy of b in the arena (nil for an empty b), its
// capacity capped at its length.
func (p *piece) copyBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	p.reserve(len(b))
	n := len(p.arena)
	p.arena = append(p.arena, b...)
	return p.arena[n:len(p.arena):len(p.arena)]
}

// addPrefix copies the prefix of (table, vnode, pk) into the arena.
func (p *piece) addPrefix(table uint32, vnode uint16, pk []byte) []byte {
	n := len(pk) + 7
	p.reserve(n)
	start := len(p.arena)
	p.arena = keys.AppendPrefix(p.arena, table, vnode, pk)
	return p.arena[start:len(p.arena):len(p.arena)]
}

// entry is the net effect of the ops on one pk within one piece. prior is
// the state before the piece (read when checked, implied by the first op
// otherwise); the entry's live delta is its state minus prior.
type entry struct {
	prefix     []byte
	value      []byte
	put        bool
	prior      bool
	priorBytes int64
	// checked: prior was read, not implied by the op. A checked entry that
	// goes from absent to absent (insert, then delete in one piece) writes
	// nothing: a delete version there would hide nothing.
	checked bool
}

// noop reports whether the entry changes nothing stored.
func (e *entry) noop() bool { return e.checked && !e.prior && !e.put }

const entryOverhead = 96 // map slot, entry struct and slice headers

func (e *entry) delta() stats.LiveCounts {
	return liveDelta(e.put, len(e.prefix)-7+len(e.value), e.prior, e.priorBytes)
}

// liveDelta is the change of live rows and bytes of one pk from its prior
// state to its new one. rowBytes counts pk and row.
func liveDelta(put bool, rowBytes int, prior bool, priorBytes int64) stats.LiveCounts {
	var d stats.LiveCounts
	if put {
		d.Rows++
		d.Bytes += int64(rowBytes)
	}
	if prior {
		d.Rows--
		d.Bytes -= priorBytes
	}
	return d
}

// newEpochBuf returns epoch's buffer for w, reusing the buffers of w's last
// released piece; w.mu is held.
func newEpochBuf(w *Writer, epoch uint64) *epochBuf {
	b := &epochBuf{w: w, epoch: epoch, piece: w.spare.reuse(w.sizeHint)}
	w.spare = piece{}
	return b
}

func (b *epochBuf) empty() bool { return len(b.entries) == 0 && len(b.spills) == 0 }

// sortedEntries returns the piece's entries that change something, in key
// order.
func (p *piece) sortedEntries() []*entry {
	out := make([]*entry, 0, len(p.entries))
	for i := range p.entries {
		if !p.entries[i].noop() {
			out = append(out, &p.entries[i])
		}
	}
	if !p.ordered {
		sortEntries(out)
	}
	return out
}

// sortEntries sorts entries by prefix. Each is compared by its first 16
// bytes (table, vnode and the pk's first 10), zero-padded and read once as
// two integers, whose order is the bytes' where they differ, and by its
// bytes only where they tie: a sort of a load's random pks spent most of
// its time chasing the prefixes for bytes.Compare.
func sortEntries(entries []*entry) {
	type keyed struct {
		hi, lo uint64
		e      *entry
	}
	ks := make([]keyed, len(entries))
	for i, e := range entries {
		var b [16]byte
		copy(b[:], e.prefix)
		ks[i] = keyed{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:]), e}
	}
	slices.SortFunc(ks, func(a, b keyed) int {
		if a.hi != b.hi {
			return cmp.Compare(a.hi, b.hi)
		}
		if a.lo != b.lo {
			return cmp.Compare(a.lo, b.lo)
		}
		return bytes.Compare(a.e.prefix, b.e.prefix)
	})
	for i := range ks {
		entries[i] = ks[i].e
	}
}

type opKind int

const (
	opInsert opKind = iota
	opDelete
	opUpdate
)

func (k opKind) String() string { return [...]string{"insert", "delete", "update"}[k] }

// Insert adds a row that must not be live.
func (w *Writer) Insert(epoch uint64, vnode uint16, pk, row []byte) error {
	return w.apply(opInsert, epoch, vnode, pk, nil, row)
}

// Delete removes a live row; oldRow is its current value.
func (w *Writer) Delete(epoch uint64, vnode uint16, pk, oldRow []byte) error {
	return w.apply(opDelete, epoch, vnode, pk, oldRow, nil)
}

// Update replaces a live row's value.
func (w *Writer) Update(epoch uint64, vnode uint16, pk, oldRow, newRow []byte) error {
	return w.apply(opUpdate, epoch, vnode, pk, oldRow, newRow)
}

func (w *Writer) apply(op opKind, epoch uint64, vnode uint16, pk, oldRow, newRow []byte) error {
	if err := w.s.checkWritable(); err != nil {
		return err
	}
	if !w.vnodes.Contains(uint32(vnode)) {
		return errors.Wrapf(ErrInvalidVnode, "%s does not own vnode %d", w.name, vnode)
	}
	if err := w.def.checkRow(vnode, pk); err != nil {
		return err
	}
	w.mu.Lock()
	grew, err := w.applyLocked(op, epoch, vnode, pk, oldRow, newRow)
	w.mu.Unlock()
	if err != nil {
		return err
	}
	if w.s.buffered.Add(grew) > w.s.opts.MemoryWatermark && w.s.opts.MemoryWatermark > 0 {
		return w.s.maybeSpill()
	}
	return nil
}

func (w *Writer) applyLocked(op opKind, epoch uint64, vnode uint16, pk, oldRow, newRow []byte) (int64, error) {
	if w.closed {
		return 0, errors.Newf("lsmstats: %s is closed", w.name)
	}
	if err := w.beginLocked(epoch); err != nil {
		return 0, err
	}
	b := w.open
	w.scratch = keys.AppendPrefix(w.scratch[:0], w.def.ID, vnode, pk)
	prefix := w.scratch
	inconsistent := func(why string) error {
		return errors.Wrapf(ErrInconsistentOp, "%s of pk %s in vnode %d of table %d at epoch %d: %s",
			op, w.def.PK.Format(pk), vnode, w.def.ID, epoch, why)
	}
	i, ok := b.find(prefix)
	if ok {
		// A later op on a pk of this piece: it must follow from the entry.
		e := &b.entries[i]
		switch {
		case op == opInsert && e.put:
			return 0, inconsistent("the row is live")
		case op != opInsert && !e.put:
			return 0, inconsistent("the row is not live")
		case op != opInsert && !bytes.Equal(oldRow, e.value):
			return 0, inconsistent("old row differs from the stored row")
		}
		grew := int64(len(newRow)) - int64(len(e.value))
		e.put = op != opDelete
		e.value = append(e.value[:0], newRow...)
		b.bytes += grew
		return grew, nil
	}
	e := entry{put: op != opDelete, checked: w.checked}
	if w.checked {
		cur, live, err := w.checkLocked(prefix, b, vnode, pk)
		if err != nil {
			return 0, err
		}
		switch {
		case op == opInsert && live:
			return 0, inconsistent("the row is live")
		case op != opInsert && !live:
			return 0, inconsistent("the row is not live")
		case op != opInsert && !bytes.Equal(oldRow, cur):
			return 0, inconsistent("old row differs from the stored row")
		}
	} else {
		b.unchecked = true
	}
	if op != opInsert {
		e.prior = true
		e.priorBytes = int64(len(pk) + len(oldRow))
	}
	e.prefix = b.addPrefix(w.def.ID, vnode, pk)
	e.value = b.copyBytes(newRow)
	b.add(e, i)
	grew := int64(2*len(prefix)+len(newRow)) + entryOverhead
	b.bytes += grew
	return grew, nil
}

// beginLocked makes epoch the open epoch, or checks that it is.
func (w *Writer) beginLocked(epoch uint64) error {
	if w.open != nil {
		if epoch == w.open.epoch {
			return nil
		}
		if epoch < w.open.epoch {
			return errors.Wrapf(ErrEpochOrder, "%s: op at epoch %d, but epoch %d is open", w.name, epoch, w.open.epoch)
		}
		return errors.Wrapf(ErrEpochOrder, "%s: op at epoch %d while epoch %d is open; seal it first", w.name, epoch, w.open.epoch)
	}
	if err := w.checkNewEpoch(epoch); err != nil {
		return err
	}
	w.open = newEpochBuf(w, epoch)
	return nil
}

func (w *Writer) checkNewEpoch(epoch uint64) error {
	if epoch <= w.lastSealed {
		return errors.Wrapf(errEpochSealed, "%s: epoch %d, last sealed epoch %d", w.name, epoch, w.lastSealed)
	}
	if floor := w.s.EpochFloor(); epoch <= floor {
		return errors.Wrapf(ErrEpochOrder, "%s: epoch %d is not above the store's epoch floor %d (committed epoch or high-water mark)", w.name, epoch, floor)
	}
	if epoch > keys.MaxEpoch {
		return errors.Wrapf(ErrEpochOrder, "%s: epoch %d exceeds the maximum %d", w.name, epoch, uint64(keys.MaxEpoch))
	}
	return nil
}

// Seal closes epoch for this writer: no more ops at it or below. An epoch
// with no ops can be sealed too (the writer took part in it).
func (w *Writer) Seal(epoch uint64) error {
	if err := w.s.checkWritable(); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errors.Newf("lsmstats: %s is closed", w.name)
	}
	if w.open != nil {
		if epoch != w.open.epoch {
			return errors.Wrapf(ErrEpochOrder, "%s: seal of epoch %d while epoch %d is open", w.name, epoch, w.open.epoch)
		}
		if !w.open.empty() {
			w.sealed = append(w.sealed, w.open)
		}
		w.sizeHint = len(w.open.entries)
		w.open = nil
	} else if err := w.checkNewEpoch(epoch); err != nil {
		return err
	}
	w.lastSealed = epoch
	return nil
}

// Get reads a row as this writer sees it: its uncommitted ops first, then
// the committed data.
func (w *Writer) Get(vnode uint16, pk []byte) ([]byte, bool, error) {
	if err := w.s.checkOpen(); err != nil {
		return nil, false, err
	}
	if err := w.def.checkRow(vnode, pk); err != nil {
		return nil, false, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	row, live, err := w.lookupLocked(keys.AppendPrefix(nil, w.def.ID, vnode, pk), nil)
	if err != nil || !live {
		return nil, false, err
	}
	return append([]byte(nil), row...), true, nil
}

// lookupLocked finds the newest state of prefix in the writer's view, below
// the in-memory piece of skip (nil: include every piece).
func (w *Writer) lookupLocked(prefix []byte, skip *epochBuf) ([]byte, bool, error) {
	if row, put, found, err := w.lookupBuffersLocked(prefix, skip); err != nil || found {
		return row, put, err
	}
	return w.s.getCommitted(prefix)
}

// checkLocked is lookupLocked for a checked op on pk of vnode (prefix):
// below the writer's own buffers, a pk that the committed live statistics
// prove not live (livebuckets.Snapshot.NotLive: an insert above its
// vnode's largest pk, in an empty bucket, ...) is not read from Pebble,
// whose point read of a missing pk still searches every memtable. The
// statistics read are those of the committed epoch the read would see:
// a commit publishes them before it releases the writer's committed
// buffers, and this runs under the writer's lock, so a pk not found in
// the buffers is in the statistics read after it.
func (w *Writer) checkLocked(prefix []byte, skip *epochBuf, vnode uint16, pk []byte) ([]byte, bool, error) {
	if row, put, found, err := w.lookupBuffersLocked(prefix, skip); err != nil || found {
		return row, put, err
	}
	if w.s.mu.live.Current().NotLive(w.def.ID, vnode, pk) {
		w.s.metrics.checksAnswered.Add(1)
		return nil, false, nil
	}
	return w.s.getCommitted(prefix)
}

// lookupBuffersLocked finds the newest state of prefix in the writer's
// buffers, below the in-memory piece of skip (nil: include every piece),
// and reports whether it found one.
func (w *Writer) lookupBuffersLocked(prefix []byte, skip *epochBuf) (row []byte, put, found bool, err error) {
	for i := len(w.sealed); i >= 0; i-- {
		// The open epoch first, then the sealed ones, newest first.
		var b *epochBuf
		if i == len(w.sealed) {
			if b = w.open; b == nil {
				continue
			}
		} else {
			b = w.sealed[i]
		}
		if b != skip {
			if j, ok := b.find(prefix); ok {
				e := &b.entries[j]
				return e.value, e.put, true, nil
			}
		}
		for k := len(b.spills) - 1; k >= 0; k-- {
			row, put, found, err := b.spills[k].get(prefix)
			if err != nil || found {
				return row, put, found, err
			}
		}
	}
	return nil, false, false, nil
}

// Close releases the writer's vnodes. Its open epoch is discarded; sealed
// epochs are still committed by the next Commit that covers them.
func (w *Writer) Close() error { return w.close(false) }

// Abort releases the writer's vnodes and discards every epoch it has not
// committed, sealed or not: what a caller that gives up on its work in
// flight does (a cancelled job), as a crash would. After Close instead,
// the sealed epochs of a writer commit with the next Commit — and collide
// with the epochs a new writer over the same rows takes from EpochFloor.
func (w *Writer) Abort() error { return w.close(true) }

func (w *Writer) close(abort bool) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	if w.open != nil {
		w.s.release(w.open)
		w.open = nil
	}
	sealed := w.sealed
	w.sealed = nil
	if abort {
		for _, b := range sealed {
			w.s.release(b)
		}
		sealed = nil
	}
	w.mu.Unlock()
	s := w.s
	s.mu.Lock()
	delete(s.mu.writers, w)
	s.mu.orphans = append(s.mu.orphans, sealed...)
	s.mu.Unlock()
	return nil
}

// release frees the memory and staged files of a buffer.
func (s *Store) release(b *epochBuf) {
	s.buffered.Add(-b.bytes)
	b.bytes = 0
	if !b.w.closed {
		b.w.spare = b.piece
	}
	b.piece = newPiece()
	for _, f := range b.spills {
		f.close(s)
	}
	b.spills = nil
}
