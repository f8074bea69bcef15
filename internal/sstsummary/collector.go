package sstsummary

// The collector: one pass over the sorted point keys of an SST that counts
// them by (table, vnode) and samples pk positions, without ever reading a
// value.
//
// # Classification (one mechanism: the collector at write time, and the
// tracker's rebuild of a summary from an SST's keys, both call add)
//
//	versioned table key, Pebble SET/SETWITHDEL      -> MVCC entry of (table, vnode), kind from the key
//	versioned table key, Pebble DEL/SINGLEDEL/DELSIZED -> Pebble tombstone of (table, vnode) (MVCC GC)
//	metadata key (keys.MetaName: table keys.MetaTable, name, 0x00), any kind -> MetaKeys
//	anything else (no shape, in a table's range or the metadata range;
//	MERGE on a table key)                            -> Foreign
//
// Range deletions and range keys never reach AddPointKey. Pebble counts range
// deletions in NumEntries (and NumRangeDeletions), range keys in neither, so
// for every SST
//
//	Σ (Entries + PebbleTombstones) + MetaKeys + Foreign + NumRangeDeletions == NumEntries.
//
// # Sampling
//
// Per vnode the collector keeps an ordered list of samples, each at the head
// (first, newest entry) of an MVCC prefix, holding the vnode's cumulative
// puts, deletes, head puts and prefixes strictly before that prefix. The
// first prefix of a vnode is always sampled (all counters zero); after that a
// prefix head is sampled when at least stride MVCC entries of the vnode have
// passed since the last sample. The effective stride of a vnode is
// max(its own stride, the SST's global stride), both starting at 1 and only
// ever doubling:
//
//   - per vnode: when a vnode holds more than maxVnodeSamples samples, its
//     stride doubles and its samples are thinned (below) until it holds at
//     most maxVnodeSamples;
//   - per SST: when the samples beyond each vnode's first exceed
//     max(minSampleBudget, entries so far / entriesPerSample), the global
//     stride doubles and every vnode with a smaller stride is thinned to it,
//     until the budget holds again. Large SSTs thus end with about one
//     sample per entriesPerSample (128) entries, spread evenly over their
//     vnodes, and at most maxVnodeSamples (64) per vnode; small SSTs keep
//     a finer grid.
//
// Thinning to stride S walks a vnode's samples and keeps the first, then each
// sample at least S entries after the last kept one. (Dropping every other
// sample would halve the count too, but merged gaps would then grow with the
// number of doublings times the versions per prefix; re-selecting by
// distance keeps the bound below.) Thinning is amortised O(1) per sample:
// strides only double, and each pass touches each sample once.
//
// # Error bound
//
// Let S be a vnode's final effective stride in an SST and m the largest
// number of MVCC entries of one of its prefixes in that SST. A sample taken
// without thinning follows the previous one by at most S-1+m entries (the
// check happens at each prefix head); thinning to S keeps a sample at most S
// entries plus one old gap after the previous kept one. By induction every
// gap between consecutive samples, and between the last sample and the
// vnode's end, is below 2S + m entries.
//
// Any cumulative count at a pk x — of puts, deletes, head puts or prefixes
// with pk < x — is bracketed exactly by the two samples around x: at least
// the value at the sample at or below x, at most the value at the next
// sample (or the vnode's total after the last). So the recorded gap is the
// error bound of a single SST, and VnodeSummary.CountRange reports it as
// such (ssttracker.CountRange sums it over the live SSTs), with a linear
// interpolation of the pk bytes between the two samples as the estimate. LastPK is kept so that pks past the end of
// the vnode are exact too.
//
// # Cost
//
// The collector runs inside every flush and compaction, so its cost is paid
// by the whole LSM (acceptance: at most 2% of Pebble's CPU per key,
// BenchmarkCollectorOverhead). Per key, add reads the kind byte and compares
// the key's prefix with the last one; for the usual prefix of 8 to 16 bytes
// that is two 8-byte loads and compares, and a new prefix is two stores (see
// lastPrefix). Counters that follow from others (puts, head puts, the SST's
// entries) are derived once at the end instead of counted per key, MVCC
// deletes are counted without a branch, and whether a prefix head is sampled
// is one comparison with a precomputed threshold (nextSample). What is
// rarer — metadata, Pebble tombstones, a new vnode, a sample — is out of
// line. Collectors from NewCollector come from a pool and return to it in
// FinishTable with their vnode accumulators, sample slices, summary and
// encoding buffers and the last chunk of their pk arena, so a warm flush or
// compaction allocates per SST, not per key: the arena's other chunks and
// the payload Pebble copies. Samples are taken at doubling strides and
// thinned: a vnode takes up to maxVnodeSamples before its first thinning
// and about half that per doubling of its entries after, and an SST keeps
// at most max(minSampleBudget, entries/entriesPerSample) beyond each
// vnode's first.

