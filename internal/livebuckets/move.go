package livebuckets

import (
	"bytes"
	"slices"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/keys"
)

// Moving vnodes between stores (lsm's vnode moves): the source exports the
// live statistics of a run of a table's vnodes as their bucket rows
// (ExportVnodes), the destination replaces its own vnodes by them
// (Replace), and the source replaces its vnodes by empty ones (Replace
// with nil rows). Both replacements are folds: the batch's MetaEntries
// rewrite the vnodes' bucket rows whole, with the commit's epoch as their
// base epoch, so that no log row written before applies to them, and
// delete the rows of the bounds they no longer have. The buckets move as
// they are (bounds, counts, anchors, calibrations), so the destination's
// estimates are the source's; its own split limit then applies from the
// batch's Rescans on.

// VnodeRows are the live statistics of vnodes [Lo, Hi) of a table, as
// their bucket rows hold them (docs/format.md, "Live-statistics buckets"),
// with base epoch 0: what a vnode move carries from one store to another.
// Vnodes that never had a row have no rows. The zero value holds no vnode.
// Read-only once made; safe for concurrent use.
type VnodeRows struct {
	Table uint32
	// Lo and Hi bound the vnodes, [Lo, Hi).
	Lo, Hi int
	// Estimates says the table's counts in the source may contain
	// estimates (written by unchecked writers): the destination's table is
	// flagged too.
	Estimates bool
	// Rows are the bucket rows of the vnodes, in key order.
	Rows []MetaEntry
	// Counts are the vnodes' live rows and bytes, summed.
	Counts Counts
}

// ExportVnodes returns the live statistics of vnodes [lo, hi) of a table
// as their rows. The vnodes must exist.
func (l *Snapshot) ExportVnodes(table uint32, lo, hi int) (*VnodeRows, error) {
	t := l.table(table)
	if t == nil {
		return nil, errors.Newf("lsmstats/stats: live statistics of unknown table %d", table)
	}
	if lo < 0 || lo >= hi || hi > len(t.vnodes) {
		return nil, errors.Newf("lsmstats/stats: vnodes [%d, %d) of table %d with %d vnodes", lo, hi, table, len(t.vnodes))
	}
	out := &VnodeRows{Table: table, Lo: lo, Hi: hi, Estimates: t.estimates}
	var buf []byte
	for vn := lo; vn < hi; vn++ {
		v := t.vnodeOrNil(uint16(vn))
		if v == nil {
			continue
		}
		for i := range v.buckets {
			r := v.rowOf(table, uint16(vn), i)
			r.base = 0
			n := len(buf)
			buf = r.appendKey(buf)
			key := buf[n:len(buf):len(buf)]
			n = len(buf)
			buf = r.appendValue(buf)
			out.Rows = append(out.Rows, MetaEntry{Key: key, Value: buf[n:len(buf):len(buf)]})
		}
		out.Counts = out.Counts.Add(v.total)
	}
	return out, nil
}

// Check checks the rows as Replace does, for a table of vnodeCount
// vnodes: each a bucket row of a vnode in [Lo, Hi) of the table, in key
// order, decoding, adding up to Counts. Errors are marked ErrCorruptLive.
func (r *VnodeRows) Check(vnodeCount int) error {
	_, err := r.decode(vnodeCount)
	return err
}

