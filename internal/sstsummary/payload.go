package sstsummary

// The per-SST payload: what the collector stores in a table's user property
// CollectorName and what the tracker reads back.
//
// # Stored form
//
//	shortID u8 | format u8 | crc32c u32 LE | body
//
// shortID is written by Pebble, not by us: the sstable writers pre-fill the
// buffer they hand to FinishTable with the collector's index
// (sstable/colblk_writer.go and rowblk_writer.go, "Place the shortID in the
// first byte"), and the byte stays in the stored user property. DecodeSummary
// skips it; Encode writes a zero in its place, so that
// DecodeSummary(s.Encode()) round-trips.
//
// format is formatS2 (body = an s2 block of the raw body, which starts with
// the raw length as a uvarint) or formatRaw (body = the raw body, used when
// compression does not pay: tiny bodies, or a ratio beyond what the decoder
// accepts). Any other value is an
// unknown version. The checksum (CRC-32C) covers everything after it.
//
// # Raw body (all integers uvarint)
//
//	metaKeys | foreign | nTables | table*
//	table:  tableGap | nVnodes | vnode*          (gap: id for the first, id-prev-1 after)
//	vnode:  vnodeGap | puts | deletes | prefixes | headPuts | keyBytes | pebbleTombstones
//	        | nSamples | sample* | lastPK        (lastPK only when nSamples > 0)
//	sample: shared | suffixLen | suffix          (pk: bytes shared with the previous pk)
//	        | dPuts | dDeletes | dHeadPuts | dPrefixes   (not for sample 0: all zero)
//	lastPK: shared | suffixLen | suffix          (relative to the first sample's pk)
//
// lastPK is relative to the first sample, not the last, so that a summary
// whose samples are packed (a collector's, or a decoded one) encodes it
// without decoding every sample first; it costs a few bytes per vnode.
// Counters in samples are deltas from the previous sample, so they stay one
// or two bytes each however large the SST; pks share their prefix with the
// previous one, which for fixed-width integer pks leaves two or three bytes.
//
// # Why s2
//
// The payload is encoded inside every flush and compaction, once per SST,
// on a cache that Pebble's own block building has just thrashed. In a CPU
// profile of flushes and compactions of 1M keys over 256 vnodes with the
// collector registered, zstd (SpeedFastest) encoding drew 120 of the
// collector's 340 ms, about 160 µs per SST, nearly all of it cache misses
// in its 256 KB hash table (SpeedDefault's tables are larger still); with
// s2.Encode (a 64 KB table) the compression drew no samples at all.
// Isolated, with warm tables (BenchmarkPayloadCodec), zstd stores 18-21%,
// 25-26% and 48-50% of the raw bodies of real collector output (7 to 29
// KB; 16 to 256 vnodes, 1 to 4 versions per pk) and s2 26%, 37% and 72%,
// while s2 encodes and decodes 3 to 6 times faster (820-920 MB/s); payloads
// stay 0.02 to 0.10% of their SST (BenchmarkCollector, with the sampling
// of b5fed13; 0.04 to 0.2% before), far below the 1% goal, and the
// encoding is paid on the write path of the whole LSM.
//
// # Decoding untrusted bytes
//
// The decoder never panics and never allocates more than a bounded multiple
// of its input: every count and length is checked against the bytes left,
// the raw length of an s2 body against maxRatio times the block size
// (before allocating), the samples of a vnode against
// maxPayloadVnodeSamples, the pk bytes it materialises against maxPKBytesRatio
// times the body; and the decoded values against the invariants the
// collector guarantees (sorted tables, vnodes and pks; cumulative counters
// that grow and stay below the vnode totals; no trailing bytes). Every
// failure is marked ErrCorruptPayload. Samples stay packed in the decoded
// body (VnodeSummary.Samples), which is what a Version keeps in memory.

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math"
	"math/bits"
	"slices"

	"github.com/cockroachdb/errors"
	"github.com/klauspost/compress/s2"
	"github.com/lsmstats/lsmstats"
	"github.com/lsmstats/lsmstats/internal/pkpos"
)

// ErrCorruptPayload marks every error about a payload that cannot be decoded:
// truncated, corrupt (checksum or structure), or of an unknown format. It is
// also lsmstats.ErrCorruption.
var ErrCorruptPayload = lsmstats.NewCorruptionSentinel("lsmstats/stats: corrupt payload")