import (
	"encoding/binary"
	"slices"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/lsmstats/lsmstats/keys"
)

// CollectorName is the name of the block property collector, and the name of
// the user property holding each SST's payload.
const CollectorName = "lsmstats.stats.v1"

const (
	// maxVnodeSamples bounds the samples per vnode and SST that the
	// collector keeps. Until 2026-12-03 it was 128, which payloads may
	// still hold: the decoder accepts up to maxPayloadVnodeSamples.
	maxVnodeSamples = 64
	// maxPayloadVnodeSamples is the most samples per vnode a payload may
	// hold: what any version of the collector wrote.
	maxPayloadVnodeSamples = 128
	// entriesPerSample is the target density of samples in large SSTs.
	// Every open SST's payload is held twice, by the tracker's Version
	// and by Pebble's reader of the SST (design.md, "What the statistics
	// hold in memory"). With 128 entries a sample and 64 samples a vnode
	// (32 and 128 before), BenchmarkScale's Version took 0.88, 1.51 and
	// 2.71 MB at 1M, 4M and 16M rows instead of 1.82, 2.71 and 4.62, and
	// Pebble's copy 0.32, 0.78 and 1.44 MB instead of 1.04, 1.66 and 2.83;
	// CountRange's bounds are wider by as much.
	entriesPerSample = 128
	// minSampleBudget is the number of samples (beyond each vnode's first)
	// every SST may hold regardless of its size.
	minSampleBudget = 64

	// vnodeHeaderLen is the length of table id | vnode.
	vnodeHeaderLen = 6
)

// NewCollector returns a Collector, for pebble.Options.BlockPropertyCollectors
// and sstable.WriterOptions.BlockPropertyCollectors. It comes from a pool,
// and FinishTable, which Pebble calls once when the SST is done, returns it
// there (Pebble calls only Name after that, which reads no field).
func NewCollector() pebble.BlockPropertyCollector {
	c := collectorPool.Get().(*Collector)
	c.pooled = true
	return c
}

var collectorPool = sync.Pool{New: func() any { return NewScanCollector() }}

// Collector is the Pebble block property collector of lsmstats: it writes
// each SST's FileSummary into the user property CollectorName. It returns
// empty data and index block properties (it filters nothing) and never reads
// a value. A Collector serves one SST and is not safe for concurrent use, as
// Pebble requires of collectors; after FinishTable it must not be used.
type Collector struct {
	// The fields add touches for every key come first.
	cur  *vnodeAcc // the vnode of the last table key, or nil
	last lastPrefix

	vnodes       []vnodeAcc // in key order; cur is the last
	doneEntries  uint64     // MVCC entries of the vnodes before cur
	interior     int        // samples beyond each vnode's first
	globalStride uint64

	metaKeys uint64
	foreign  uint64

	arena    []byte      // backing store of sample pks
	packed   []byte      // backing store of the summary's packed samples
	packEnds []int       // summarize's end offset of each vnode's samples in packed
	bufs     encodeBufs  // FinishTable's payload buffers
	sum      FileSummary // FinishTable's summary, reused
	pooled   bool        // FinishTable returns c to collectorPool
	err      error
}

var _ sstable.BlockPropertyCollector = (*Collector)(nil)

