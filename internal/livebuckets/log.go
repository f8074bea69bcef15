package livebuckets

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/klauspost/compress/zstd"
	"github.com/lsmstats/lsmstats/keys"
)

// The delta log.
//
// A commit changes the counts of many buckets and the bounds of few: an
// insert at a random pk changes one bucket, and a load of 20,000 rows a
// checkpoint into a table of 50,000 buckets changed about 16,000 of them
// a commit. Rewriting each changed bucket's row (a key of 30 to 40 bytes
// and a value of 10 to 30) wrote about 53 bytes of metadata per row loaded,
// and the rows, rewritten every commit, overlapped every flush. Instead, a
// commit writes one row, live_log/<epoch>, with what it changed in each
// vnode that has rows, against the vnode as the last commit left it: the
// bounds it removed and inserted (splits, merges, and the rescans since
// the last commit), then per changed bucket its index, the change of its
// rows, bytes and position sum (an integer: positions are quantized,
// bucket.sumPos), and its flags when they changed, 4 to 8 bytes; and the
// vnode's anchors when they moved (a row above its largest pk: an MV's
// every checkpoint). The changes are exact whatever made them (an anchor's
// move carries the end buckets' calibration into its new frame: the change
// of their sums says where it went; an inserted bucket starts from zero).
// A vnode without rows yet is folded instead: its rows are written, with
// the epoch in the first one (its base epoch). While the log rows hold as
// many bytes as a fold of every vnode they changed would write, commits fold
// those vnodes, the oldest changes first, and delete the log rows no vnode
// needs any more (persist.go).
// Loading replays each log row on the vnodes whose base epoch is older.
//
// The value of live_log/<epoch u64 BE>, table after table in increasing
// order:
//
//	table u32 BE | vnodes uvarint | vnodes, in increasing order, each:
//	  vnode u16 BE | anchor flags u8 (bit 0: min pk live, bit 1: max pk live,
//	  bit 2: min pk follows, bit 3: max pk follows, bit 4: layout follows) |
//	  [min pk: uvarint length, bytes] | [max pk: uvarint length, bytes] |
//	  [layout: removed uvarint | removed, each the gap uvarint to the last
//	   (the first: its index in the old buckets) | inserted uvarint |
//	   inserted, each the gap uvarint to the last (the first: its index in
//	   the new buckets), lower bound: uvarint length, bytes] |
//	  entries uvarint | entries, by increasing bucket index, each:
//	    (gap << 1 | flags follow) uvarint, gap the buckets skipped since the
//	    last entry (the first: its index) | rows varint | bytes varint |
//	    position sum varint (units of 1/posUnit) | [flags u8: bit 0 lower
//	    bound live, bit 1 calibrated]
//
// rows, bytes and the position sum are changes, added to the bucket's
// (an inserted bucket's start at zero); the flags, the anchor flags and
// the anchors are the new values.
//
// Since format 3 the row's value is a codec byte, then that layout as it
// is (logPlain) or compressed as one zstd frame (logZstd), whichever is
// shorter. Most of the layout is small varints of a few values (gaps of
// 0 to 3, rows changes of ±1, byte changes near a row's length) and pk
// bytes of a shared shape, which an entropy coder takes to about 58% of
// their bytes on a load or an interleaved backfill; the position sums'
// changes are noise and stay. A format 2 row is the layout alone.

// The codecs of a log row's value: its first byte (format 3).
const (
	logPlain = 0
	logZstd  = 1
)

// logMaxExpansion bounds a zstd body: its frame must say how many bytes it
// decodes to, at most logMaxExpansion times its own length (the writer
// keeps a value that would expand more plain), so that a corrupt row
// cannot make the reader allocate more than that.
const logMaxExpansion = 64

// logCodec holds the zstd encoder and decoder of the log rows, made once
// per process; both are safe for concurrent use.
var logCodec = sync.OnceValues(func() (*zstd.Encoder, *zstd.Decoder) {
	// Single-segment frames: their header always holds the content size.
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithSingleSegment(true),
		zstd.WithLowerEncoderMem(true), zstd.WithEncoderConcurrency(1))
	if err != nil {
		enc = nil // constant options: cannot fail; were it to, rows stay plain
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
	if err != nil {
		dec = nil // reported by decodeLogValue
	}
	return enc, dec
})

