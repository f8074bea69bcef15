package stats

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
//     sample per entriesPerSample (32) entries, spread evenly over their
//     vnodes, and at most 128 per vnode; small SSTs keep a finer grid.
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
// error bound of a single SST, and Version.Range reports it as such (summed
// over the live SSTs), with a linear interpolation of the pk bytes between
// the two samples as the estimate. LastPK is kept so that pks past the end of
// the vnode are exact too.

import (
	"slices"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/lsmstats/lsmstats/keys"
)

// CollectorName is the name of the block property collector, and the name of
// the user property holding each SST's payload.
const CollectorName = "lsmstats.stats.v1"

const (
	// maxVnodeSamples bounds the samples per vnode and SST.
	maxVnodeSamples = 128
	// entriesPerSample is the target density of samples in large SSTs.
	entriesPerSample = 32
	// minSampleBudget is the number of samples (beyond each vnode's first)
	// every SST may hold regardless of its size.
	minSampleBudget = 64

	// vnodeHeaderLen is the length of table id | vnode.
	vnodeHeaderLen = 6
)

// NewCollector returns a new Collector, for pebble.Options.BlockPropertyCollectors
// and sstable.WriterOptions.BlockPropertyCollectors.
func NewCollector() pebble.BlockPropertyCollector {
	return newCollector()
}

// Collector is the Pebble block property collector of lsmstats: it writes
// each SST's FileSummary into the user property CollectorName. It returns
// empty data and index block properties (it filters nothing) and never reads
// a value. A Collector serves one SST and is not safe for concurrent use, as
// Pebble requires of collectors.
type Collector struct {
	metaKeys uint64
	foreign  uint64

	vnodes []*vnodeAcc // in key order
	cur    *vnodeAcc   // the vnode of the last table key, or nil

	// curPrefix is the prefix of cur's last MVCC entry (valid if havePrefix).
	curPrefix  []byte
	havePrefix bool

	entries      uint64 // MVCC entries so far, all vnodes
	interior     int    // samples beyond each vnode's first
	globalStride uint64

	arena   []byte // backing store of sample pks
	scratch []byte // pack's buffer
	err     error
}

var _ sstable.BlockPropertyCollector = (*Collector)(nil)

type vnodeAcc struct {
	table   uint32
	vnode   uint16
	counts  Counts
	samples []Sample
	stride  uint64
	// lastSample is the number of entries before the last sample.
	lastSample uint64
	lastPK     []byte
}

func newCollector() *Collector {
	return &Collector{globalStride: 1}
}

// Name implements sstable.BlockPropertyCollector.
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
// shortID byte.
func (c *Collector) FinishTable(buf []byte) ([]byte, error) {
	if c.err != nil {
		return nil, c.err
	}
	s := c.Summary()
	return s.appendPayload(buf), nil
}

// add classifies one point key. It is the collector's hot path: one call
// per key of every SST Pebble writes. The checks mirror keys.Decode (see
// decodeTableKey), the prefix is compared with the current one once, and
// the table, vnode, pk and kind are read in place.
func (c *Collector) add(uk []byte, kind pebble.InternalKeyKind) {
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
	p := keys.Split(uk)
	if !ok || p == len(uk) || p <= vnodeHeaderLen {
		c.foreign++
		return
	}
	prefix := uk[:p]
	// The byte before the prefix's 0x00 (the pk's last) differs between
	// most neighbouring prefixes: check it before comparing whole prefixes.
	cur := c.curPrefix
	same := c.havePrefix && len(cur) == p && cur[p-2] == uk[p-2] && string(prefix) == string(cur)
	mvccKind := uk[len(uk)-2] // the byte before the terminator (design §3)
	switch kind {
	case sstable.InternalKeyKindSet, sstable.InternalKeyKindSetWithDelete:
		if same {
			// Another version of the current prefix (which decoded as a
			// table key of c.cur): only its kind is new.
			c.count(c.cur, mvccKind, len(uk))
			return
		}
	case sstable.InternalKeyKindDelete, sstable.InternalKeyKindSingleDelete, sstable.InternalKeyKindDeleteSized:
	default:
		c.foreign++
		return
	}
	vnode := uint16(uk[4])<<8 | uint16(uk[5])
	a := c.cur
	if a == nil || a.table != table || a.vnode != vnode {
		if a = c.startVnode(table, vnode); a == nil {
			return
		}
	}
	if kind != sstable.InternalKeyKindSet && kind != sstable.InternalKeyKindSetWithDelete {
		a.counts.PebbleTombstones++
		return
	}
	// A new prefix (same is false: a prefix of another vnode differs in its
	// header, and startVnode only clears havePrefix).
	c.newPrefix(a, uk[vnodeHeaderLen:p-1], mvccKind)
	c.curPrefix = append(c.curPrefix[:0], prefix...)
	c.havePrefix = true
	c.count(a, mvccKind, len(uk))
}