// vnodeAcc accumulates one (table, vnode) of the SST. Puts and head puts are
// derived at the end (entries - deletes, prefixes - headDeletes): deletes
// are counted without a branch, from the kind byte.
type vnodeAcc struct {
	entries     uint64
	deletes     uint64
	keyBytes    uint64
	prefixes    uint64
	headDeletes uint64
	// nextSample is the entry count from which the next prefix head is
	// sampled: lastSample + the effective stride (0: sample the first).
	nextSample uint64

	table      uint32
	vnode      uint16
	tombstones uint64 // Pebble tombstones
	samples    []Sample
	stride     uint64
	// lastSample is the number of entries before the last sample.
	lastSample uint64
	lastPK     []byte
}

// counts returns a's Counts.
func (a *vnodeAcc) counts() Counts {
	return Counts{
		Entries:          a.entries,
		Puts:             a.entries - a.deletes,
		Deletes:          a.deletes,
		Prefixes:         a.prefixes,
		HeadPuts:         a.prefixes - a.headDeletes,
		KeyBytes:         a.keyBytes,
		PebbleTombstones: a.tombstones,
	}
}

// lastPrefix is the prefix (table | vnode | pk | 0x00) of the last MVCC
// entry. Comparing each key's prefix with it, and copying it at each new
// prefix, are the collector's two per-key byte operations. For prefixes of
// 8 to 16 bytes (pks of 1 to 9 bytes: integers, with or without a null or
// type byte) add does both with two 8-byte loads and compares or stores of
// its own; up to 32 bytes, equalLong and setLong use four; longer ones and
// the empty pk fall back to bytes. The words
// are read at offsets 0, min(8, n-8), min(16, n-8) and n-8, which cover the
// n bytes, so equal lengths and equal words mean equal prefixes.
type lastPrefix struct {
	n     int // 0: none
	w     [4]uint64
	bytes []byte // the prefix, when n is outside [8, 32]
}

const (
	minWordPrefix = 8
	maxWordPrefix = 32
)

func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// short reports whether a prefix of length p is held in two words, which
// add then reads and compares or stores itself.
func short(p int) bool { return uint(p-minWordPrefix) <= 16-minWordPrefix }

// equalLong reports whether key[:p] is the last prefix, for !short(p).
func (l *lastPrefix) equalLong(key []byte, p int) bool {
	if l.n != p {
		return false
	}
	if p < minWordPrefix || p > maxWordPrefix {
		return string(key[:p]) == string(l.bytes)
	}
	return le64(key[p-8:]) == l.w[3] && le64(key) == l.w[0] &&
		le64(key[8:]) == l.w[1] && le64(key[min(16, p-8):]) == l.w[2]
}

// setLong makes key[:p] the last prefix, for !short(p).
func (l *lastPrefix) setLong(key []byte, p int) {
	l.n = p
	if p < minWordPrefix || p > maxWordPrefix {
		l.bytes = append(l.bytes[:0], key[:p]...)
		return
	}
	l.w = [4]uint64{le64(key), le64(key[8:]), le64(key[min(16, p-8):]), le64(key[p-8:])}
}

// appendTo appends the last prefix to dst.
func (l *lastPrefix) appendTo(dst []byte) []byte {
	p := l.n
	if p < minWordPrefix || p > maxWordPrefix {
		return append(dst, l.bytes...)
	}
	var b [maxWordPrefix]byte
	binary.LittleEndian.PutUint64(b[:], l.w[0])
	if p > 16 {
		binary.LittleEndian.PutUint64(b[8:], l.w[1])
		binary.LittleEndian.PutUint64(b[min(16, p-8):], l.w[2])
	}
	binary.LittleEndian.PutUint64(b[p-8:], l.w[3])
	return append(dst, b[:p]...)
}

// NewScanCollector returns a Collector of its own (not pooled) for keys fed
// one by one with Add: a batch's (BatchSummary) or an SST's whose summary
// is rebuilt from its keys (ssttracker).
func NewScanCollector() *Collector {
	return &Collector{globalStride: 1}
}

// Add classifies one point key, of a Pebble kind, as AddPointKey does.
// Keys must come in key order; Err reports the first that did not.
func (c *Collector) Add(userKey []byte, kind pebble.InternalKeyKind) { c.add(userKey, kind) }

// Err returns the collector's error, if a key could not be classified.
func (c *Collector) Err() error { return c.err }

