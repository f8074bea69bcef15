package livebuckets

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats"
	"github.com/lsmstats/lsmstats/keys"
)

// The live statistics persist as metadata rows (under keys.MetaTable; the
// normative form is docs/format.md, "Live-statistics buckets"):
//
//	live/<table u32 BE><vnode u16 BE>\x00              first bucket of a vnode:
//	                                                     rows, bytes (zigzag varints),
//	                                                     min pk, max pk (uvarint length + bytes),
//	                                                     [flags u8, [calibration]]
//	live/<table u32 BE><vnode u16 BE>\x01<lower pk>   other buckets: rows, bytes,
//	                                                     [flags u8, [calibration]]
//	calibration: sum of residuals f64 BE, sum of positions f64 BE
//	live_est/<table u32 BE>                            present (value 1) while the
//	                                                     table's counts may contain estimates
//
// The flags (lower bound live, calibrated, min pk live, max pk live) and
// the calibration (see bucket), present when the calibrated flag is, were
// added after the first format: a value without them loads with every flag
// clear (the bounds then count no anchor row, the estimate uses the uniform
// model).
const (
	livePrefix      = keys.LivePrefix
	estimatesPrefix = keys.LiveEstimatesPrefix
)

// The flags byte of a bucket's value.
const (
	flagLowerLive  = 1 << 0
	flagCalibrated = 1 << 1
	flagMinLive    = 1 << 2
	flagMaxLive    = 1 << 3
	knownFlags     = flagLowerLive | flagCalibrated | flagMinLive | flagMaxLive
)

// bucketRow is one bucket as its metadata row holds it. Its encoder
// (key, value) and decoder (parseBucketRow) sit together, so that they
// change together.
type bucketRow struct {
	table uint32
	vnode uint16
	// first is the vnode's first bucket, whose lower bound is minus
	// infinity and whose row also holds the vnode's pk hints.
	first bool
	lower []byte
	Counts
	minPK, maxPK []byte // first bucket only
	flags        byte
	// sumResid and sumPos are the calibration, when flags has
	// flagCalibrated.
	sumResid, sumPos float64
}

// BucketKey returns the metadata key of a bucket.
func BucketKey(table uint32, vnode uint16, lower []byte, first bool) []byte {
	return appendBucketKey(nil, table, vnode, lower, first)
}

// appendBucketKey appends the metadata key of a bucket to dst: the
// metadata key (keys.AppendMetaKey) of livePrefix, the table, the vnode,
// then 0 for the first bucket or 1 and the lower bound.
func appendBucketKey(dst []byte, table uint32, vnode uint16, lower []byte, first bool) []byte {
	var name [len(livePrefix) + 7]byte
	copy(name[:], livePrefix)
	binary.BigEndian.PutUint32(name[len(livePrefix):], table)
	binary.BigEndian.PutUint16(name[len(livePrefix)+4:], vnode)
	if first {
		return keys.AppendMetaKey(dst, name[:])
	}
	name[len(name)-1] = 1
	return keys.AppendMetaKey(dst, name[:], lower)
}

func (r *bucketRow) key() []byte { return r.appendKey(nil) }

func (r *bucketRow) appendKey(dst []byte) []byte {
	return appendBucketKey(dst, r.table, r.vnode, r.lower, r.first)
}

func (r *bucketRow) value() []byte { return r.appendValue(nil) }

func (r *bucketRow) appendValue(val []byte) []byte {
	val = binary.AppendVarint(val, r.Rows)
	val = binary.AppendVarint(val, r.Bytes)
	if r.first {
		val = binary.AppendUvarint(val, uint64(len(r.minPK)))
		val = append(val, r.minPK...)
		val = binary.AppendUvarint(val, uint64(len(r.maxPK)))
		val = append(val, r.maxPK...)
	}
	val = append(val, r.flags)
	if r.flags&flagCalibrated != 0 {
		val = binary.BigEndian.AppendUint64(val, math.Float64bits(r.sumResid))
		val = binary.BigEndian.AppendUint64(val, math.Float64bits(r.sumPos))
	}
	return val
}

