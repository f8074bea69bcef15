package livebuckets

import (
	"bytes"
	"slices"
	"time"

	"github.com/cockroachdb/errors"
)

// Batch accumulates the live deltas of one commit on a private copy of
// the touched vnodes. Nothing is visible until Publish.
type Batch struct {
	s      *State
	next   *Snapshot
	tables map[uint32]*liveTable // copied tables
	vnodes map[vkey]*liveVnode   // copied vnodes
	seq    sequential
	// appends are the rows each vnode's last bucket gained above its
	// largest pk, for Normalize to split it without a scan (appendRun).
	appends      map[vkey]*appendRun
	appendBudget int
	// lastRun is appends[lastRunKey] (nil: none) if runCached: the run
	// of the vnode of the last delta.
	lastRunKey vkey
	lastRun    *appendRun
	runCached  bool
	// lastKey and lastVnode are the vnode of the last lookup: a commit's
	// deltas come in (table, vnode, pk) order, so most lookups repeat it.
	lastKey   vkey
	lastVnode *liveVnode
	// foldAll makes MetaEntries fold every vnode of the batch (a
	// recount).
	foldAll bool
	// deltas counts the batch's Apply calls: a commit may fold as many
	// buckets as it applied deltas (foldDue).
	deltas int
	// persist is what MetaEntries wrote, for Publish to record in the
	// state once the commit is durable (nil: MetaEntries was not called).
	persist *persistPlan
}

// sequential remembers where the last delta of a batch landed. A commit
// applies its deltas in (table, vnode, pk) order, so the next one lands in
// the same bucket or a few after it.
type sequential struct {
	vnode vkey
	// bucket is the index of the bucket of the last delta in vnode, -1 if
	// none.
	bucket int
}

type vkey struct {
	table uint32
	vnode uint16
}

// Begin starts a batch on the current snapshot.
func (s *State) Begin() *Batch {
	return &Batch{
		s:       s,
		next:    s.cur.cloneTables(),
		tables:  map[uint32]*liveTable{},
		vnodes:  map[vkey]*liveVnode{},
		seq:     sequential{bucket: -1},
		appends: map[vkey]*appendRun{},
	}
}

func (b *Batch) table(id uint32) (*liveTable, error) {
	if t, ok := b.tables[id]; ok {
		return t, nil
	}
	old, ok := b.next.tables[id]
	if !ok {
		return nil, errors.Newf("lsmstats/stats: live delta for unknown table %d", id)
	}
	t := &liveTable{vnodes: slices.Clone(old.vnodes), total: old.total, estimates: old.estimates, budget: old.budget, coarsened: old.coarsened}
	b.tables[id] = t
	b.next.tables[id] = t
	return t, nil
}

func (b *Batch) vnode(table uint32, vnode uint16) (*liveVnode, error) {
	k := vkey{table, vnode}
	if b.lastVnode != nil && b.lastKey == k {
		return b.lastVnode, nil
	}
	if v, ok := b.vnodes[k]; ok {
		b.lastKey, b.lastVnode = k, v
		return v, nil
	}
	old, err := b.published(table, vnode)
	if err != nil {
		return nil, err
	}
	t, _ := b.table(table) // cannot fail: published found the table
	v := &liveVnode{
		buckets: slices.Clone(old.buckets), keys: old.keys, total: old.total,
		minPK: old.minPK, maxPK: old.maxPK, minKey: old.minKey, maxKey: old.maxKey,
		minLive: old.minLive, maxLive: old.maxLive,
		shortBounds: old.shortBounds, shortHints: old.shortHints, base: old.base,
		shared: len(old.buckets), sharedWith: old,
	}
	t.vnodes[vnode] = v
	b.vnodes[k] = v
	b.lastKey, b.lastVnode = k, v
	return v, nil
}

// published returns a vnode as the batch found it (the current
// snapshot's, for a vnode the batch has not copied), copying nothing: not
// the vnode, nor its table.
func (b *Batch) published(table uint32, vnode uint16) (*liveVnode, error) {
	t, ok := b.next.tables[table]
	if !ok {
		return nil, errors.Newf("lsmstats/stats: live delta for unknown table %d", table)
	}
	if int(vnode) >= len(t.vnodes) {
		return nil, errors.Newf("lsmstats/stats: live delta for vnode %d of table %d with %d vnodes", vnode, table, len(t.vnodes))
	}
	return t.vnode(vnode), nil
}

// MarkEstimates flags a table's counts as possibly containing estimates.
func (b *Batch) MarkEstimates(table uint32) error {
	t, err := b.table(table)
	if err != nil {
		return err
	}
	t.estimates = true
	return nil
}

// Delta is the change one version of a pk makes to the live
// statistics of its vnode: Counts are the rows (+1 inserts, -1 deletes,
// 0 rewrites) and bytes it adds.
type Delta struct {
	Table uint32
	Vnode uint16
	PK    []byte
	Counts
	// Live reports whether the pk's row is live once the batch is applied
	// (the same for every version of a pk in the batch). It keeps the
	// anchors' flags (lowerLive, minLive, maxLive) exact and moves minPK
	// and maxPK out to new rows.
	Live bool
}

