// Package replicated is the replicated state table of an arrangement
// backfill: a read view of an upstream table for the vnodes of one backfill
// actor.
//
// The view is the upstream table's committed data in the store plus an
// overlay of the upstream changes the actor has received but the store has
// not committed yet (non-checkpoint epochs, and the current one). The overlay
// is never persisted by this package: the upstream writer persists the same
// changes. Reads are at an epoch: committed data at the store's committed
// epoch C, overlay versions in (C, epoch]. A backfill reads at the previous
// barrier's epoch while it applies the current epoch's changes, so the
// snapshot it emits and the changes it forwards never overlap.
//
// Statistics of the view are the store's statistics plus the overlay's
// deltas (an insert adds a live row, a delete removes one, an update changes
// bytes only), so a progress estimate over a replicated table needs no
// commit to be current.
//
// A Table is used by one goroutine (its actor).
package replicated

import (
	"bytes"
	"slices"
	"sort"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/lsmstats/lsmstats/stats"
)

// Table is the replicated state table of one actor.
type Table struct {
	store  *lsm.Store
	def    lsm.TableDef
	vnodes *roaring.Bitmap
	// overlay holds the uncommitted changes per vnode.
	overlay map[uint16]*vnodeOverlay
}

// version is one uncommitted change of a pk.
type version struct {
	epoch uint64
	live  bool
	row   []byte
	delta stats.LiveCounts
}

type vnodeOverlay struct {
	rows   map[string][]version // by ascending epoch
	sorted []string             // keys of rows in pk order; nil when stale
	// newest is the newest epoch of any version in rows: once the store
	// has committed it, prune drops the vnode's overlay whole instead of
	// walking its rows (a backfill whose every barrier is a checkpoint
	// finds it so at every snapshot).
	newest uint64
}

// Op is one upstream row change.
type Op struct {
	Vnode uint16
	PK    []byte
	// Live is false for a delete; Row is the new row otherwise.
	Live bool
	Row  []byte
	// Delta is the change of live rows and bytes (+1 insert, -1 delete,
	// 0 update).
	Delta stats.LiveCounts
}

// New returns the replicated table of an upstream table for a vnode set.
func New(store *lsm.Store, table uint32, vnodes *roaring.Bitmap) (*Table, error) {
	def, err := store.Table(table)
	if err != nil {
		return nil, err
	}
	if !vnodes.IsEmpty() && vnodes.Maximum() >= uint32(def.VnodeCount) {
		return nil, errors.Wrapf(lsm.ErrInvalidVnode, "replicated table %d: vnode %d of %d", table, vnodes.Maximum(), def.VnodeCount)
	}
	return &Table{store: store, def: def, vnodes: vnodes.Clone(), overlay: map[uint16]*vnodeOverlay{}}, nil
}

// Def returns the upstream table's definition.
func (t *Table) Def() lsm.TableDef { return t.def }

// Vnodes returns the vnodes of the view (do not modify).
func (t *Table) Vnodes() *roaring.Bitmap { return t.vnodes }

// Apply adds upstream changes of epoch to the overlay. Changes of vnodes
// outside the view are ignored (they belong to other actors).
func (t *Table) Apply(epoch uint64, ops []Op) {
	for _, op := range ops {
		if !t.vnodes.Contains(uint32(op.Vnode)) {
			continue
		}
		o := t.overlay[op.Vnode]
		if o == nil {
			o = &vnodeOverlay{rows: map[string][]version{}}
			t.overlay[op.Vnode] = o
		}
		o.newest = max(o.newest, epoch)
		v := version{epoch: epoch, live: op.Live, row: slices.Clone(op.Row), delta: op.Delta}
		vs, ok := o.rows[string(op.PK)] // a lookup: no copy of the pk
		if n := len(vs); n > 0 && vs[n-1].epoch == epoch {
			v.delta = vs[n-1].delta.Add(op.Delta)
			vs[n-1] = v // in place
			continue
		}
		if !ok {
			o.sorted = nil
		}
		o.rows[string(op.PK)] = append(vs, v)
	}
}