// parseBucketRow decodes the row of a bucket; name is its metadata name,
// which starts with livePrefix.
func parseBucketRow(name, value []byte) (bucketRow, error) {
	var r bucketRow
	rest := name[len(livePrefix):]
	if len(rest) < 7 || rest[6] > 1 {
		return r, errors.New("truncated")
	}
	r.table, r.vnode = binary.BigEndian.Uint32(rest), binary.BigEndian.Uint16(rest[4:])
	r.first = rest[6] == 0
	if r.first && len(rest) != 7 {
		return r, errors.New("first bucket with a lower bound")
	}
	if !r.first {
		r.lower = slices.Clone(rest[7:])
	}
	d := rowDecoder{b: value}
	r.Rows, r.Bytes = d.varint("rows"), d.varint("bytes")
	if r.first {
		r.minPK, r.maxPK = d.bytes("min pk hint"), d.bytes("max pk hint")
	}
	if d.err == nil && len(d.b) > 0 {
		r.flags = d.byte()
		switch {
		case r.flags&^knownFlags != 0, !r.first && r.flags&(flagMinLive|flagMaxLive) != 0, r.first && r.flags&flagLowerLive != 0:
			d.fail("flags")
		case r.flags&flagCalibrated != 0:
			r.sumResid, r.sumPos = d.float64("calibration"), d.float64("calibration")
		}
		if d.err == nil && len(d.b) != 0 {
			d.fail("trailing bytes")
		}
	}
	return r, d.err
}

// rowDecoder reads the fields of a metadata value; the first failure
// sticks and names the field.
type rowDecoder struct {
	b   []byte
	err error
}

func (d *rowDecoder) fail(what string) {
	if d.err == nil {
		d.err = errors.New(what)
	}
	d.b = nil
}

func (d *rowDecoder) varint(what string) int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *rowDecoder) bytes(what string) []byte {
	l, n := binary.Uvarint(d.b)
	if n <= 0 || uint64(len(d.b)-n) < l {
		d.fail(what)
		return nil
	}
	var out []byte
	if l > 0 {
		out = slices.Clone(d.b[n : n+int(l)])
	}
	d.b = d.b[n+int(l):]
	return out
}

func (d *rowDecoder) byte() byte {
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *rowDecoder) float64(what string) float64 {
	if len(d.b) < 8 {
		d.fail(what)
		return 0
	}
	v := math.Float64frombits(binary.BigEndian.Uint64(d.b))
	if math.IsNaN(v) || math.IsInf(v, 0) {
		d.fail(what)
		return 0
	}
	d.b = d.b[8:]
	return v
}

// rowOf returns the row of bucket i of a vnode.
func (v *liveVnode) rowOf(table uint32, vnode uint16, i int) bucketRow {
	b := &v.buckets[i]
	r := bucketRow{table: table, vnode: vnode, first: i == 0, lower: b.lower(), Counts: b.Counts}
	if r.first {
		r.minPK, r.maxPK = v.minPK, v.maxPK
		r.flags |= flagIf(v.minLive, flagMinLive) | flagIf(v.maxLive, flagMaxLive)
	}
	r.flags |= flagIf(b.lowerLive, flagLowerLive) | flagIf(b.calibrated, flagCalibrated)
	r.sumResid, r.sumPos = b.sumResid, b.sumPos
	return r
}

func flagIf(c bool, f byte) byte {
	if c {
		return f
	}
	return 0
}

func estimatesKey(table uint32) []byte {
	return keys.MetaKey(binary.BigEndian.AppendUint32([]byte(estimatesPrefix), table))
}