// encodeLogValue returns the value of a log row of the given layout: the
// codec byte, then the layout compressed when that is shorter.
func encodeLogValue(layout []byte) []byte {
	if enc, _ := logCodec(); enc != nil && len(layout) >= 32 {
		z := enc.EncodeAll(layout, append(make([]byte, 0, len(layout)/2+16), logZstd))
		if len(z) < len(layout)+1 && len(layout) <= logMaxExpansion*(len(z)-1) {
			return z
		}
	}
	return append(append(make([]byte, 0, len(layout)+1), logPlain), layout...)
}

// decodeLogValue returns the layout a log row's value holds in a store of
// the given format.
func decodeLogValue(value []byte, format uint64) ([]byte, error) {
	if format < 3 {
		return value, nil
	}
	if len(value) == 0 {
		return nil, errors.New("empty log value: no codec")
	}
	switch body := value[1:]; value[0] {
	case logPlain:
		return body, nil
	case logZstd:
		var h zstd.Header
		if err := h.Decode(body); err != nil {
			return nil, errors.Wrap(err, "zstd frame header")
		}
		if !h.HasFCS || h.FrameContentSize > uint64(logMaxExpansion*len(body)) {
			return nil, errors.Newf("zstd frame of %d bytes decoding to %d bytes (content size given: %t; at most %d)",
				len(body), h.FrameContentSize, h.HasFCS, logMaxExpansion*len(body))
		}
		_, dec := logCodec()
		if dec == nil {
			return nil, errors.New("no zstd decoder")
		}
		layout, err := dec.DecodeAll(body, make([]byte, 0, h.FrameContentSize))
		if err != nil {
			return nil, errors.Wrap(err, "zstd frame")
		}
		if uint64(len(layout)) != h.FrameContentSize {
			return nil, errors.Newf("zstd frame decoded to %d bytes, not the %d it says", len(layout), h.FrameContentSize)
		}
		return layout, nil
	default:
		return nil, errors.Newf("unknown log codec %d", value[0])
	}
}

// logFlags are the flags a log entry may carry.
const logFlags = flagLowerLive | flagCalibrated

// logKey returns the key of the log row of epoch.
func logKey(epoch uint64) []byte {
	return keys.MetaKey(binary.BigEndian.AppendUint64([]byte(logPrefix), epoch))
}

// The anchor flags of a log section.
const (
	logMinLive = 1 << 0
	logMaxLive = 1 << 1
	logMinPK   = 1 << 2
	logMaxPK   = 1 << 3
	logLayout  = 1 << 4
	logAnchors = logMinLive | logMaxLive | logMinPK | logMaxPK | logLayout
)