// Apply adds a delta. Deltas are fastest in (table, vnode, pk) order but
// any order is correct.
func (b *Batch) Apply(d Delta) error {
	b.deltas++
	k := vkey{d.Table, d.Vnode}
	pkKey := key8(d.PK)
	if d.Counts == (Counts{}) && (b.lastVnode == nil || b.lastKey != k) {
		// A rewrite of a row in its size, in a vnode the batch has not
		// copied, usually changes nothing: then the vnode is not copied,
		// and the commit neither logs nor publishes it (a backfill's
		// state rows, updates that keep a row's size).
		if _, copied := b.vnodes[k]; !copied {
			v, err := b.published(d.Table, d.Vnode)
			if err != nil {
				return err
			}
			if v.unchangedBy(d, pkKey) {
				return nil
			}
		}
	}
	v, err := b.vnode(d.Table, d.Vnode)
	if err != nil {
		return err
	}
	r := b.run(k)
	if b.defers(r, v, d, pkKey) {
		b.applyDeferred(k, r, v, d)
		return nil
	}
	if r != nil && r.deferred {
		b.settle(r, v)
	}
	// An anchor moving out to this pk first carries the end buckets'
	// calibration into their new frames, where the pk then lands. Only a
	// calibrated bucket has one to carry (moveFrame), so the old frame is
	// worked out only for those: a vnode growing at its end moves its
	// largest pk with every row.
	was := v.anchors()
	if v.updateHints(d.PK, pkKey, d.Live) {
		end := len(v.buckets) - 1
		minMoved := !sameSlice(was.minPK, v.minPK) && v.buckets[0].calibrated
		maxMoved := !sameSlice(was.maxPK, v.maxPK) && v.buckets[end].calibrated
		if minMoved || maxMoved {
			now := v.anchors()
			v.setAnchors(was)
			var first, last frame
			if minMoved {
				first = v.frame(0)
			}
			if maxMoved {
				last = v.frame(end)
			}
			v.setAnchors(now)
			if minMoved {
				v.moveFrame(0, first)
			}
			if maxMoved {
				v.moveFrame(end, last)
			}
		}
	}
	i := b.seq.find(k, v, d.PK, pkKey)
	v.unshare(i)
	bk := &v.buckets[i]
	if i == len(v.buckets)-1 {
		b.trackAppend(k, r, bk, d, !sameSlice(was.maxPK, v.maxPK))
	}
	if bk.calibrated && d.Rows != 0 {
		switch u := v.fraction(i, d.PK, pkKey); {
		case d.Rows > 0:
			bk.insert(u)
		default:
			bk.remove(u)
		}
	}
	if i > 0 && v.keys[i] == pkKey && bk.lowerLive != d.Live && bytes.Equal(bk.lower(), d.PK) {
		bk.lowerLive = d.Live
	}
	b.count(d, v, bk)
	return nil
}

// count adds d's counts to its bucket bk, its vnode v and its table.
func (b *Batch) count(d Delta, v *liveVnode, bk *bucket) {
	bk.Counts = bk.Add(d.Counts)
	v.total = v.total.Add(d.Counts)
	t := b.tables[d.Table]
	t.total = t.total.Add(d.Counts)
}

// unchangedBy reports whether Apply would leave v as it is on a delta d of
// no rows and no bytes (pkKey: key8(d.PK)): the anchors stay, their flags
// too, and so does the lowerLive flag of the bucket d lands in. Its counts
// and calibration do not move (the calibration moves with rows only).
func (v *liveVnode) unchangedBy(d Delta, pkKey uint64) bool {
	if d.Counts != (Counts{}) || v.minPK == nil || v.maxPK == nil {
		return false
	}
	if c := compareAnchor(d.PK, pkKey, v.minPK, v.minKey); d.Live && c < 0 || c == 0 && v.minLive != d.Live {
		return false
	}
	if c := compareAnchor(d.PK, pkKey, v.maxPK, v.maxKey); d.Live && c > 0 || c == 0 && v.maxLive != d.Live {
		return false
	}
	i := v.find(d.PK)
	bk := &v.buckets[i]
	return i == 0 || v.keys[i] != pkKey || bk.lowerLive == d.Live || !bytes.Equal(bk.lower(), d.PK)
}

// find returns the bucket of vnode k (v) that holds pk: from the last
// delta's bucket on when pk is not below it, else by a search.
func (q *sequential) find(k vkey, v *liveVnode, pk []byte, pkKey uint64) int {
	i := q.bucket
	if k == q.vnode && i >= 0 && i < len(v.buckets) && !v.above(i, pk, pkKey) {
		for i+1 < len(v.buckets) && !v.above(i+1, pk, pkKey) {
			i++
		}
	} else {
		i = v.find(pk)
	}
	q.vnode, q.bucket = k, i
	return i
}

// sameSlice reports whether a and b are the same slice (not only equal).
func sameSlice(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// Publish makes the batch the current snapshot, once what MetaEntries
// returned is durable: the state records it as persisted.
func (b *Batch) Publish() {
	b.publish()
	b.s.persisted(b)
}

// publish seals the batch's vnodes, packed table by table in vnode order
// (see arena.go), and makes it the current snapshot.
func (b *Batch) publish() {
	b.settleAll()
	byTable := map[uint32][]placed{}
	for k, v := range b.vnodes {
		byTable[k.table] = append(byTable[k.table], placed{vn: k.vnode, v: v})
	}
	for id, ps := range byTable {
		publishTable(b.next.tables[id], b.s.cur.tables[id], ps)
	}
	for k := range b.vnodes {
		b.vnodes[k] = b.next.tables[k.table].vnodes[k.vnode] // the packed copy
	}
	b.lastVnode = nil
	b.next.at = time.Now()
	b.s.setCurrent(b.next)
}