const (
	// 0x01 was a zstd body before s2 replaced it (see Why s2); never
	// reuse it.
	formatRaw byte = 0x02
	formatS2  byte = 0x03

	// headerLen is format + checksum (after Pebble's shortID byte).
	headerLen = 1 + 4

	// minCompress is the raw body size below which compression is skipped:
	// an s2 block's header and literal tags cost a few bytes of their own.
	minCompress = 64

	// maxRatio bounds rawLen/len(block) for s2 bodies; the encoder falls
	// back to formatRaw when s2 does better than that, so the decoder can
	// refuse larger claims before allocating. minRawBound lets small frames
	// claim up to 64 KiB regardless.
	maxRatio    = 64
	minRawBound = 64 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Encode returns the summary in its stored form, with a zero placeholder for
// Pebble's shortID byte: DecodeSummary(s.Encode()) equals s.
func (s *FileSummary) Encode() []byte {
	return s.appendPayload([]byte{0}, nil)
}

// encodeBufs are appendPayload's scratch buffers, which a pooled collector
// keeps from one SST to the next.
type encodeBufs struct {
	raw, enc []byte
}

// appendPayload appends format | checksum | body (everything after the
// shortID) to dst, building the raw body and its s2 block in bufs (nil:
// fresh ones).
func (s *FileSummary) appendPayload(dst []byte, bufs *encodeBufs) []byte {
	if bufs == nil {
		bufs = &encodeBufs{}
	}
	raw := s.appendBody(bufs.raw[:0])
	bufs.raw = raw
	start := len(dst)
	dst = append(dst, formatRaw, 0, 0, 0, 0)
	if len(raw) >= minCompress {
		body := s2.Encode(bufs.enc[:cap(bufs.enc)], raw)
		bufs.enc = body
		if len(body) < len(raw) && uint64(len(raw)) <= rawBound(len(body)) {
			dst = append(dst, body...)
			dst[start] = formatS2
		} else {
			dst = append(dst, raw...)
		}
	} else {
		dst = append(dst, raw...)
	}
	binary.LittleEndian.PutUint32(dst[start+1:], crc32.Checksum(dst[start+headerLen:], castagnoli))
	return dst
}

func rawBound(frame int) uint64 {
	return max(uint64(frame)*maxRatio, minRawBound)
}

// appendBody appends the uncompressed body.
func (s *FileSummary) appendBody(b []byte) []byte {
	b = binary.AppendUvarint(b, s.MetaKeys)
	b = binary.AppendUvarint(b, s.Foreign)
	b = binary.AppendUvarint(b, uint64(len(s.Tables)))
	for i := range s.Tables {
		ts := &s.Tables[i]
		gap := uint64(ts.Table)
		if i > 0 {
			gap = uint64(ts.Table - s.Tables[i-1].Table - 1)
		}
		b = binary.AppendUvarint(b, gap)
		b = binary.AppendUvarint(b, uint64(len(ts.Vnodes)))
		for j := range ts.Vnodes {
			vs := &ts.Vnodes[j]
			gap := uint64(vs.Vnode)
			if j > 0 {
				gap = uint64(vs.Vnode - ts.Vnodes[j-1].Vnode - 1)
			}
			b = binary.AppendUvarint(b, gap)
			c := &vs.Counts
			for _, v := range [...]uint64{c.Puts, c.Deletes, c.Prefixes, c.HeadPuts, c.KeyBytes, c.PebbleTombstones} {
				b = binary.AppendUvarint(b, v)
			}
			b = binary.AppendUvarint(b, uint64(vs.samples.n))
			if vs.samples.n > 0 {
				b = append(b, vs.samples.data...)
				b = appendPK(b, vs.samples.firstPK(), vs.LastPK)
			}
		}
	}
	return b
}

func appendPK(b, prev, pk []byte) []byte {
	n := pkpos.SharedPrefix(prev, pk)
	b = binary.AppendUvarint(b, uint64(n))
	b = binary.AppendUvarint(b, uint64(len(pk)-n))
	return append(b, pk[n:]...)
}

// corruptf returns an error marked ErrCorruptPayload.
func corruptf(format string, args ...interface{}) error {
	return errors.Wrapf(ErrCorruptPayload, format, args...)
}

// DecodeSummary decodes a stored user property value (Pebble's shortID byte
// first, which is skipped). Every error is marked ErrCorruptPayload.
func DecodeSummary(prop []byte) (*FileSummary, error) {
	if len(prop) < 1+headerLen {
		return nil, corruptf("payload of %d bytes is shorter than its header", len(prop))
	}
	p := prop[1:]
	format := p[0]
	if format != formatS2 && format != formatRaw {
		return nil, corruptf("unknown payload format %#x", format)
	}
	rest := p[headerLen:]
	if got, want := crc32.Checksum(rest, castagnoli), binary.LittleEndian.Uint32(p[1:]); got != want {
		return nil, corruptf("checksum mismatch: computed %08x, stored %08x", got, want)
	}
	var raw []byte
	if format == formatS2 {
		rawLen, err := s2.DecodedLen(rest)
		if err != nil {
			return nil, errors.Mark(lsmstats.MarkCorruption(errors.Wrapf(err, "lsmstats/stats: corrupt payload: s2 header")), ErrCorruptPayload)
		}
		if uint64(rawLen) > rawBound(len(rest)) {
			return nil, corruptf("raw length %d is implausible for a %d-byte s2 block", rawLen, len(rest))
		}
		if raw, err = s2.Decode(make([]byte, rawLen), rest); err != nil {
			return nil, errors.Mark(lsmstats.MarkCorruption(errors.Wrapf(err, "lsmstats/stats: corrupt payload: s2")), ErrCorruptPayload)
		}
	} else {
		// The summary keeps slices of its body: never of the caller's bytes.
		raw = slices.Clone(rest)
	}
	return decodeBody(raw)
}

type bodyReader struct {
	b   []byte
	err error
	// arenaLeft bounds the pk bytes the decoder may still materialise: a pk
	// that shares a long prefix with the previous one costs a few input
	// bytes but a full copy.
	arenaLeft uint64
}

// maxPKBytesRatio bounds the pk bytes of a decoded summary by a multiple of
// its raw body (plus 1 MiB). Real payloads stay far below: a sample costs at
// least six body bytes and pks of a few dozen bytes are typical. A payload
// beyond the bound is refused (and its SST rebuilt from keys).
const maxPKBytesRatio = 256

func (r *bodyReader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = corruptf("truncated or overlong varint (%s)", what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a count of items that take at least minBytes each and bounds
// it by the bytes left.
func (r *bodyReader) count(what string, minBytes int) int {
	v := r.uvarint(what)
	if r.err == nil && v > uint64(len(r.b)/minBytes) {
		r.err = corruptf("%s %d exceeds what %d bytes can hold", what, v, len(r.b))
		return 0
	}
	return int(v)
}

// pk reads a pk relative to prev into arena and returns the new arena and pk.
func (r *bodyReader) pk(arena, prev []byte) ([]byte, []byte) {
	shared := r.uvarint("pk shared length")
	suffix := r.uvarint("pk suffix length")
	if r.err != nil {
		return arena, nil
	}
	if shared > uint64(len(prev)) || suffix > uint64(len(r.b)) {
		r.err = corruptf("pk lengths %d+%d out of range", shared, suffix)
		return arena, nil
	}
	if shared+suffix > r.arenaLeft {
		r.err = corruptf("pk bytes exceed %d times the body size", maxPKBytesRatio)
		return arena, nil
	}
	r.arenaLeft -= shared + suffix
	start := len(arena)
	arena = append(arena, prev[:shared]...)
	arena = append(arena, r.b[:suffix]...)
	r.b = r.b[suffix:]
	return arena, arena[start:len(arena):len(arena)]
}

// decodeBody decodes a payload's body (after its header and checksum): the
// file's metadata and foreign key counts, then each table, each with its
// vnodes, each with its counts, samples and last pk. Every count and id is
// checked as it is read (checkCounts, checkSample), and the whole must be
// used up.
func decodeBody(b []byte) (*FileSummary, error) {
	d := &bodyDecoder{
		r: bodyReader{b: b, arenaLeft: uint64(len(b))*maxPKBytesRatio + 1<<20},
		// Not nil: an empty LastPK is a pk, a nil one says no MVCC entries.
		arena: []byte{},
	}
	s := &FileSummary{
		MetaKeys: d.r.uvarint("meta keys"),
		Foreign:  d.r.uvarint("foreign keys"),
	}
	nTables := d.r.count("table count", 2)
	if d.r.err != nil {
		return nil, d.r.err
	}
	if err := d.addKeys(s.MetaKeys, s.Foreign); err != nil {
		return nil, err
	}
	if nTables > 0 {
		s.Tables = make([]TableSummary, nTables)
	}
	prev := int64(-1)
	for i := range s.Tables {
		if err := d.table(&s.Tables[i], prev); err != nil {
			return nil, err
		}
		prev = int64(s.Tables[i].Table)
	}
	if len(d.r.b) != 0 {
		return nil, corruptf("%d trailing bytes", len(d.r.b))
	}
	s.compact()
	return s, nil
}

// compact moves every vnode's packed samples and LastPK into one allocation
// of their exact size. Decoding leaves the samples as slices of the body
// and the LastPKs in an arena grown by appends; a Version holds its files'
// summaries for as long as the files live, and without this it would hold
// each body whole (its counters too) and the arena's slack beside it,
// about twice the bytes the summary uses.
func (s *FileSummary) compact() {
	n := 0
	for i := range s.Tables {
		for j := range s.Tables[i].Vnodes {
			vs := &s.Tables[i].Vnodes[j]
			n += len(vs.samples.data) + len(vs.LastPK)
		}
	}
	buf := make([]byte, 0, n)
	take := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		start := len(buf)
		buf = append(buf, b...)
		return buf[start:len(buf):len(buf)]
	}
	for i := range s.Tables {
		for j := range s.Tables[i].Vnodes {
			vs := &s.Tables[i].Vnodes[j]
			vs.samples.data = take(vs.samples.data)
			vs.LastPK = take(vs.LastPK)
		}
	}
}

// bodyDecoder holds what decoding a body carries from one vnode to the next.
type bodyDecoder struct {
	r bodyReader
	// arena holds every vnode's LastPK until compact moves them; r.arenaLeft
	// bounds its growth.
	arena []byte
	// first is the current vnode's first sample pk, which its LastPK is
	// encoded relative to.
	first []byte
	// keys counts the keys decoded so far, which must not overflow.
	keys uint64
}

// addKeys adds key counts to the body's total.
func (d *bodyDecoder) addKeys(counts ...uint64) error {
	for _, c := range counts {
		var ok bool
		if d.keys, ok = addOK(d.keys, c); !ok {
			return corruptf("key count overflows")
		}
	}
	return nil
}

// id reads an id stored as its gap from the previous one (prev, or -1 for
// the first, which is stored as itself) and checks it against limit.
func (d *bodyDecoder) id(gapName, idName string, prev int64, limit uint64) uint64 {
	next := d.r.uvarint(gapName)
	if prev >= 0 {
		var ok bool
		if next, ok = addOK(next, uint64(prev)+1); !ok {
			next = math.MaxUint64
		}
	}
	if d.r.err == nil && next > limit {
		d.r.err = corruptf("%s %d out of range", idName, next)
	}
	return next
}

// table decodes one table: its id, then its vnodes in increasing order.
func (d *bodyDecoder) table(ts *TableSummary, prev int64) error {
	ts.Table = uint32(d.id("table gap", "table id", prev, math.MaxUint32))
	n := d.r.count("vnode count", 8)
	if d.r.err == nil && n == 0 {
		d.r.err = corruptf("table %d has no vnodes", ts.Table)
	}
	if d.r.err != nil {
		return d.r.err
	}
	ts.Vnodes = make([]VnodeSummary, n)
	prevVnode := int64(-1)
	for j := range ts.Vnodes {
		if err := d.vnode(ts.Table, &ts.Vnodes[j], prevVnode); err != nil {
			return err
		}
		prevVnode = int64(ts.Vnodes[j].Vnode)
	}
	return nil
}

// vnode decodes one vnode: its id, its counts, its samples and its last pk.
func (d *bodyDecoder) vnode(table uint32, vs *VnodeSummary, prev int64) error {
	vs.Vnode = uint16(d.id("vnode gap", "vnode", prev, math.MaxUint16))
	c := &vs.Counts
	c.Puts = d.r.uvarint("puts")
	c.Deletes = d.r.uvarint("deletes")
	c.Prefixes = d.r.uvarint("prefixes")
	c.HeadPuts = d.r.uvarint("head puts")
	c.KeyBytes = d.r.uvarint("key bytes")
	c.PebbleTombstones = d.r.uvarint("pebble tombstones")
	if d.r.err != nil {
		return d.r.err
	}
	if err := checkCounts(table, vs.Vnode, c); err != nil {
		return err
	}
	if err := d.addKeys(c.Entries, c.PebbleTombstones); err != nil {
		return err
	}
	n := d.r.count("sample count", 2)
	if d.r.err != nil {
		return d.r.err
	}
	if (n == 0) != (c.Entries == 0) || uint64(n) > c.Prefixes || n > maxPayloadVnodeSamples {
		return corruptf("t%d/v%d: %d samples for %d prefixes", table, vs.Vnode, n, c.Prefixes)
	}
	if n == 0 {
		return nil
	}
	lastSample, err := d.samples(table, vs, n)
	if err != nil {
		return err
	}
	d.arena, vs.LastPK = d.r.pk(d.arena, d.first)
	if d.r.err != nil {
		return d.r.err
	}
	if bytes.Compare(vs.LastPK, lastSample) < 0 {
		return corruptf("t%d/v%d: last pk sorts before the last sample", table, vs.Vnode)
	}
	return nil
}

// samples validates a vnode's n samples and keeps their encoded bytes
// (vs.samples), and returns the last sample's pk. The pks are decoded into
// two alternating buffers, each sample against the one before; the first
// is kept in d.first.
func (d *bodyDecoder) samples(table uint32, vs *VnodeSummary, n int) ([]byte, error) {
	start := d.r.b
	var prev, sm Sample
	var bufs [2][]byte
	for k := range n {
		bufs[k&1], sm.PK = d.r.pk(bufs[k&1][:0], prev.PK)
		if k == 0 {
			d.first = append(d.first[:0], sm.PK...)
		} else {
			sm.Puts = prev.Puts + d.r.uvarint("sample puts")
			sm.Deletes = prev.Deletes + d.r.uvarint("sample deletes")
			sm.HeadPuts = prev.HeadPuts + d.r.uvarint("sample head puts")
			sm.Prefixes = prev.Prefixes + d.r.uvarint("sample prefixes")
		}
		if d.r.err != nil {
			return nil, d.r.err
		}
		if err := checkSample(table, vs.Vnode, k, &prev, &sm, &vs.Counts); err != nil {
			return nil, err
		}
		prev = sm
	}
	used := len(start) - len(d.r.b)
	vs.samples = packedSamples{n: n, data: start[:used:used]}
	return prev.PK, nil
}

func addOK(a, b uint64) (uint64, bool) {
	s, carry := bits.Add64(a, b, 0)
	return s, carry == 0
}

// checkCounts checks the invariants of a vnode's totals and sets Entries.
func checkCounts(table uint32, vnode uint16, c *Counts) error {
	e, ok := addOK(c.Puts, c.Deletes)
	switch {
	case !ok:
		return corruptf("t%d/v%d: entries overflow", table, vnode)
	case c.Prefixes > e || c.HeadPuts > c.Prefixes || c.HeadPuts > c.Puts:
		return corruptf("t%d/v%d: inconsistent counts %+v", table, vnode, *c)
	case (e == 0) != (c.Prefixes == 0):
		return corruptf("t%d/v%d: %d entries in %d prefixes", table, vnode, e, c.Prefixes)
	case e == 0 && c.PebbleTombstones == 0:
		return corruptf("t%d/v%d: empty vnode", table, vnode)
	}
	c.Entries = e
	return nil
}

// checkSample checks sample k against the previous one and the totals: pks
// strictly increase, the first sample is at zero, each later one is at least
// one prefix further, and every cumulative count stays below the total (the
// sample's own prefix has at least one entry).
func checkSample(table uint32, vnode uint16, k int, prev, sm *Sample, c *Counts) error {
	switch {
	case k > 0 && bytes.Compare(prev.PK, sm.PK) >= 0:
		return corruptf("t%d/v%d: sample %d pk does not increase", table, vnode, k)
	case k > 0 && (sm.Prefixes <= prev.Prefixes || sm.Puts < prev.Puts || sm.Deletes < prev.Deletes || sm.HeadPuts < prev.HeadPuts):
		return corruptf("t%d/v%d: sample %d counters do not increase", table, vnode, k)
	case sm.Prefixes >= c.Prefixes || sm.Puts > c.Puts || sm.Deletes > c.Deletes || sm.HeadPuts > c.HeadPuts:
		return corruptf("t%d/v%d: sample %d exceeds the vnode totals", table, vnode, k)
	case sm.Puts+sm.Deletes >= c.Entries || sm.HeadPuts > sm.Prefixes || sm.Prefixes > sm.Puts+sm.Deletes:
		return corruptf("t%d/v%d: sample %d counters inconsistent", table, vnode, k)
	}
	return nil
}
