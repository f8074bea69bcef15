package livebuckets

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"

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
//	                                                     flags u8, [position sum], base epoch
//	live/<table u32 BE><vnode u16 BE>\x01<lower pk>   other buckets: rows, bytes,
//	                                                     flags u8, [position sum]
//	live_est/<table u32 BE>                            present (value 1) while the
//	                                                     table's counts may contain estimates
//	live_log/<epoch u64 BE>                            the changes a commit made to
//	                                                     the counts of buckets it did not
//	                                                     rewrite (log.go)
//
// A vnode's bucket rows hold its statistics as of its base epoch, when they
// were last written (folded, persist.go); the log rows of later epochs hold
// what commits changed since. Format 1 had no log and no base epoch, and
// held the calibration as two float64 (readRowV1); format 2's log rows
// had no codec byte (log.go). Open rewrites such a store's rows in this
// layout (lsm, format_version 3).
const (
	livePrefix      = keys.LivePrefix
	estimatesPrefix = keys.LiveEstimatesPrefix
	logPrefix       = keys.LiveLogPrefix
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
	// infinity and whose row also holds the vnode's pk hints and base
	// epoch.
	first bool
	lower []byte
	Counts
	minPK, maxPK []byte // first bucket only
	flags        byte
	// sumPos is the calibration (bucket.sumPos) in units of 1/posUnit,
	// when flags has flagCalibrated.
	sumPos int64
	// base is the epoch of the vnode's rows (first bucket only): log rows
	// of this epoch and earlier are already in them.
	base uint64
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

func (r *bucketRow) appendKey(dst []byte) []byte {
	return appendBucketKey(dst, r.table, r.vnode, r.lower, r.first)
}

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
		val = binary.AppendVarint(val, r.sumPos)
	}
	if r.first {
		val = binary.AppendUvarint(val, r.base)
	}
	return val
}

// parseBucketName decodes the key of a bucket row; name is its metadata
// name, which starts with livePrefix.
func parseBucketName(name []byte) (bucketRow, error) {
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
	return r, nil
}

// parseBucketRow decodes the row of a bucket in the layout of format
// version 2 (appendValue); name is its metadata name.
func parseBucketRow(name, value []byte) (bucketRow, error) {
	r, err := parseBucketName(name)
	if err != nil {
		return r, err
	}
	d := rowDecoder{b: value}
	r.Rows, r.Bytes = d.varint("rows"), d.varint("bytes")
	if r.first {
		r.minPK, r.maxPK = d.bytes("min pk hint"), d.bytes("max pk hint")
	}
	r.flags = d.byte("flags")
	if d.err == nil && !r.validFlags() {
		d.fail("flags")
	}
	if r.flags&flagCalibrated != 0 {
		r.sumPos = d.varint("position sum")
	}
	if r.first {
		r.base = d.uvarint("base epoch")
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	return r, d.err
}

// validFlags reports whether the row's flags are known and fit its kind
// of bucket.
func (r *bucketRow) validFlags() bool {
	switch {
	case r.flags&^knownFlags != 0:
		return false
	case !r.first && r.flags&(flagMinLive|flagMaxLive) != 0:
		return false
	case r.first && r.flags&flagLowerLive != 0:
		return false
	}
	return true
}

// readRowV1 decodes the row of a bucket in the layout of format version
// 1: the flags byte optional (a value without it has every flag clear),
// the calibration two float64 BE (the sum of residuals, which the sum of
// positions implies, and the sum of positions, rounded here to the grid of
// positions), no base epoch.
func readRowV1(name, value []byte) (bucketRow, error) {
	r, err := parseBucketName(name)
	if err != nil {
		return r, err
	}
	d := rowDecoder{b: value}
	r.Rows, r.Bytes = d.varint("rows"), d.varint("bytes")
	if r.first {
		r.minPK, r.maxPK = d.bytes("min pk hint"), d.bytes("max pk hint")
	}
	if d.err == nil && len(d.b) > 0 {
		r.flags = d.byte("flags")
		switch {
		case !r.validFlags():
			d.fail("flags")
		case r.flags&flagCalibrated != 0:
			_ = d.float64("calibration")
			sumPos := d.float64("calibration")
			if d.err == nil && math.Abs(sumPos) > 1<<46 {
				d.fail("calibration")
			}
			r.sumPos = posUnits(sumPos)
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

func (d *rowDecoder) uvarint(what string) uint64 {
	v, n := binary.Uvarint(d.b)
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

func (d *rowDecoder) byte(what string) byte {
	if len(d.b) < 1 {
		d.fail(what)
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *rowDecoder) uint16(what string) uint16 {
	if len(d.b) < 2 {
		d.fail(what)
		return 0
	}
	v := binary.BigEndian.Uint16(d.b)
	d.b = d.b[2:]
	return v
}

func (d *rowDecoder) uint32(what string) uint32 {
	if len(d.b) < 4 {
		d.fail(what)
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
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
		r.minPK, r.maxPK, r.base = v.minPK, v.maxPK, v.base
		r.flags |= flagIf(v.minLive, flagMinLive) | flagIf(v.maxLive, flagMaxLive)
	}
	r.flags |= b.flags()
	r.sumPos = posUnits(b.sumPos)
	return r
}

// flags returns the bucket's flags as its row holds them (lower bound live,
// calibrated).
func (b *bucket) flags() byte {
	return flagIf(b.lowerLive, flagLowerLive) | flagIf(b.calibrated, flagCalibrated)
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

// Spans are the metadata spans holding live statistics, for loading, in
// key order.
func Spans() [][2][]byte {
	a, b := keys.MetaSpan(livePrefix)
	c, d := keys.MetaSpan(estimatesPrefix)
	e, f := keys.MetaSpan(logPrefix)
	return [][2][]byte{{a, b}, {c, d}, {e, f}}
}

// ErrCorruptLive marks undecodable live-statistics metadata. It is
// lsmstats.ErrCorruption, like every decoder's error: the store marked it
// so on its way out, and now it is so from where it is made.
var ErrCorruptLive = lsmstats.NewCorruptionSentinel("lsmstats/stats: corrupt live statistics metadata")

// SetFormat says which store format (lsm.FormatVersion) the rows that
// Load reads are in: 1 (readRowV1, no log), 2 (log rows without a codec
// byte) or 3, the default, the layout this package writes.
func (s *State) SetFormat(version uint64) { s.format = version }

// Load adds one persisted metadata row (from the spans of Spans, in key
// order: a table's bucket rows before the log rows) to the state. Tables
// must have been added first.
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
	case bytes.HasPrefix(name, []byte(logPrefix)):
		if s.format == 1 {
			return bad(errors.New("a log row in a store of format 1"))
		}
		if err := s.replayLog(name[len(logPrefix):], value); err != nil {
			return bad(err)
		}
		return nil
	case bytes.HasPrefix(name, []byte(livePrefix)):
		read := parseBucketRow
		if s.format == 1 {
			read = readRowV1
		}
		r, err := read(name, value)
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
		bk.calibrated, bk.sumPos = true, float64(r.sumPos)/posUnit
	}
	if r.first {
		v.buckets[0] = bk
		v.setHints(r.minPK, r.maxPK)
		v.minLive = r.flags&flagMinLive != 0 && r.minPK != nil
		v.maxLive = r.flags&flagMaxLive != 0 && r.maxPK != nil
		v.base = r.base
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
				ps = append(ps, placed{vn: uint16(vn), v: v})
			}
		}
		pack(t, ps)
	}
}

// MetaEntry is one metadata key to write (or delete) with a commit.
type MetaEntry struct {
	Key    []byte
	Value  []byte
	Delete bool
}
