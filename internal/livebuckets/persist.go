package livebuckets

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
)

// What a commit writes of the live statistics: the delta log (log.go) for
// the vnodes that have rows, with their changes of bounds (splits, merges,
// rescans) and counts; the rows of the new vnodes (a fold); and, while the
// log outweighs a rewrite of the vnodes it changed, a fold of some of them,
// with deletes of the log rows no vnode needs any more.
//
// The state remembers, for each vnode the log changed since its rows were
// last written, those rows (its image: the buckets as persisted, which a
// fold compares the vnode with to write only the rows that changed) and
// the epoch of the oldest log row with its changes; the vnodes that
// rescans changed since the last commit with what they were at that
// commit (pending); and the epochs and bytes of the log rows persisted.
//
// A log row is needed as long as a vnode with an image has changes in it:
// rows older than the oldest since of the images are deleted. So the fold
// goes oldest first, and is spread over commits: a fold of every logged
// vnode at once rewrites every bucket row of the tables they are in, one
// commit's pause (a 1M-row backfill's MV of 256 vnodes: 53,770 entries,
// 1.7 MB, about 100 ms, while its other commits take 5 to 20 ms), and a
// job's ETA reads such a pause as a slower rate. A commit folds a
// sixteenth of the buckets, or twice as many as it applied deltas if more
// (foldDue): a load's commit of 20,000 rows still folds everything at
// once, since spreading a fold over commits that each change every vnode
// again only rewrites them again and keeps more log rows alive until the
// memtable's flush writes them (BenchmarkScale, 1M rows, vnode order: the
// statistics' share of the bytes flushed 2.98% all at once, 3.52% a
// sixteenth at a time whatever the commit, 2.98% with this rule). A round
// of folds, once begun, goes on until no log row from before it is left,
// as a fold of them all would have: stopping as soon as the log weighed
// less than the fold kept it near that weight rather than near half of it
// on average, and more of it flushed.

// rowBytesEstimate is about the bytes of a bucket row (key and value):
// commits fold once the log holds as many bytes as a fold of the vnodes it
// changed would write.
const rowBytesEstimate = 40

// foldSpread is how many commits the fold of the logged vnodes is spread
// over at most: each commit that folds takes the vnodes whose changes
// reach furthest back in the log, at least 1/foldSpread of the buckets
// with images, and the log rows they leave unneeded go with them.
const foldSpread = 16

// persistPlan is what a batch's MetaEntries wrote, for Publish to record.
type persistPlan struct {
	// folded are the vnodes whose rows the entries rewrote: their images
	// are the vnodes themselves from now on.
	folded []vkey
	// logged are the vnodes the log row changed that had no image, with
	// their rows as they were, which become their images, and those whose
	// image no log row held yet (nil): the log row holds their changes.
	logged map[vkey][]bucket
	// logEpoch and logBytes are the epoch and bytes of the log row the
	// entries wrote (logBytes 0: none).
	logEpoch uint64
	logBytes int
	// dropLogs is how many of the oldest log rows the entries deleted.
	dropLogs int
	// foldFrom is the State's foldFrom once the entries are persisted.
	foldFrom uint64
}