// reset empties c for another SST, keeping its buffers.
func (c *Collector) reset() {
	// Drop what points into the arena (sample and last pks), so that a
	// pooled collector keeps no chunk of an earlier SST's arena alive.
	for i := range c.vnodes {
		a := &c.vnodes[i]
		clear(a.samples)
		*a = vnodeAcc{samples: a.samples[:0]}
	}
	for i := range c.sum.Tables {
		clear(c.sum.Tables[i].Vnodes)
	}
	*c = Collector{
		vnodes:       c.vnodes[:0],
		globalStride: 1,
		last:         lastPrefix{bytes: c.last.bytes[:0]},
		arena:        c.arena[:0],
		packed:       c.packed[:0],
		packEnds:     c.packEnds[:0],
		bufs:         c.bufs,
		sum:          FileSummary{Tables: c.sum.Tables[:0]},
	}
}

// Name implements sstable.BlockPropertyCollector. It must read no field of
// c: Pebble calls it after FinishTable, when c may be back in the pool and
// serving another SST.
func (c *Collector) Name() string { return CollectorName }

// AddPointKey implements sstable.BlockPropertyCollector. The value is never
// looked at (Pebble passes nil for SET keys).
func (c *Collector) AddPointKey(key sstable.InternalKey, _ []byte) error {
	c.add(key.UserKey, key.Kind())
	return c.err
}

// AddRangeKeys implements sstable.BlockPropertyCollector. Range keys are not
// table data and not in Pebble's NumEntries: they are ignored.
func (c *Collector) AddRangeKeys(sstable.Span) error { return nil }

// AddCollectedWithSuffixReplacement implements
// sstable.BlockPropertyCollector: unsupported, the kind lives in the suffix.
func (c *Collector) AddCollectedWithSuffixReplacement(_, _, _ []byte) error {
	return errors.Newf("lsmstats/stats: %s does not support suffix replacement", CollectorName)
}

// SupportsSuffixReplacement implements sstable.BlockPropertyCollector.
func (c *Collector) SupportsSuffixReplacement() bool { return false }

// FinishDataBlock implements sstable.BlockPropertyCollector: an empty
// property (Pebble omits it).
func (c *Collector) FinishDataBlock(buf []byte) ([]byte, error) { return buf, nil }

// AddPrevDataBlockToIndexBlock implements sstable.BlockPropertyCollector.
func (c *Collector) AddPrevDataBlockToIndexBlock() {}

// FinishIndexBlock implements sstable.BlockPropertyCollector: an empty
// property.
func (c *Collector) FinishIndexBlock(buf []byte) ([]byte, error) { return buf, nil }

// FinishTable implements sstable.BlockPropertyCollector: it appends the
// encoded FileSummary to buf, which Pebble pre-fills with the collector's
// shortID byte. A collector from NewCollector goes back to the pool.
func (c *Collector) FinishTable(buf []byte) ([]byte, error) {
	if c.err != nil {
		return nil, c.err
	}
	c.summarize(&c.sum, false)
	buf = c.sum.appendPayload(buf, &c.bufs)
	if c.pooled {
		c.reset()
		collectorPool.Put(c)
	}
	return buf, nil
}