// prune drops overlay versions the store has committed.
func (t *Table) prune() {
	c := t.store.CommittedEpoch()
	for vn, o := range t.overlay {
		if o.newest <= c {
			delete(t.overlay, vn)
			continue
		}
		for k, vs := range o.rows {
			i := sort.Search(len(vs), func(i int) bool { return vs[i].epoch > c })
			if i == len(vs) {
				delete(o.rows, k)
				o.sorted = nil
			} else if i > 0 {
				o.rows[k] = vs[i:]
			}
		}
		if len(o.rows) == 0 {
			delete(t.overlay, vn)
		}
	}
}

// Pending returns the number of pks with uncommitted changes.
func (t *Table) Pending() int {
	t.prune()
	n := 0
	for _, o := range t.overlay {
		n += len(o.rows)
	}
	return n
}

// Snapshot is a read view at one epoch. Close releases the store's pin.
type Snapshot struct {
	t     *Table
	epoch uint64
	pin   *lsm.Snapshot
}

// Snapshot returns a view at epoch, which must be at least the store's
// committed epoch (older data may have been collected) and covered by the
// overlay above it.
func (t *Table) Snapshot(epoch uint64) (*Snapshot, error) {
	t.prune()
	pin, err := t.store.Snapshot()
	if err != nil {
		return nil, err
	}
	if epoch < pin.Epoch() {
		pin.Close()
		return nil, errors.Newf("replicated table %d: read at epoch %d below the committed epoch %d", t.def.ID, epoch, pin.Epoch())
	}
	return &Snapshot{t: t, epoch: epoch, pin: pin}, nil
}

// Close releases the snapshot.
func (s *Snapshot) Close() { s.pin.Close() }

// Epoch returns the snapshot's epoch.
func (s *Snapshot) Epoch() uint64 { return s.epoch }

// at returns the newest overlay version of a pk at or below the epoch.
func (s *Snapshot) at(vs []version) (version, bool) {
	for i := len(vs) - 1; i >= 0; i-- {
		if vs[i].epoch <= s.epoch {
			return vs[i], true
		}
	}
	return version{}, false
}

func (o *vnodeOverlay) keys() []string {
	if o.sorted == nil {
		o.sorted = make([]string, 0, len(o.rows))
		for k := range o.rows {
			o.sorted = append(o.sorted, k)
		}
		sort.Strings(o.sorted)
	}
	return o.sorted
}

// Iter returns the live rows of a vnode with pk > after (nil: from the
// start) in pk order.
func (s *Snapshot) Iter(vnode uint16, after []byte) (*Iter, error) {
	if !s.t.vnodes.Contains(uint32(vnode)) {
		return nil, errors.Wrapf(lsm.ErrInvalidVnode, "replicated table %d does not hold vnode %d", s.t.def.ID, vnode)
	}
	base, err := s.pin.NewIter(s.t.def.ID, vnode, after, nil)
	if err != nil {
		return nil, err
	}
	it := &Iter{s: s, base: base}
	it.start(vnode, after)
	return it, nil
}

// Reset makes the iterator one over the live rows of another vnode (or the
// same) with pk > after, as Iter would return, reusing its store iterator
// (lsm.Iter.Reset): a reader that visits the vnodes in turn needs one.
func (it *Iter) Reset(vnode uint16, after []byte) error {
	if !it.s.t.vnodes.Contains(uint32(vnode)) {
		return errors.Wrapf(lsm.ErrInvalidVnode, "replicated table %d does not hold vnode %d", it.s.t.def.ID, vnode)
	}
	if err := it.base.Reset(vnode, after, nil); err != nil {
		return err
	}
	it.start(vnode, after)
	return nil
}

// start positions a new or reset iterator.
func (it *Iter) start(vnode uint16, after []byte) {
	it.after, it.stepBase, it.pk, it.row = after, false, nil, nil
	it.rows, it.keys, it.ki = nil, nil, 0
	if o := it.s.t.overlay[vnode]; o != nil {
		it.rows = o.rows
		it.keys = o.keys()
		it.ki = sort.SearchStrings(it.keys, string(after))
	}
	it.baseOK = it.base.First()
}