// appendMetaEntries appends to out the metadata rows to write for ids,
// sorted as compareBucketIDs sorts them: one table's estimates marker, or
// buckets of one vnode, each its row or a delete when the bucket no longer
// exists. Keys and values are appended to buf.
func (l *Snapshot) appendMetaEntries(out []MetaEntry, buf []byte, ids []bucketID) ([]MetaEntry, []byte) {
	t := l.table(ids[0].table)
	if ids[0].estimates() {
		e := MetaEntry{Key: estimatesKey(ids[0].table)}
		if t != nil && t.estimates {
			e.Value = []byte{1}
		} else {
			e.Delete = true
		}
		return append(out, e), buf
	}
	v := t.vnode(ids[0].vnode)
	j := 1 // the buckets before j are below every id left: a search of the rest
	for _, id := range ids {
		var e MetaEntry
		i := 0
		if !id.first {
			j += sort.Search(len(v.buckets)-j, func(k int) bool { return string(v.buckets[j+k].lower()) >= id.lower })
			if j == len(v.buckets) || string(v.buckets[j].lower()) != id.lower {
				n := len(buf)
				buf = appendBucketKey(buf, id.table, id.vnode, []byte(id.lower), false)
				out = append(out, MetaEntry{Key: buf[n:len(buf):len(buf)], Delete: true})
				continue
			}
			i = j
		}
		r := v.rowOf(id.table, id.vnode, i)
		n := len(buf)
		buf = r.appendKey(buf)
		e.Key = buf[n:len(buf):len(buf)]
		n = len(buf)
		buf = r.appendValue(buf)
		e.Value = buf[n:len(buf):len(buf)]
		out = append(out, e)
	}
	return out, buf
}

// Spans are the metadata spans holding live statistics, for loading.
func Spans() [][2][]byte {
	a, b := keys.MetaSpan(livePrefix)
	c, d := keys.MetaSpan(estimatesPrefix)
	return [][2][]byte{{a, b}, {c, d}}
}

// ErrCorruptLive marks undecodable live-statistics metadata. It is
// lsmstats.ErrCorruption, like every decoder's error: the store marked it
// so on its way out, and now it is so from where it is made.
var ErrCorruptLive = lsmstats.NewCorruptionSentinel("lsmstats/stats: corrupt live statistics metadata")

// Load adds one persisted metadata row (from the spans of Spans, in key
// order) to the state. Tables must have been added first.
func (s *State) Load(key, value []byte) error {
	bad := func(err error) error {
		return errors.Wrapf(ErrCorruptLive, "key %x: %v", key, err)
	}
	name, ok := keys.MetaName(key)
	switch {
	case !ok:
		return bad(errors.New("not a metadata key"))
	case bytes.HasPrefix(name, []byte(estimatesPrefix)):
		return s.loadEstimates(name[len(estimatesPrefix):], bad)
	case bytes.HasPrefix(name, []byte(livePrefix)):
		r, err := parseBucketRow(name, value)
		if err != nil {
			return bad(err)
		}
		if err := s.loadBucket(r); err != nil {
			return bad(err)
		}
		return nil
	default:
		return bad(errors.New("unknown name"))
	}
}

func (s *State) loadEstimates(rest []byte, bad func(error) error) error {
	if len(rest) != 4 {
		return bad(errors.New("bad length"))
	}
	t := s.cur.tables[binary.BigEndian.Uint32(rest)]
	if t == nil {
		return bad(errors.New("unknown table"))
	}
	t.estimates = true
	return nil
}

// loadBucket installs a bucket's row, which comes after the rows of the
// buckets before it.
func (s *State) loadBucket(r bucketRow) error {
	t := s.cur.tables[r.table]
	if t == nil || int(r.vnode) >= len(t.vnodes) {
		return errors.New("unknown table or vnode")
	}
	v := t.vnodes[r.vnode]
	if v == nil {
		v = newLiveVnode()
		t.vnodes[r.vnode] = v
	}
	v.cum = nil // until FinishLoad
	bk := bucket{Counts: r.Counts, lowerLive: r.flags&flagLowerLive != 0}
	if r.flags&flagCalibrated != 0 {
		bk.calibrated, bk.sumResid, bk.sumPos = true, r.sumResid, r.sumPos
	}
	if r.first {
		v.buckets[0] = bk
		v.setHints(r.minPK, r.maxPK)
		v.minLive = r.flags&flagMinLive != 0 && r.minPK != nil
		v.maxLive = r.flags&flagMaxLive != 0 && r.maxPK != nil
	} else {
		bk.setLower(r.lower)
		if len(v.buckets) > 1 && bytes.Compare(v.buckets[len(v.buckets)-1].lower(), bk.lower()) >= 0 {
			return errors.New("bucket out of order")
		}
		v.appendBucket(bk)
	}
	v.q = v.fullView() // queries sum its buckets until FinishLoad
	v.total = v.total.Add(r.Counts)
	t.total = t.total.Add(r.Counts)
	return nil
}