// add classifies one point key. It is the collector's hot path: one call
// per key of every SST Pebble writes, kept small so that the common case —
// an MVCC entry of the current vnode — runs without calls or spills; the
// rest goes to addOther. The checks mirror keys.Decode
// (TestCollectorShapeChecks), the prefix is compared with the last one once,
// and the table, vnode, pk and kind are read in place.
func (c *Collector) add(uk []byte, kind pebble.InternalKeyKind) {
	p := keys.Split(uk)
	if p == len(uk) || p <= vnodeHeaderLen ||
		(kind != sstable.InternalKeyKindSet && kind != sstable.InternalKeyKindSetWithDelete) {
		c.addOther(uk, kind, p)
		return
	}
	// Split admits only keys.KindDelete (0) and keys.KindPut (1) as the
	// byte before the terminator (docs/format.md, "Key shapes"): del is 1 for an MVCC delete.
	del := uint64(uk[len(uk)-2] ^ keys.KindPut)
	a := c.cur
	l := &c.last
	var w0, w3 uint64
	var same bool
	if short(p) {
		// The last word first: neighbouring pks differ most at their end.
		w0, w3 = le64(uk), le64(uk[p-8:])
		same = l.n == p && w3 == l.w[3] && w0 == l.w[0]
	} else {
		same = l.equalLong(uk, p)
	}
	if !same {
		// The head of a new prefix. (A prefix of another vnode differs in
		// its header, and startVnode forgets the last prefix; the last
		// prefix decoded as a table key of c.cur.)
		table := binary.BigEndian.Uint32(uk) // p > vnodeHeaderLen
		vnode := binary.BigEndian.Uint16(uk[4:])
		if a == nil || a.table != table || a.vnode != vnode {
			if table == keys.MetaTable {
				c.addOther(uk, kind, p)
				return
			}
			if a = c.startVnode(table, vnode); a == nil {
				return
			}
		}
		if a.entries >= a.nextSample {
			c.sample(a, uk[vnodeHeaderLen:p-1])
		}
		a.prefixes++
		a.headDeletes += del
		if short(p) {
			l.n, l.w[0], l.w[3] = p, w0, w3
		} else {
			l.setLong(uk, p)
		}
	}
	a.entries++
	a.deletes += del
	a.keyBytes += uint64(len(uk))
}

// addOther classifies every key that is not an MVCC entry (a Pebble SET of
// a versioned table key): metadata keys, Pebble tombstones of table keys,
// and foreign keys.
func (c *Collector) addOther(uk []byte, kind pebble.InternalKeyKind, p int) {
	table, ok := keys.TableOf(uk)
	if ok && table == keys.MetaTable {
		// A key in the metadata range that is not a metadata key (no
		// 0x00 terminator, a version suffix) was not written by the store.
		if _, isMeta := keys.MetaName(uk); isMeta {
			c.metaKeys++
		} else {
			c.foreign++
		}
		return
	}
	if !ok || p == len(uk) || p <= vnodeHeaderLen {
		c.foreign++
		return
	}
	switch kind {
	case sstable.InternalKeyKindDelete, sstable.InternalKeyKindSingleDelete, sstable.InternalKeyKindDeleteSized:
	default:
		// MERGE and the rest: not written by the store.
		c.foreign++
		return
	}
	vnode := binary.BigEndian.Uint16(uk[4:])
	a := c.cur
	if a == nil || a.table != table || a.vnode != vnode {
		if a = c.startVnode(table, vnode); a == nil {
			return
		}
	}
	a.tombstones++
}

// startVnode finishes the current vnode and starts the next one. Keys arrive
// sorted, and a versioned key's prefix starts with table | vnode, so each
// vnode's keys are contiguous; anything else is a broken comparer.
func (c *Collector) startVnode(table uint32, vnode uint16) *vnodeAcc {
	if prev := c.cur; prev != nil {
		c.finishVnode()
		if table < prev.table || (table == prev.table && vnode <= prev.vnode) {
			c.err = errors.AssertionFailedf("lsmstats/stats: keys out of order: t%d/v%d after t%d/v%d",
				table, vnode, prev.table, prev.vnode)
			return nil
		}
	}
	n := len(c.vnodes)
	if n < cap(c.vnodes) {
		// A pooled collector's: keep its samples' buffer.
		c.vnodes = c.vnodes[:n+1]
	} else {
		c.vnodes = append(c.vnodes, vnodeAcc{})
	}
	a := &c.vnodes[n]
	a.table, a.vnode, a.stride = table, vnode, 1
	c.cur = a
	return a
}

// finishVnode records the current vnode's last pk.
func (c *Collector) finishVnode() {
	a := c.cur
	if a == nil {
		return
	}
	if c.last.n > 0 {
		var buf [maxWordPrefix]byte
		prefix := c.last.appendTo(buf[:0])
		a.lastPK = c.copyPK(prefix[vnodeHeaderLen : len(prefix)-1])
	}
	c.last.n = 0
	c.doneEntries += a.entries
}

