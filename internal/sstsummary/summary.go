package sstsummary

import (
	"encoding/binary"
	"slices"
)

// Counts are the physical statistics of one (table, vnode): of one SST in a
// FileSummary, or summed over the live SSTs in a Version. The zero value is
// "no entries".
type Counts struct {
	// Entries is the number of MVCC entries: Puts + Deletes. Every version
	// and every MVCC tombstone counts until compaction removes it, like
	// Hummock's total_key_count.
	Entries uint64
	// Puts and Deletes count MVCC entries by kind (keys.KindPut,
	// keys.KindDelete).
	Puts    uint64
	Deletes uint64
	// Prefixes is the number of distinct MVCC prefixes (table, vnode, pk)
	// within each SST; summed over SSTs it is an upper bound on distinct pks.
	Prefixes uint64
	// HeadPuts is the number of prefixes whose newest MVCC entry in the SST
	// is a put; Prefixes - HeadPuts is HeadDeletes.
	HeadPuts uint64
	// KeyBytes is the total length of the user keys of the MVCC entries.
	KeyBytes uint64
	// ValueBytes is an estimate, only in a Version: collectors see no values,
	// so each SST's RawValueSize is apportioned over its (table, vnode)s in
	// proportion to their MVCC puts. Always zero in a FileSummary.
	ValueBytes uint64
	// PebbleTombstones counts Pebble point tombstones (DEL, SINGLEDEL,
	// DELSIZED) on versioned table keys: what MVCC GC writes. They are not
	// MVCC entries.
	PebbleTombstones uint64
}

// HeadDeletes is the number of prefixes whose newest entry in its SST is an
// MVCC delete.
func (c Counts) HeadDeletes() uint64 { return c.Prefixes - c.HeadPuts }

// Add adds o to c.
func (c *Counts) Add(o Counts) {
	c.Entries += o.Entries
	c.Puts += o.Puts
	c.Deletes += o.Deletes
	c.Prefixes += o.Prefixes
	c.HeadPuts += o.HeadPuts
	c.KeyBytes += o.KeyBytes
	c.ValueBytes += o.ValueBytes
	c.PebbleTombstones += o.PebbleTombstones
}

// Sub subtracts o from c; o must have been added before.
func (c *Counts) Sub(o Counts) {
	c.Entries -= o.Entries
	c.Puts -= o.Puts
	c.Deletes -= o.Deletes
	c.Prefixes -= o.Prefixes
	c.HeadPuts -= o.HeadPuts
	c.KeyBytes -= o.KeyBytes
	c.ValueBytes -= o.ValueBytes
	c.PebbleTombstones -= o.PebbleTombstones
}

// IsZero reports whether every counter is zero.
func (c Counts) IsZero() bool { return c == Counts{} }

// Sample is one sample point of a vnode in one SST: the cumulative counts of
// the vnode's MVCC entries in the SST whose pk sorts strictly before PK. PK
// is the pk of an MVCC prefix present in the SST. The zero value is the
// first sample of a vnode whose first pk is empty.
type Sample struct {
	PK       []byte
	Puts     uint64
	Deletes  uint64
	HeadPuts uint64
	Prefixes uint64
}

// Entries is Puts + Deletes.
func (s Sample) Entries() uint64 { return s.Puts + s.Deletes }

// VnodeSummary is what one SST holds of one (table, vnode). The zero value
// is vnode 0 without entries. Read-only once built (by the collector or
// DecodeSummary), and then safe for concurrent use.
type VnodeSummary struct {
	Vnode  uint16
	Counts Counts
	// LastPK is the pk of the vnode's last MVCC prefix in the SST (nil
	// without MVCC entries). Entries with pk > LastPK: none.
	LastPK []byte
	// samples are kept packed (see Samples).
	samples packedSamples
}

// NumSamples returns the number of samples.
func (vs *VnodeSummary) NumSamples() int { return vs.samples.n }

// Samples returns the samples, in increasing pk order. When the vnode has
// MVCC entries, the first is at its first pk (all counters zero); a vnode
// with only Pebble tombstones has none. They are stored packed, in the
// payload's encoding (about 22 bytes a sample for 16-byte pks, rather than
// 64 for a Sample and its pk's bytes besides), and decoded by each call.
func (vs *VnodeSummary) Samples() []Sample {
	if vs.samples.n == 0 {
		return nil
	}
	out := make([]Sample, 0, vs.samples.n)
	it := vs.samples.iter()
	for it.next() {
		sm := it.cur
		sm.PK = slices.Clone(sm.PK)
		out = append(out, sm)
	}
	return out
}

// packedSamples are a vnode's samples as encoded in the payload body: per
// sample its pk (shared | suffixLen | suffix, relative to the previous pk)
// and, after the first, the deltas of puts, deletes, head puts and prefixes.
// The data were validated when packed or decoded.
type packedSamples struct {
	n    int
	data []byte
}