// appendLogVnode appends to dst the log section of vnode vn, as new
// changed it from old (the vnode as the last commit left it), and reports
// whether anything changed (else dst is returned as it was). The first
// same buckets of new are old's, bounds and all, and need no entry (a
// commit of the interleaved order changes a few buckets at the end of each
// vnode it touches: liveVnode.shared). scratch holds the entries while
// they are counted.
func appendLogVnode(dst []byte, scratch *[]byte, vn uint16, old, new *liveVnode, same int) ([]byte, bool) {
	entries := (*scratch)[:0]
	n, last := 0, -1
	var zero bucket
	entry := func(i int, o *bucket) {
		b := &new.buckets[i]
		if o.Counts == b.Counts && o.sumPos == b.sumPos && o.flags() == b.flags() {
			return
		}
		flags := o.flags() != b.flags()
		entries = binary.AppendUvarint(entries, uint64(i-last-1)<<1|uint64(b2i(flags)))
		entries = binary.AppendVarint(entries, b.Rows-o.Rows)
		entries = binary.AppendVarint(entries, b.Bytes-o.Bytes)
		entries = binary.AppendVarint(entries, posUnits(b.sumPos)-posUnits(o.sumPos))
		if flags {
			entries = append(entries, b.flags())
		}
		n, last = n+1, i
	}
	var removed, inserted []int
	if sameBounds(old, new, same) {
		for i := same; i < len(new.buckets); i++ {
			entry(i, &old.buckets[i])
		}
	} else {
		// The bounds changed: walk both in order. A bound of old that new
		// lacks is removed, a bound of new that old lacks is inserted (a
		// bucket of zero counts, no flags, until its entry), and the
		// buckets of the bounds both have change by entries.
		if same == 0 {
			entry(0, &old.buckets[0])
		}
		// The bounds before the first that changed are the same slices
		// (the batch's copy shares them): no bytes to compare there.
		i := max(same, 1)
		for i < len(old.buckets) && i < len(new.buckets) && sameSlice(old.buckets[i].lower(), new.buckets[i].lower()) {
			entry(i, &old.buckets[i])
			i++
		}
		for j := i; j < len(new.buckets); j++ {
			for i < len(old.buckets) && bytes.Compare(old.buckets[i].lower(), new.buckets[j].lower()) < 0 {
				removed = append(removed, i)
				i++
			}
			if i < len(old.buckets) && bytes.Equal(old.buckets[i].lower(), new.buckets[j].lower()) {
				entry(j, &old.buckets[i])
				i++
				continue
			}
			inserted = append(inserted, j)
			entry(j, &zero)
		}
		for ; i < len(old.buckets); i++ {
			removed = append(removed, i)
		}
	}
	*scratch = entries
	layout := len(removed) > 0 || len(inserted) > 0
	minMoved, maxMoved := !sameSlice(old.minPK, new.minPK), !sameSlice(old.maxPK, new.maxPK)
	if n == 0 && !layout && old.minLive == new.minLive && old.maxLive == new.maxLive && !minMoved && !maxMoved {
		return dst, false
	}
	dst = binary.BigEndian.AppendUint16(dst, vn)
	dst = append(dst, flagIf(new.minLive, logMinLive)|flagIf(new.maxLive, logMaxLive)|flagIf(minMoved, logMinPK)|
		flagIf(maxMoved, logMaxPK)|flagIf(layout, logLayout))
	if minMoved {
		dst = binary.AppendUvarint(dst, uint64(len(new.minPK)))
		dst = append(dst, new.minPK...)
	}
	if maxMoved {
		dst = binary.AppendUvarint(dst, uint64(len(new.maxPK)))
		dst = append(dst, new.maxPK...)
	}
	if layout {
		dst = binary.AppendUvarint(dst, uint64(len(removed)))
		prev := -1
		for _, i := range removed {
			dst = binary.AppendUvarint(dst, uint64(i-prev-1))
			prev = i
		}
		dst = binary.AppendUvarint(dst, uint64(len(inserted)))
		prev = -1
		for _, j := range inserted {
			dst = binary.AppendUvarint(dst, uint64(j-prev-1))
			prev = j
			lower := new.buckets[j].lower()
			dst = binary.AppendUvarint(dst, uint64(len(lower)))
			dst = append(dst, lower...)
		}
	}
	dst = binary.AppendUvarint(dst, uint64(n))
	return append(dst, entries...), true
}

// relayout returns the buckets of bs with the buckets at the indices
// removed taken out, then buckets of the bounds inserted put in at their
// indices (zero counts, no flags), or an error when the indices or the
// bounds do not fit: an index out of range or not increasing, the first
// bucket removed or a bucket inserted before it, bounds out of order.
//
// It runs for every vnode whose layout a log row changes, at every Open, so
// it makes one slice, copies the kept buckets a run at a time, and compares
// only the bounds that came with their neighbours: the buckets kept are in
// order already (bucket rows load in key order, and every relayout before
// this one was checked).
func relayout(bs []bucket, removed []int, inserted []insertedBound) ([]bucket, error) {
	for r, i := range removed {
		if i <= 0 && r == 0 || r > 0 && i <= removed[r-1] || i >= len(bs) {
			return nil, errors.Newf("removed buckets %v of %d", removed, len(bs))
		}
	}
	total := len(bs) - len(removed) + len(inserted)
	out := make([]bucket, 0, total)
	i, r := 0, 0 // the next of bs and of removed
	// keep appends the next n buckets of bs that are not removed, a run
	// at a time; false: bs has fewer.
	keep := func(n int) bool {
		for n > 0 {
			for r < len(removed) && removed[r] == i {
				r, i = r+1, i+1
			}
			end := len(bs)
			if r < len(removed) {
				end = removed[r]
			}
			k := min(n, end-i)
			if k <= 0 {
				return false
			}
			out = append(out, bs[i:i+k]...)
			i, n = i+k, n-k
		}
		return true
	}
	for _, in := range inserted {
		if in.at == 0 {
			return nil, errors.New("a bucket inserted before the first")
		}
		if in.at < len(out) || !keep(in.at-len(out)) {
			return nil, errors.Newf("inserted buckets past the %d buckets", total)
		}
		var nb bucket
		nb.setLower(in.lower)
		out = append(out, nb)
	}
	if !keep(total - len(out)) {
		return nil, errors.Newf("inserted buckets past the %d buckets", total)
	}
	for _, in := range inserted {
		for _, j := range [2]int{in.at, in.at + 1} {
			if j >= 2 && j < len(out) && bytes.Compare(out[j-1].lower(), out[j].lower()) >= 0 {
				return nil, errors.Newf("bucket %d's bound %x not above bucket %d's %x", j, out[j].lower(), j-1, out[j-1].lower())
			}
		}
	}
	return out, nil
}