// MetaEntries returns the metadata entries that persist the batch, which
// commits epoch (for a recount: the committed epoch), sorted by key: the
// log row of epoch with what it changed in the vnodes that have rows (and
// what rescans changed since the last commit), and for a vnode without
// rows yet, its rows (a fold: the rows of its buckets that differ from
// what is persisted, deletes of the bounds that are gone, and its first
// row with epoch as its base epoch); while the log outweighs a fold of the
// vnodes it changed, a fold of those whose changes reach furthest back
// (foldDue) instead of their log sections, and deletes of the log rows no
// vnode needs any more; for a recount, a fold of every vnode it changed;
// and the estimates markers that changed. Publish records them as
// persisted.
func (b *Batch) MetaEntries(epoch uint64) []MetaEntry {
	b.settleAll()
	s := b.s
	plan := &persistPlan{logged: map[vkey][]bucket{}, logEpoch: epoch}
	for k := range s.pending {
		_, _ = b.vnode(k.table, k.vnode) // cannot fail: the vnode exists
	}
	var due map[vkey]bool
	// A round of folds starts when the log outweighs a rewrite of the
	// vnodes it changed, and goes on until no log row from before it is
	// left: the log then holds the rows of the round's commits alone, as a
	// fold of every vnode at once would have left it empty.
	folding := !b.foldAll && len(s.logs) > 0 && (s.foldFrom > 0 || s.logBytes >= s.imageBuckets*rowBytesEstimate)
	plan.foldFrom = s.foldFrom
	if folding && plan.foldFrom == 0 {
		plan.foldFrom = epoch
	}
	if folding {
		due = s.foldDue(b.deltas)
		for k := range due {
			_, _ = b.vnode(k.table, k.vnode)
		}
	}
	ks := make([]vkey, 0, len(b.vnodes))
	for k := range b.vnodes {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b vkey) int {
		return cmp.Or(cmp.Compare(a.table, b.table), cmp.Compare(a.vnode, b.vnode))
	})
	var out []MetaEntry
	var buf, log, section, scratch []byte
	for len(ks) > 0 {
		table := ks[0].table
		n := 1
		for n < len(ks) && ks[n].table == table {
			n++
		}
		section = section[:0]
		sections := 0
		for _, k := range ks[:n] {
			old, v := s.cur.table(k.table).vnode(k.vnode), b.vnodes[k]
			prev, pending := s.pending[k]
			if pending {
				old = prev // the log holds the vnode as of the last commit
			}
			if b.foldAll && !pending && !due[k] && sameVnode(old, v) {
				continue // a recount that changed nothing
			}
			// A vnode without rows yet (its first rows, in this commit) is
			// folded: a log row applies to rows that exist.
			stored := s.cur.table(k.table).vnodeOrNil(k.vnode) != nil
			if b.foldAll || due[k] || !stored {
				persisted := s.images[k].buckets
				if persisted == nil {
					persisted = old.buckets
				}
				v.base = epoch
				out, buf = appendFold(out, buf, k, persisted, v)
				plan.folded = append(plan.folded, k)
				continue
			}
			// v is a copy of the published vnode; one that rescans changed
			// since the last commit is logged from that commit's copy (old),
			// whose buckets v's are compared with.
			var changed bool
			if section, changed = appendLogVnode(section, &scratch, k.vnode, old, v, v.sharedBuckets(old)); changed {
				sections++
				if img, ok := s.images[k]; !ok {
					plan.logged[k] = old.buckets
				} else if img.since == unlogged {
					plan.logged[k] = nil
				}
			}
		}
		if sections > 0 {
			log = binary.BigEndian.AppendUint32(log, table)
			log = binary.AppendUvarint(log, uint64(sections))
			log = append(log, section...)
		}
		ks = ks[n:]
	}
	ids := make([]uint32, 0, len(b.tables))
	for id := range b.tables {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if was, now := s.cur.table(id), b.tables[id]; was == nil || was.estimates != now.estimates {
			e := MetaEntry{Key: estimatesKey(id), Delete: !now.estimates}
			if now.estimates {
				e.Value = []byte{1}
			}
			out = append(out, e)
		}
	}
	if folding || b.foldAll {
		// The log rows older than every vnode left with an image needs.
		// Only a fold of vnodes with images can make more of them go: a
		// commit that folds only new vnodes (which have none) leaves the
		// oldest row needed where it was, and skips this walk of the
		// images.
		keep := uint64(unlogged)
		folded := make(map[vkey]bool, len(plan.folded))
		for _, k := range plan.folded {
			folded[k] = true
		}
		for k, img := range s.images {
			if !folded[k] {
				keep = min(keep, img.since)
			}
		}
		for _, l := range s.logs {
			if l.epoch >= keep {
				break
			}
			out = append(out, MetaEntry{Key: logKey(l.epoch), Delete: true})
			plan.dropLogs++
		}
	}
	if left := s.logs[plan.dropLogs:]; len(left) == 0 || left[0].epoch >= plan.foldFrom {
		plan.foldFrom = 0 // the round is over (or none began)
	}
	if len(log) > 0 {
		e := MetaEntry{Key: logKey(epoch), Value: encodeLogValue(log)}
		plan.logBytes = len(e.Key) + len(e.Value)
		out = append(out, e)
	}
	b.persist = plan
	return out
}