// packSamples packs samples (pks increasing, first sample at zero) into
// dst's spare capacity.
func packSamples(dst []byte, samples []Sample) packedSamples {
	b := dst
	var prev Sample
	for k := range samples {
		sm := &samples[k]
		b = appendPK(b, prev.PK, sm.PK)
		if k > 0 {
			b = binary.AppendUvarint(b, sm.Puts-prev.Puts)
			b = binary.AppendUvarint(b, sm.Deletes-prev.Deletes)
			b = binary.AppendUvarint(b, sm.HeadPuts-prev.HeadPuts)
			b = binary.AppendUvarint(b, sm.Prefixes-prev.Prefixes)
		}
		prev = *sm
	}
	return packedSamples{n: len(samples), data: b}
}

func (p packedSamples) iter() sampleIter { return sampleIter{data: p.data, n: p.n} }

// sampleIter decodes packed samples in order. cur.PK is valid until the
// second next call after the one that set it (two buffers alternate), so a
// caller can hold on to the previous sample.
type sampleIter struct {
	data  []byte
	k, n  int
	bufs  [2][]byte
	which int
	cur   Sample
}

func (it *sampleIter) next() bool {
	if it.k >= it.n {
		return false
	}
	shared, n1 := binary.Uvarint(it.data)
	if n1 <= 0 {
		return false
	}
	suffix, n2 := binary.Uvarint(it.data[n1:])
	if n2 <= 0 || shared > uint64(len(it.cur.PK)) || suffix > uint64(len(it.data)-n1-n2) {
		return false
	}
	d := it.data[n1+n2:]
	buf := append(append(it.bufs[it.which][:0], it.cur.PK[:shared]...), d[:suffix]...)
	it.bufs[it.which] = buf
	it.which ^= 1
	d = d[suffix:]
	if it.k > 0 {
		var deltas [4]uint64
		for i := range deltas {
			v, m := binary.Uvarint(d)
			if m <= 0 {
				return false
			}
			deltas[i], d = v, d[m:]
		}
		it.cur.Puts += deltas[0]
		it.cur.Deletes += deltas[1]
		it.cur.HeadPuts += deltas[2]
		it.cur.Prefixes += deltas[3]
	}
	it.cur.PK = buf
	it.data = d
	it.k++
	return true
}

// firstPK returns the pk of the first sample, which shares nothing with a
// previous one: its bytes, in place (p is never empty when called, and its
// data were validated).
func (p packedSamples) firstPK() []byte {
	_, n1 := binary.Uvarint(p.data) // shared: 0
	suffix, n2 := binary.Uvarint(p.data[n1:])
	start := n1 + n2
	return p.data[start : start+int(suffix) : start+int(suffix)]
}

// TableSummary is what one SST holds of one table. The zero value is table
// 0 without vnodes.
type TableSummary struct {
	Table  uint32
	Vnodes []VnodeSummary // sorted by Vnode, no duplicates
}

// FileSummary is the per-SST payload of the collector. The zero value is the
// summary of an SST without point keys. A FileSummary handed out by a
// Version or the Tracker is shared and must not be modified; unmodified, it
// is safe for concurrent use.
type FileSummary struct {
	// MetaKeys counts point keys of the metadata table (keys.MetaTable), of
	// any Pebble kind.
	MetaKeys uint64
	// Foreign counts the other point keys that are not MVCC entries or
	// Pebble tombstones of table data: keys of no known shape, and table
	// keys of other Pebble kinds (MERGE).
	Foreign uint64
	Tables  []TableSummary // sorted by Table, no duplicates
}

// Vnode returns the summary of one (table, vnode), or nil.
func (s *FileSummary) Vnode(table uint32, vnode uint16) *VnodeSummary {
	ts := s.Table(table)
	if ts == nil {
		return nil
	}
	lo, hi := 0, len(ts.Vnodes)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ts.Vnodes[m].Vnode < vnode {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(ts.Vnodes) && ts.Vnodes[lo].Vnode == vnode {
		return &ts.Vnodes[lo]
	}
	return nil
}

// Table returns the summary of one table, or nil.
func (s *FileSummary) Table(table uint32) *TableSummary {
	lo, hi := 0, len(s.Tables)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.Tables[m].Table < table {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(s.Tables) && s.Tables[lo].Table == table {
		return &s.Tables[lo]
	}
	return nil
}

// PointKeys is the number of point keys the summary accounts for: MVCC
// entries, Pebble tombstones, metadata and foreign keys. For an SST, it plus
// Pebble's NumRangeDeletions equals Pebble's NumEntries.
func (s *FileSummary) PointKeys() uint64 {
	n := s.MetaKeys + s.Foreign
	for i := range s.Tables {
		for j := range s.Tables[i].Vnodes {
			c := &s.Tables[i].Vnodes[j].Counts
			n += c.Entries + c.PebbleTombstones
		}
	}
	return n
}

// Puts is the number of MVCC puts of every table and vnode.
func (s *FileSummary) Puts() uint64 {
	var n uint64
	for i := range s.Tables {
		for j := range s.Tables[i].Vnodes {
			n += s.Tables[i].Vnodes[j].Counts.Puts
		}
	}
	return n
}