// decode loads the rows into vnodes of a table of vnodeCount vnodes,
// checking that each row is a bucket row of a vnode in [Lo, Hi) of the
// table, that the rows are in key order and decode, and that they add up
// to Counts. Errors are marked ErrCorruptLive.
func (r *VnodeRows) decode(vnodeCount int) (*liveTable, error) {
	bad := func(format string, args ...any) error {
		return errors.Wrapf(ErrCorruptLive, "moved live statistics of vnodes [%d, %d) of table %d: "+format,
			append([]any{r.Lo, r.Hi, r.Table}, args...)...)
	}
	tmp := NewState()
	tmp.AddTable(r.Table, vnodeCount)
	first := map[uint16]bool{}
	for i, e := range r.Rows {
		if i > 0 && bytes.Compare(r.Rows[i-1].Key, e.Key) >= 0 {
			return nil, bad("row %x after %x", e.Key, r.Rows[i-1].Key)
		}
		name, ok := keys.MetaName(e.Key)
		if !ok || e.Delete || !bytes.HasPrefix(name, []byte(livePrefix)) {
			return nil, bad("%x is not a bucket row", e.Key)
		}
		br, err := parseBucketName(name)
		if err != nil {
			return nil, bad("%x is not a bucket row: %v", e.Key, err)
		}
		if br.table != r.Table || int(br.vnode) < r.Lo || int(br.vnode) >= r.Hi {
			return nil, bad("row %x is of table %d vnode %d", e.Key, br.table, br.vnode)
		}
		if !br.first && !first[br.vnode] {
			return nil, bad("vnode %d has no first bucket row", br.vnode)
		}
		first[br.vnode] = true
		if err := tmp.Load(e.Key, e.Value); err != nil {
			return nil, bad("%v", err)
		}
	}
	tmp.FinishLoad()
	t := tmp.cur.tables[r.Table]
	if t.total != r.Counts {
		return nil, bad("the rows hold %d rows / %d bytes, the export says %d / %d", t.total.Rows, t.total.Bytes, r.Counts.Rows, r.Counts.Bytes)
	}
	return t, nil
}

// Replace returns a batch that replaces the live statistics of vnodes
// [lo, hi) of a table by those of rows, or by empty vnodes when rows is
// nil: a vnode move's destination and source. Rows must be of the same
// table and vnodes. Its MetaEntries fold every vnode it changed (see the
// file comment); the caller normalizes it, persists its entries at the
// committed epoch with what the move writes, and publishes it, as a
// commit's batch.
func (s *State) Replace(table uint32, lo, hi int, rows *VnodeRows) (*Batch, error) {
	cur := s.cur.table(table)
	if cur == nil {
		return nil, errors.Newf("lsmstats/stats: live statistics of unknown table %d", table)
	}
	if lo < 0 || lo >= hi || hi > len(cur.vnodes) {
		return nil, errors.Newf("lsmstats/stats: vnodes [%d, %d) of table %d with %d vnodes", lo, hi, table, len(cur.vnodes))
	}
	var src *liveTable
	if rows != nil {
		if rows.Table != table || rows.Lo != lo || rows.Hi != hi {
			return nil, errors.Newf("lsmstats/stats: replacing vnodes [%d, %d) of table %d by the live statistics of vnodes [%d, %d) of table %d",
				lo, hi, table, rows.Lo, rows.Hi, rows.Table)
		}
		var err error
		if src, err = rows.decode(len(cur.vnodes)); err != nil {
			return nil, err
		}
	}
	b := s.Begin()
	t, err := b.table(table)
	if err != nil {
		return nil, err
	}
	for vn := lo; vn < hi; vn++ {
		var from *liveVnode
		if src != nil {
			from = src.vnodeOrNil(uint16(vn))
		}
		if from == nil && t.vnodeOrNil(uint16(vn)) == nil {
			continue // no rows here, none to come
		}
		v, err := b.vnode(table, uint16(vn))
		if err != nil {
			return nil, err
		}
		was := v.total
		if from == nil {
			from = newLiveVnode()
		}
		*v = liveVnode{
			buckets: slices.Clone(from.buckets), keys: from.keys, total: from.total,
			minPK: from.minPK, maxPK: from.maxPK, minKey: from.minKey, maxKey: from.maxKey,
			minLive: from.minLive, maxLive: from.maxLive,
			shortBounds: from.shortBounds, shortHints: from.shortHints,
		}
		t.total = t.total.Add(Counts{Rows: v.total.Rows - was.Rows, Bytes: v.total.Bytes - was.Bytes})
	}
	b.lastVnode = nil
	if rows != nil && rows.Estimates {
		t.estimates = true
	}
	b.foldAll = true
	return b, nil
}
