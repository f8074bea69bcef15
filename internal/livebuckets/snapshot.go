package livebuckets

import (
	"bytes"
	"maps"
	"slices"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
)

type liveTable struct {
	vnodes    []*liveVnode // nil entries are vnodes that never had a row
	total     Counts
	estimates bool
	// budget is the table's bucket budget (see splitLimit).
	budget int64
	// coarsened is the table's share of the split limit, rows/budget, when
	// Normalize last merged all its vnodes (see coarsen); 0 after a load.
	coarsened int64
}

// splitLimit is the split limit of a vnode of this table holding
// vnodeRows rows.
func (t *liveTable) splitLimit(vnodeRows int64) int64 {
	return splitLimit(vnodeRows, t.total.Rows, t.budget)
}

// Snapshot is an immutable snapshot of the live statistics of every table.
type Snapshot struct {
	tables map[uint32]*liveTable
	// at is when the snapshot was published.
	at time.Time
}

var emptyVnode = func() *liveVnode {
	v := newLiveVnode()
	v.seal()
	return v
}()

func (l *Snapshot) table(id uint32) *liveTable {
	if l == nil {
		return nil
	}
	return l.tables[id]
}

func (t *liveTable) vnode(v uint16) *liveVnode {
	if t == nil || int(v) >= len(t.vnodes) || t.vnodes[v] == nil {
		return emptyVnode
	}
	return t.vnodes[v]
}

// Vnode returns the live counts of one vnode.
func (l *Snapshot) Vnode(table uint32, vnode uint16) Counts {
	return l.table(table).vnode(vnode).total
}

// Tables returns the ids of the tables the snapshot knows (every table of
// the store's catalog, with rows or not), in increasing order.
func (l *Snapshot) Tables() []uint32 {
	if l == nil {
		return nil
	}
	out := make([]uint32, 0, len(l.tables))
	for id := range l.tables {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// PublishedAt returns when the snapshot was published: by the commit whose
// deltas it holds, by a bucket split, or when the store opened and loaded
// it. Commits publish a snapshot even when they change no count, so the
// age of the current snapshot says how long ago the statistics were last
// brought up to date. Zero for a nil Snapshot.
func (l *Snapshot) PublishedAt() time.Time {
	if l == nil {
		return time.Time{}
	}
	return l.at
}

// Table returns the live counts of a table.
func (l *Snapshot) Table(table uint32) Counts {
	if t := l.table(table); t != nil {
		return t.total
	}
	return Counts{}
}

// Sum returns the live counts of a set of vnodes of a table.
func (l *Snapshot) Sum(table uint32, vnodes *roaring.Bitmap) Counts {
	t := l.table(table)
	var sum Counts
	if t == nil {
		return sum
	}
	it := vnodes.Iterator()
	for it.HasNext() {
		v := it.Next()
		if v >= uint32(len(t.vnodes)) {
			break
		}
		sum = sum.Add(t.vnode(uint16(v)).total)
	}
	return sum
}

// ContainsEstimates reports whether a table's live counts were built from
// unchecked ops since they were last recomputed.
func (l *Snapshot) ContainsEstimates(table uint32) bool {
	t := l.table(table)
	return t != nil && t.estimates
}

// Bucket is one bucket of a vnode's live statistics: the live rows and
// bytes with pk at or above Lower (nil for the first bucket) and below the
// next bucket's, and whether Lower is the pk of a live row.
type Bucket struct {
	Lower []byte
	Counts
	LowerLive bool
}

// VnodeDetail is everything the live statistics hold of one vnode, for
// verification and inspection: its buckets, and the anchors of its first
// and last bucket (no live row is below MinPK or above MaxPK; MinLive and
// MaxLive say whether they are live rows themselves).
type VnodeDetail struct {
	Buckets          []Bucket
	MinPK, MaxPK     []byte
	MinLive, MaxLive bool
}

// Detail returns the buckets and anchors of a vnode of l.
func Detail(l *Snapshot, table uint32, vnode uint16) VnodeDetail {
	v := l.table(table).vnode(vnode)
	d := VnodeDetail{Buckets: make([]Bucket, len(v.buckets)), MinPK: v.minPK, MaxPK: v.maxPK, MinLive: v.minLive, MaxLive: v.maxLive}
	for i, b := range v.buckets {
		d.Buckets[i] = Bucket{Lower: b.lower(), Counts: b.Counts, LowerLive: b.lowerLive}
	}
	return d
}

// BucketCount returns the number of buckets over all tables.
func (l *Snapshot) BucketCount() int {
	n := 0
	if l == nil {
		return 0
	}
	for _, t := range l.tables {
		for _, v := range t.vnodes {
			if v != nil {
				n += len(v.buckets)
			}
		}
	}
	return n
}

func (l *Snapshot) cloneTables() *Snapshot {
	return &Snapshot{tables: maps.Clone(l.tables)}
}

// TableBuckets returns the number of buckets of a table.
func (l *Snapshot) TableBuckets(table uint32) int {
	t := l.table(table)
	if t == nil {
		return 0
	}
	n := 0
	for _, v := range t.vnodes {
		if v != nil {
			n += len(v.buckets)
		}
	}
	return n
}

// NotLive reports whether the statistics prove that no live row of a
// vnode has pk: the vnode never had a live row since its anchors were
// last set, pk lies below its smallest or above its largest pk (every
// put moves them out, whatever writer made it), pk is an anchor or a
// bucket bound whose live flag is clear (those flags follow every
// version exactly), or pk's bucket holds no row but its live anchors and
// the table's counts contain no estimates (its writers were all checked,
// so the counts are exact). A false answer says nothing: the row may or may not be live.
// A checked writer asks it before reading the committed row, which an
// insert of a new pk then need not do.
func (l *Snapshot) NotLive(table uint32, vnode uint16, pk []byte) bool {
	t := l.table(table)
	if t == nil || int(vnode) >= len(t.vnodes) || t.vnodes[vnode] == nil {
		return t != nil && int(vnode) < len(t.vnodes) // a vnode that never had a row
	}
	v := t.vnodes[vnode]
	if v.minPK == nil || v.maxPK == nil {
		return v.minPK == nil && v.maxPK == nil
	}
	k := key8(pk)
	switch c := compareAnchor(pk, k, v.minPK, v.minKey); {
	case c < 0:
		return true
	case c == 0:
		return !v.minLive
	}
	switch c := compareAnchor(pk, k, v.maxPK, v.maxKey); {
	case c > 0:
		return true
	case c == 0:
		return !v.maxLive
	}
	i := v.find(pk)
	b := &v.buckets[i]
	if i > 0 && v.keys[i] == k && bytes.Equal(b.lower(), pk) {
		return !b.lowerLive
	}
	// pk lies strictly between the bucket's anchors: not live if the
	// bucket's rows are its live anchors.
	loLive, hiLive := b.lowerLive, i == len(v.buckets)-1 && v.maxLive
	if i == 0 {
		loLive = v.minLive
	}
	return !t.estimates && b.Rows-b2i(loLive)-b2i(hiLive) <= 0
}