// count adds one MVCC entry of the given kind and key length to a.
func (c *Collector) count(a *vnodeAcc, mvccKind byte, keyLen int) {
	a.counts.Entries++
	if mvccKind == keys.KindPut {
		a.counts.Puts++
	} else {
		a.counts.Deletes++
	}
	a.counts.KeyBytes += uint64(keyLen)
	c.entries++
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
	a := &vnodeAcc{table: table, vnode: vnode, stride: 1}
	c.vnodes = append(c.vnodes, a)
	c.cur = a
	return a
}

// finishVnode records the current vnode's last pk.
func (c *Collector) finishVnode() {
	if c.cur != nil && c.havePrefix {
		c.cur.lastPK = c.copyPK(c.curPrefix[vnodeHeaderLen : len(c.curPrefix)-1])
	}
	c.havePrefix = false
}

// newPrefix is called at the head of each MVCC prefix of vnode a.
func (c *Collector) newPrefix(a *vnodeAcc, pk []byte, kind byte) {
	if len(a.samples) == 0 || a.counts.Entries-a.lastSample >= max(a.stride, c.globalStride) {
		a.samples = append(a.samples, Sample{
			PK:       c.copyPK(pk),
			Puts:     a.counts.Puts,
			Deletes:  a.counts.Deletes,
			HeadPuts: a.counts.HeadPuts,
			Prefixes: a.counts.Prefixes,
		})
		a.lastSample = a.counts.Entries
		if len(a.samples) > 1 {
			c.interior++
		}
		for len(a.samples) > maxVnodeSamples {
			c.thin(a, 2*max(a.stride, c.globalStride))
		}
		for c.interior > c.budget() {
			c.globalStride *= 2
			for _, v := range c.vnodes {
				if v.stride < c.globalStride {
					c.thin(v, c.globalStride)
				}
			}
		}
	}
	a.counts.Prefixes++
	if kind == keys.KindPut {
		a.counts.HeadPuts++
	}
}

func (c *Collector) budget() int {
	return int(max(minSampleBudget, c.entries/entriesPerSample))
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
	if cap(c.arena)-len(c.arena) < len(pk) {
		c.arena = make([]byte, 0, max(4096, len(pk)))
	}
	start := len(c.arena)
	c.arena = append(c.arena, pk...)
	return c.arena[start:len(c.arena):len(c.arena)]
}

// pack packs samples through a scratch buffer, so that each vnode's bytes
// are allocated once at their exact size.
func (c *Collector) pack(samples []Sample) packedSamples {
	if len(samples) == 0 {
		return packedSamples{}
	}
	p := packSamples(c.scratch[:0], samples)
	c.scratch = p.data
	p.data = slices.Clone(p.data)
	return p
}

// Summary returns the summary of the keys added so far. It finishes the
// current vnode: call it once, after the last key.
func (c *Collector) Summary() *FileSummary {
	c.finishVnode()
	c.cur = nil
	s := &FileSummary{MetaKeys: c.metaKeys, Foreign: c.foreign}
	for i := 0; i < len(c.vnodes); {
		j := i
		for j < len(c.vnodes) && c.vnodes[j].table == c.vnodes[i].table {
			j++
		}
		ts := TableSummary{Table: c.vnodes[i].table, Vnodes: make([]VnodeSummary, 0, j-i)}
		for _, a := range c.vnodes[i:j] {
			ts.Vnodes = append(ts.Vnodes, VnodeSummary{
				Vnode:   a.vnode,
				Counts:  a.counts,
				LastPK:  a.lastPK,
				samples: c.pack(a.samples),
			})
		}
		s.Tables = append(s.Tables, ts)
		i = j
	}
	return s
}