// sample takes a sample at the head of a's prefix pk, before counting it,
// and then thins a, or every vnode, when they hold too many.
func (c *Collector) sample(a *vnodeAcc, pk []byte) {
	n := a.counts()
	a.samples = append(a.samples, Sample{PK: c.copyPK(pk), Puts: n.Puts, Deletes: n.Deletes, HeadPuts: n.HeadPuts, Prefixes: n.Prefixes})
	a.lastSample = a.entries
	if len(a.samples) > 1 {
		c.interior++
	}
	for len(a.samples) > maxVnodeSamples {
		c.thin(a, 2*max(a.stride, c.globalStride))
	}
	for c.interior > c.budget() {
		c.globalStride *= 2
		for i := range c.vnodes {
			if v := &c.vnodes[i]; v.stride < c.globalStride {
				c.thin(v, c.globalStride)
			}
		}
	}
	a.nextSample = a.lastSample + max(a.stride, c.globalStride)
}

// budget returns the number of interior samples the SST may hold now; it
// is called at samples only, so cur's entries are counted there.
func (c *Collector) budget() int {
	return int(max(minSampleBudget, (c.doneEntries+c.cur.entries)/entriesPerSample))
}

// thin sets a's stride and keeps its first sample and then each sample at
// least stride entries after the last kept one.
func (c *Collector) thin(a *vnodeAcc, stride uint64) {
	a.stride = stride
	s := a.samples
	if len(s) == 0 {
		return
	}
	n, last := 1, s[0].Entries()
	for i := 1; i < len(s); i++ {
		if e := s[i].Entries(); e-last >= stride {
			s[n] = s[i]
			n++
			last = e
		}
	}
	clear(s[n:])
	c.interior -= len(s) - n
	a.samples = s[:n]
	a.lastSample = last
}

// copyPK copies pk into the arena; chunks are never reallocated, so earlier
// pks stay valid.
func (c *Collector) copyPK(pk []byte) []byte {
	if c.arena == nil || cap(c.arena)-len(c.arena) < len(pk) { // never nil, even when empty
		c.arena = make([]byte, 0, max(4096, len(pk)))
	}
	start := len(c.arena)
	c.arena = append(c.arena, pk...)
	return c.arena[start:len(c.arena):len(c.arena)]
}

// Summary returns the summary of the keys added so far. It finishes the
// current vnode: call it once, after the last key.
func (c *Collector) Summary() *FileSummary {
	s := new(FileSummary)
	c.summarize(s, true)
	return s
}

// summarize writes the summary into s, reusing its slices. It packs every
// vnode's samples into c.packed, and then points each vnode at its part of
// the final buffer (a part taken while packing would keep alive the smaller
// buffer that a later append moved away from). With own, that buffer is a
// copy of its exact size: the summary outlives the collector (a rebuilt
// file's, in a Version).
func (c *Collector) summarize(s *FileSummary, own bool) {
	c.finishVnode()
	c.cur = nil
	c.packed = c.packed[:0]
	ends := c.packEnds[:0]
	for k := range c.vnodes {
		if a := &c.vnodes[k]; len(a.samples) > 0 {
			c.packed = packSamples(c.packed, a.samples).data
		}
		ends = append(ends, len(c.packed))
	}
	c.packEnds = ends
	packed := c.packed
	if own {
		packed = slices.Clone(packed)
	}
	s.MetaKeys, s.Foreign, s.Tables = c.metaKeys, c.foreign, s.Tables[:0]
	for i := 0; i < len(c.vnodes); {
		j := i
		for j < len(c.vnodes) && c.vnodes[j].table == c.vnodes[i].table {
			j++
		}
		if len(s.Tables) < cap(s.Tables) {
			s.Tables = s.Tables[:len(s.Tables)+1]
		} else {
			s.Tables = append(s.Tables, TableSummary{})
		}
		ts := &s.Tables[len(s.Tables)-1]
		ts.Table, ts.Vnodes = c.vnodes[i].table, slices.Grow(ts.Vnodes[:0], j-i)
		for k := i; k < j; k++ {
			a := &c.vnodes[k]
			var ps packedSamples
			if len(a.samples) > 0 {
				start := 0
				if k > 0 {
					start = ends[k-1]
				}
				ps = packedSamples{n: len(a.samples), data: packed[start:ends[k]:ends[k]]}
			}
			ts.Vnodes = append(ts.Vnodes, VnodeSummary{Vnode: a.vnode, Counts: a.counts(), LastPK: a.lastPK, samples: ps})
		}
		i = j
	}
}