// sameVnode reports whether v holds what old holds: bounds, anchors and
// buckets.
func sameVnode(old, v *liveVnode) bool {
	if !sameBounds(old, v, 0) || !bytes.Equal(old.minPK, v.minPK) || !bytes.Equal(old.maxPK, v.maxPK) ||
		old.minLive != v.minLive || old.maxLive != v.maxLive {
		return false
	}
	for i := range v.buckets {
		if o, b := &old.buckets[i], &v.buckets[i]; o.Counts != b.Counts || o.sumPos != b.sumPos || o.flags() != b.flags() {
			return false
		}
	}
	return true
}

// sameBuckets returns how many of the first buckets of a and b are equal,
// bounds and all (the same slices: a batch's copy of a vnode shares them):
// for a vnode logged from another copy than the one the batch made it from
// (a rescan's), whose shared count says nothing about it.
func sameBuckets(a, b []bucket) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i].same(&b[i]) {
		i++
	}
	return i
}

// sameBounds reports whether v has the buckets of old, bound for bound;
// the first same of them are known to be old's.
func sameBounds(old, v *liveVnode, same int) bool {
	if len(old.buckets) != len(v.buckets) {
		return false
	}
	for i := max(same, 1); i < len(v.buckets); i++ {
		if !sameSlice(old.buckets[i].lower(), v.buckets[i].lower()) {
			return false
		}
	}
	return true
}

// appendFold appends to out the entries that bring the rows of vnode k,
// persisted as the buckets persisted hold, to v: its first row, the rows
// of the other buckets that differ from their persisted ones, and deletes
// of the persisted bounds v no longer has, in key order (the bounds'
// order). Keys and values are appended to buf.
func appendFold(out []MetaEntry, buf []byte, k vkey, persisted []bucket, v *liveVnode) ([]MetaEntry, []byte) {
	row := func(i int) {
		r := v.rowOf(k.table, k.vnode, i)
		n := len(buf)
		buf = r.appendKey(buf)
		key := buf[n:len(buf):len(buf)]
		n = len(buf)
		buf = r.appendValue(buf)
		out = append(out, MetaEntry{Key: key, Value: buf[n:len(buf):len(buf)]})
	}
	row(0)
	i, j := 1, 1
	for i < len(persisted) || j < len(v.buckets) {
		c := 1
		switch {
		case i == len(persisted):
			c = 1
		case j == len(v.buckets):
			c = -1
		default:
			c = bytes.Compare(persisted[i].lower(), v.buckets[j].lower())
		}
		switch {
		case c < 0:
			n := len(buf)
			buf = appendBucketKey(buf, k.table, k.vnode, persisted[i].lower(), false)
			out = append(out, MetaEntry{Key: buf[n:len(buf):len(buf)], Delete: true})
			i++
		case c > 0:
			row(j)
			j++
		default:
			if p, b := &persisted[i], &v.buckets[j]; p.Counts != b.Counts || p.sumPos != b.sumPos || p.flags() != b.flags() {
				row(j)
			}
			i, j = i+1, j+1
		}
	}
	return out, buf
}