// Iter merges the store's rows with the overlay. Not safe for concurrent
// use; PK and Row are valid until Next.
type Iter struct {
	s      *Snapshot
	base   *lsm.Iter
	baseOK bool
	after  []byte
	rows   map[string][]version
	keys   []string
	ki     int
	// stepBase defers moving the base iterator past the row just returned.
	stepBase bool

	pk, row []byte
}

// Next moves to the next live row; false at the end or on error (see
// Close).
func (it *Iter) Next() bool {
	if it.stepBase {
		// The previous row came from the base iterator: move it now, so that
		// the row stayed valid until this call.
		it.stepBase = false
		it.baseOK = it.base.Next()
	}
	for {
		// The base iterator starts at pk >= after: skip after itself.
		if it.baseOK && it.after != nil && bytes.Equal(it.base.PK(), it.after) {
			it.baseOK = it.base.Next()
		}
		for it.ki < len(it.keys) && it.after != nil && it.keys[it.ki] <= string(it.after) {
			it.ki++
		}
		haveO := it.ki < len(it.keys)
		if !it.baseOK && !haveO {
			return false
		}
		c := -1
		switch {
		case !haveO:
		case !it.baseOK:
			c = 1
		default:
			c = bytes.Compare(it.base.PK(), []byte(it.keys[it.ki]))
		}
		if c < 0 {
			// A committed row without uncommitted changes.
			it.pk, it.row = it.base.PK(), it.base.Row()
			it.stepBase = true
			return true
		}
		k := it.keys[it.ki]
		v, visible := it.s.at(it.rows[k])
		if c == 0 && !visible {
			// Changes exist only above the epoch: the committed row stands.
			it.pk, it.row = it.base.PK(), it.base.Row()
			it.ki++
			it.stepBase = true
			return true
		}
		it.ki++
		if c == 0 {
			it.baseOK = it.base.Next()
		}
		if visible && v.live {
			it.pk, it.row = []byte(k), v.row
			return true
		}
	}
}

// PK returns the current row's pk.
func (it *Iter) PK() []byte { return it.pk }

// Row returns the current row.
func (it *Iter) Row() []byte { return it.row }

// Err returns the error that ended the iteration, if any.
func (it *Iter) Err() error { return it.base.Error() }

// Close releases the iterator and returns the error that ended it, if any.
func (it *Iter) Close() error { return it.base.Close() }

// ---- statistics ------------------------------------------------------------

// Live returns the live counts of a vnode at the snapshot's epoch.
func (s *Snapshot) Live(st stats.Snapshot, vnode uint16) stats.LiveCounts {
	c := st.Live.Vnode(s.t.def.ID, vnode)
	if o := s.t.overlay[vnode]; o != nil {
		for _, vs := range o.rows {
			c = c.Add(s.delta(vs))
		}
	}
	return c
}

// delta sums the overlay deltas of a pk up to the snapshot's epoch.
func (s *Snapshot) delta(vs []version) stats.LiveCounts {
	var d stats.LiveCounts
	for _, v := range vs {
		if v.epoch <= s.epoch {
			d = d.Add(v.delta)
		}
	}
	return d
}

// EstimateRows estimates the live rows of a vnode with pk in [lo, hi) at the
// snapshot's epoch: the store's estimate plus the overlay's exact deltas.
func (s *Snapshot) EstimateRows(st stats.Snapshot, vnode uint16, lo, hi []byte) stats.RowEstimate {
	e := st.EstimateRows(s.t.def.ID, vnode, lo, hi)
	if o := s.t.overlay[vnode]; o != nil {
		var d int64
		for k, vs := range o.rows {
			if (lo == nil || k >= string(lo)) && (hi == nil || k < string(hi)) {
				d += s.delta(vs).Rows
			}
		}
		e.Rows += float64(d)
		e.Lower = max(0, e.Lower+d)
		e.Upper = max(0, e.Upper+d)
	}
	return e
}