// FinishLoad ends loading: it trims each vnode's buckets to their number
// (Load appends them one by one, and the slack of the appends, up to as much
// again, would otherwise stay until a commit copies the vnode), and builds
// the vnodes' indexes, which copy the keys Load appended, packed in one
// arena per table (see arena.go). Until then queries of a loaded vnode sum
// its buckets.
func (s *State) FinishLoad() {
	for _, t := range s.cur.tables {
		var ps []placed
		for vn, v := range t.vnodes {
			if v != nil {
				v.buckets = slices.Clip(slices.Clone(v.buckets))
				ps = append(ps, placed{uint16(vn), v})
			}
		}
		pack(t, ps)
	}
}

// bucketID identifies a bucket (or, with lower == estimatesMarker, a
// table's estimates marker) whose metadata entry a batch must rewrite.
type bucketID struct {
	table uint32
	vnode uint16
	lower string // "" is the first bucket
	first bool
}

// MetaEntry is one metadata key to write (or delete) with a commit.
type MetaEntry struct {
	Key    []byte
	Value  []byte
	Delete bool
}

// MetaEntries returns the metadata keys that persist every bucket changed by
// this batch or since the last publish (splits, merges), sorted by key. After
// the merges of Normalize, buckets that no longer exist are deleted.
//
// A checkpoint of a load or a backfill touches most buckets of its tables
// (thousands per commit), so the entries are made in key order, not sorted
// after: the bucket ids sort by (table, vnode, first, lower), which is the
// order of their keys, and each vnode's ids are then found by one walk
// over its buckets. Keys and values share one buffer.
func (b *Batch) MetaEntries() []MetaEntry {
	ids := make([]bucketID, 0, len(b.touched)+len(b.s.dirty))
	for id := range b.s.dirty {
		ids = append(ids, id)
	}
	for id := range b.touched {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, compareBucketIDs)
	ids = slices.Compact(ids)
	out := make([]MetaEntry, 0, len(ids))
	buf := make([]byte, 0, 64*len(ids))
	for len(ids) > 0 {
		n := 1
		if !ids[0].estimates() {
			for n < len(ids) && !ids[n].estimates() && ids[n].table == ids[0].table && ids[n].vnode == ids[0].vnode {
				n++
			}
		}
		out, buf = b.next.appendMetaEntries(out, buf, ids[:n])
		ids = ids[n:]
	}
	return out
}

// estimates says that the id is a table's estimates marker, not a bucket.
func (id bucketID) estimates() bool { return id.first && id.lower == estimatesMarker }

// compareBucketIDs orders bucket ids as their metadata keys sort: the
// buckets by table, vnode, the first bucket, then lower bounds (keys end in
// a 0x00 byte, which keeps the bounds' order); the estimates markers, whose
// prefix sorts after the buckets', last, by table.
func compareBucketIDs(a, b bucketID) int {
	if ae, be := a.estimates(), b.estimates(); ae != be {
		if ae {
			return 1
		}
		return -1
	}
	if c := cmp.Compare(a.table, b.table); c != 0 {
		return c
	}
	if c := cmp.Compare(a.vnode, b.vnode); c != 0 {
		return c
	}
	if a.first != b.first {
		if a.first {
			return -1
		}
		return 1
	}
	return strings.Compare(a.lower, b.lower)
}