// persisted records what the batch's MetaEntries wrote, once durable.
func (s *State) persisted(b *Batch) {
	p := b.persist
	if p == nil {
		return
	}
	for _, k := range p.folded {
		s.dropImage(k)
	}
	// MetaEntries took every pending vnode into the batch, and commits
	// and rescans do not interleave (the store holds commits off while it
	// rescans).
	clear(s.pending)
	for k, bs := range p.logged {
		if img, ok := s.images[k]; !ok {
			s.setImage(k, bs, p.logEpoch)
		} else if img.since == unlogged {
			s.images[k] = image{img.buckets, p.logEpoch}
		}
	}
	for _, l := range s.logs[:p.dropLogs] {
		s.logBytes -= l.bytes
	}
	s.logs = s.logs[p.dropLogs:]
	s.foldFrom = p.foldFrom
	if p.logBytes > 0 {
		s.logs = append(s.logs, logRow{p.logEpoch, p.logBytes})
		s.logBytes += p.logBytes
	}
}

// foldDue returns the vnodes with images whose changes reach furthest back
// in the log (the oldest since first), with at least 1/foldSpread of the
// buckets of the vnodes with images between them, or twice as many buckets
// as the commit applied deltas if more: the vnodes a commit of that many
// deltas folds in a round of folds. A commit's fold then writes about as
// much as the commit itself, or a sixteenth of the whole fold.
func (s *State) foldDue(deltas int) map[vkey]bool {
	type logged struct {
		since   uint64
		k       vkey
		buckets int
	}
	ls := make([]logged, 0, len(s.images))
	all := 0
	for k, img := range s.images {
		n := len(s.cur.table(k.table).vnode(k.vnode).buckets)
		ls = append(ls, logged{img.since, k, n})
		all += n
	}
	slices.SortFunc(ls, func(a, b logged) int {
		return cmp.Or(cmp.Compare(a.since, b.since), cmp.Compare(a.k.table, b.k.table), cmp.Compare(a.k.vnode, b.k.vnode))
	})
	quota := max((all+foldSpread-1)/foldSpread, 2*deltas, 1)
	due := map[vkey]bool{}
	for n := 0; len(ls) > 0 && n < quota; ls = ls[1:] {
		due[ls[0].k] = true
		n += ls[0].buckets
	}
	return due
}

// rescanned records the vnodes that a rescan batch changed, which were
// old before it: the next commit persists their changes since the last
// commit.
func (s *State) rescanned(b *Batch, old map[vkey]*liveVnode) {
	for k := range b.vnodes {
		if _, ok := s.pending[k]; ok {
			continue
		}
		if _, ok := s.images[k]; !ok {
			s.setImage(k, old[k].buckets, unlogged)
		}
		s.pending[k] = old[k]
	}
}

func (s *State) setImage(k vkey, bs []bucket, since uint64) {
	s.dropImage(k)
	s.images[k] = image{bs, since}
	s.imageBuckets += len(bs)
}

func (s *State) dropImage(k vkey) {
	s.imageBuckets -= len(s.images[k].buckets)
	delete(s.images, k)
}