// insertedBound is a bucket a log section inserts: its index in the new
// buckets and its lower bound.
type insertedBound struct {
	at    int
	lower []byte
}

// replayLog applies the log row of an epoch (rest: the name past the
// prefix) to the vnodes it names whose base epoch is older, while the
// state loads: their loaded rows become their images, what is persisted
// in rows (persist.go).
func (s *State) replayLog(rest, value []byte) error {
	if len(rest) != 8 {
		return errors.New("log key of a bad length")
	}
	epoch := binary.BigEndian.Uint64(rest)
	if n := len(s.logs); n > 0 && s.logs[n-1].epoch >= epoch {
		return errors.Newf("log of epoch %d after epoch %d", epoch, s.logs[n-1].epoch)
	}
	layout, err := decodeLogValue(value, s.format)
	if err != nil {
		return err
	}
	// The row is checked whole before any of it applies: a corrupt row
	// (left out by a read-only open) changes nothing.
	if err := s.walkLog(epoch, layout, false); err != nil {
		return err
	}
	if err := s.walkLog(epoch, layout, true); err != nil {
		return err
	}
	s.logs = append(s.logs, logRow{epoch, len(logKey(epoch)) + len(value)})
	s.logBytes += s.logs[len(s.logs)-1].bytes
	if s.format == 2 {
		// Migrate rewrites it with a codec byte.
		s.oldLogs = append(s.oldLogs, oldLog{epoch, slices.Clone(layout)})
	}
	return nil
}

// walkLog decodes the log row of epoch and checks it against the loaded
// state; with write, it applies the row to the vnodes whose base epoch is
// older.
func (s *State) walkLog(epoch uint64, value []byte, write bool) error {
	d := rowDecoder{b: value}
	lastTable := int64(-1)
	for len(d.b) > 0 && d.err == nil {
		table := d.uint32("table")
		vnodes := d.uvarint("vnodes")
		if d.err != nil {
			break
		}
		t := s.cur.tables[table]
		_, skip := s.leftOut[table]
		switch {
		case int64(table) <= lastTable:
			return errors.Newf("table %d out of order", table)
		case t == nil && !skip:
			return errors.Newf("unknown table %d", table)
		case t != nil && vnodes > uint64(len(t.vnodes)):
			return errors.Newf("%d vnodes of table %d, which has %d", vnodes, table, len(t.vnodes))
		}
		lastTable = int64(table)
		lastVnode := -1
		for range vnodes {
			vn := d.uint16("vnode")
			anchors := d.byte("anchor flags")
			var minPK, maxPK []byte
			if anchors&logMinPK != 0 {
				minPK = d.bytes("min pk")
			}
			if anchors&logMaxPK != 0 {
				maxPK = d.bytes("max pk")
			}
			var removed []int
			var inserted []insertedBound
			if anchors&logLayout != 0 {
				nr := d.uvarint("removed buckets")
				if d.err == nil && nr > uint64(len(d.b)) {
					return errors.Newf("%d removed buckets in %d bytes", nr, len(d.b))
				}
				at := -1
				for range nr {
					gap := d.uvarint("removed bucket")
					if d.err != nil || gap >= 1<<31 || at+1+int(gap) >= 1<<31 {
						d.fail("removed bucket")
						break
					}
					at += 1 + int(gap)
					removed = append(removed, at)
				}
				ni := d.uvarint("inserted buckets")
				if d.err == nil && ni > uint64(len(d.b)) {
					return errors.Newf("%d inserted buckets in %d bytes", ni, len(d.b))
				}
				at = -1
				for range ni {
					gap := d.uvarint("inserted bucket")
					lower := d.bytes("inserted bound")
					if d.err != nil || gap >= 1<<31 || at+1+int(gap) >= 1<<31 {
						d.fail("inserted bucket")
						break
					}
					at += 1 + int(gap)
					inserted = append(inserted, insertedBound{at, lower})
				}
			}
			entries := d.uvarint("entries")
			if d.err != nil {
				break
			}
			var v *liveVnode
			switch {
			case t == nil:
				v = &liveVnode{base: math.MaxUint64} // left out: read, not applied
			case int(vn) < len(t.vnodes):
				v = t.vnodes[vn]
			}
			switch {
			case int(vn) <= lastVnode:
				return errors.Newf("vnode %d of table %d out of order", vn, table)
			case v == nil:
				return errors.Newf("log of vnode %d of table %d, which has no bucket rows", vn, table)
			case anchors&^logAnchors != 0, anchors&logMinPK != 0 && minPK == nil, anchors&logMaxPK != 0 && maxPK == nil:
				return errors.Newf("anchor flags %#x of vnode %d of table %d", anchors, vn, table)
			case entries > uint64(len(d.b)):
				return errors.Newf("%d entries in %d bytes", entries, len(d.b))
			}
			lastVnode = int(vn)
			// A vnode folded since (at a later base epoch) had other
			// buckets when the log was written: its entries are read, not
			// checked against the buckets it has now.
			live := epoch > v.base
			apply := write && live
			k := vkey{table, vn}
			if _, ok := s.images[k]; apply && !ok {
				s.setImage(k, slices.Clone(v.buckets), epoch)
			}
			// The buckets the entries index: v's, or those the section's
			// layout makes of them.
			nb := v.buckets
			if live && anchors&logLayout != 0 {
				var err error
				if nb, err = relayout(v.buckets, removed, inserted); err != nil {
					return errors.Wrapf(err, "vnode %d of table %d", vn, table)
				}
				if apply {
					// The counts of the removed buckets go with them (the
					// entries move them to where they went).
					for _, i := range removed {
						gone := Counts{-v.buckets[i].Rows, -v.buckets[i].Bytes}
						v.total, t.total = v.total.Add(gone), t.total.Add(gone)
					}
					v.setBuckets(nb)
				}
			}
			i := -1
			for range entries {
				key := d.uvarint("entry")
				rows, bytes, pos := d.varint("rows"), d.varint("bytes"), d.varint("position sum")
				var flags byte
				if key&1 != 0 {
					flags = d.byte("flags")
				}
				if d.err != nil {
					break
				}
				if gap := key >> 1; gap >= 1<<31 || i+1+int(gap) >= 1<<31 {
					return errors.Newf("bucket index past 2³¹ in vnode %d of table %d", vn, table)
				} else {
					i += 1 + int(gap)
				}
				if flags&^logFlags != 0 || i == 0 && flags&flagLowerLive != 0 {
					return errors.Newf("flags %#x of bucket %d of vnode %d of table %d", flags, i, vn, table)
				}
				if !live {
					continue
				}
				if i >= len(nb) {
					return errors.Newf("bucket %d past the %d buckets of vnode %d of table %d", i, len(nb), vn, table)
				}
				if !write {
					continue
				}
				bk := &v.buckets[i]
				dc := Counts{rows, bytes}
				bk.Counts = bk.Add(dc)
				bk.sumPos += float64(pos) / posUnit
				if key&1 != 0 {
					bk.lowerLive, bk.calibrated = flags&flagLowerLive != 0, flags&flagCalibrated != 0
				}
				v.total = v.total.Add(dc)
				t.total = t.total.Add(dc)
			}
			if apply && d.err == nil {
				if minPK == nil {
					minPK = v.minPK
				}
				if maxPK == nil {
					maxPK = v.maxPK
				}
				v.setHints(minPK, maxPK)
				v.minLive = anchors&logMinLive != 0 && v.minPK != nil
				v.maxLive = anchors&logMaxLive != 0 && v.maxPK != nil
				v.q = v.fullView() // queries sum its buckets until FinishLoad
			}
		}
	}
	return d.err
}