// Migrate returns the entries that rewrite the rows of the state as
// loaded from a store of an older format (SetFormat) in this package's
// layout, sorted by key: from format 1, every bucket row; from format 2,
// every log row, with a codec byte. With format_version in the same
// write, they make the store one of this package's format. Call it after
// FinishLoad.
func (s *State) Migrate() []MetaEntry {
	defer func() { s.format = 3 }()
	if s.format == 2 {
		out := make([]MetaEntry, 0, len(s.oldLogs))
		s.logs, s.logBytes = s.logs[:0], 0
		for _, l := range s.oldLogs {
			e := MetaEntry{Key: logKey(l.epoch), Value: encodeLogValue(l.layout)}
			s.logs = append(s.logs, logRow{l.epoch, len(e.Key) + len(e.Value)})
			s.logBytes += len(e.Key) + len(e.Value)
			out = append(out, e)
		}
		s.oldLogs = nil
		return out
	}
	ids := make([]uint32, 0, len(s.cur.tables))
	for id := range s.cur.tables {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var out []MetaEntry
	var buf []byte
	for _, id := range ids {
		for vn, v := range s.cur.tables[id].vnodes {
			if v == nil {
				continue
			}
			for i := range v.buckets {
				r := v.rowOf(id, uint16(vn), i)
				n := len(buf)
				buf = r.appendKey(buf)
				key := buf[n:len(buf):len(buf)]
				n = len(buf)
				buf = r.appendValue(buf)
				out = append(out, MetaEntry{Key: key, Value: buf[n:len(buf):len(buf)]})
			}
		}
	}
	return out
}

// RowCheck compares the live statistics' metadata rows with the snapshot
// they persist (Check). The zero value is not usable: see State.RowCheck.
type RowCheck struct {
	cur     *Snapshot
	pending map[vkey]*liveVnode
	format  uint64
}

// RowCheck captures what Check compares the rows with: the current
// snapshot, less the vnodes that rescans changed since the last commit
// (the next commit logs their changes). The caller must keep commits off
// from then until it has read the rows.
func (s *State) RowCheck() *RowCheck {
	return &RowCheck{cur: s.cur, pending: maps.Clone(s.pending), format: s.format}
}

// Check loads rows (the metadata rows of the spans of Spans, in key order:
// bucket rows, estimates markers and log rows) into a state of the
// snapshot's tables, as Open would, and compares what they hold with the
// snapshot vnode by vnode. It returns the rows that do not decode or
// apply (each error names its key, marked ErrCorruptLive) and the vnodes
// whose rows hold other buckets, counts, anchors or calibrations than
// the snapshot. Safe for concurrent use with the State.
func (c *RowCheck) Check(rows [][2][]byte) (corrupt []error, differ []string) {
	re := NewState()
	re.format = c.format
	ids := c.cur.Tables()
	for _, id := range ids {
		re.AddTable(id, len(c.cur.tables[id].vnodes))
	}
	for _, r := range rows {
		if err := re.Load(r[0], r[1]); err != nil {
			corrupt = append(corrupt, err)
		}
	}
	re.FinishLoad()
	for _, id := range ids {
		want, got := c.cur.tables[id], re.cur.tables[id]
		if want.estimates != got.estimates {
			differ = append(differ, fmt.Sprintf("table %d: the metadata rows say its counts may contain estimates: %t, the live statistics %t",
				id, got.estimates, want.estimates))
		}
		for vn := range want.vnodes {
			k := vkey{id, uint16(vn)}
			if _, ok := c.pending[k]; ok {
				continue
			}
			w, g := want.vnode(k.vnode), got.vnode(k.vnode)
			if !equalVnode(w, g) {
				differ = append(differ, fmt.Sprintf("table %d vnode %d: its metadata rows (bucket rows and log) hold %s, the live statistics %s",
					id, vn, describeVnode(g), describeVnode(w)))
			}
		}
	}
	return corrupt, differ
}

// equalVnode reports whether a and b hold the same bounds, anchors and
// buckets (counts, flags, calibrations).
func equalVnode(a, b *liveVnode) bool {
	if len(a.buckets) != len(b.buckets) || !bytes.Equal(a.minPK, b.minPK) || !bytes.Equal(a.maxPK, b.maxPK) ||
		a.minLive != b.minLive || a.maxLive != b.maxLive {
		return false
	}
	for i := range a.buckets {
		x, y := &a.buckets[i], &b.buckets[i]
		if x.Counts != y.Counts || x.sumPos != y.sumPos || x.flags() != y.flags() || !bytes.Equal(x.lower(), y.lower()) {
			return false
		}
	}
	return true
}

// describeVnode sums up a vnode for a difference: its rows, bytes and
// buckets.
func describeVnode(v *liveVnode) string {
	return fmt.Sprintf("%d rows / %d bytes in %d buckets", v.total.Rows, v.total.Bytes, len(v.buckets))
}
