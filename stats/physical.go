package stats

import (
	"github.com/RoaringBitmap/roaring/v2"
	"github.com/lsmstats/lsmstats/internal/ssttracker"
)

// Version is an immutable view of the physical statistics over one
// consistent set of live SSTs: what the LSM holds per table and vnode,
// summed over the summaries that each SST carries. The zero Version is
// empty (no files). Safe for concurrent use.
//
// Physical counts are not live rows: an update adds an entry, a delete adds
// one too, and distinct prefixes summed over SSTs overcount keys that live
// in several SSTs (the package documentation says more).
type Version struct {
	v *ssttracker.Version
}

// emptyVersion is what the zero Version reads.
var emptyVersion ssttracker.Version

func (v Version) version() *ssttracker.Version {
	if v.v == nil {
		return &emptyVersion
	}
	return v.v
}

// Vnode returns the counts of one (table, vnode): zero if it has no data.
func (v Version) Vnode(table uint32, vnode uint16) Counts {
	return Counts(v.version().Vnode(table, vnode))
}

// Vnodes returns the vnodes of a table that have data, in increasing
// order.
func (v Version) Vnodes(table uint32) []uint16 { return v.version().Vnodes(table) }

// Sum returns the counts of a table summed over a set of vnodes; a nil set
// means every vnode.
func (v Version) Sum(table uint32, vnodes *roaring.Bitmap) Counts {
	return Counts(v.version().Sum(table, vnodes))
}

// Table returns the totals of one table: zero if it has no data.
func (v Version) Table(table uint32) TableTotals {
	c, vnodes := v.version().Table(table)
	return TableTotals{
		TotalKeyCount:    c.Entries,
		TotalKeySize:     c.KeyBytes,
		TotalValueSize:   c.ValueBytes,
		PebbleTombstones: c.PebbleTombstones,
		Counts:           Counts(c),
		Vnodes:           vnodes,
	}
}

// Tables returns the ids of the tables with data, in increasing order.
func (v Version) Tables() []uint32 { return v.version().Tables() }

// NumFiles returns the number of live SSTs.
func (v Version) NumFiles() int { return v.version().NumFiles() }

// Counts are the physical statistics of one (table, vnode), or of a set of
// them, summed over the live SSTs. The zero value is "no entries".
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
	// within each SST, summed over the SSTs: an upper bound on distinct
	// pks.
	Prefixes uint64
	// HeadPuts is the number of prefixes whose newest MVCC entry in its
	// SST is a put; Prefixes - HeadPuts have an MVCC delete as their newest
	// entry there.
	HeadPuts uint64
	// KeyBytes is the total length of the user keys of the MVCC entries.
	KeyBytes uint64
	// ValueBytes is an estimate: the collector sees no values, so each
	// SST's RawValueSize is apportioned over its (table, vnode)s in
	// proportion to their MVCC puts.
	ValueBytes uint64
	// PebbleTombstones counts Pebble point tombstones (DEL, SINGLEDEL,
	// DELSIZED) on versioned table keys: what MVCC GC writes. They are not
	// MVCC entries.
	PebbleTombstones uint64
}

// IsZero reports whether every counter is zero.
func (c Counts) IsZero() bool { return c == Counts{} }

// TableTotals are the physical statistics of a whole table, with the
// Hummock-compatible names. The zero value is a table without data.
type TableTotals struct {
	// TotalKeyCount is every MVCC entry (each version and each MVCC
	// tombstone) in the live SSTs, like Hummock's total_key_count.
	TotalKeyCount uint64
	// TotalKeySize is the user key bytes of those entries.
	TotalKeySize uint64
	// TotalValueSize apportions each SST's RawValueSize over its (table,
	// vnode)s in proportion to their MVCC puts (collectors cannot see
	// values). It is an estimate: the small values of metadata and foreign
	// keys in the same SST are apportioned too, rounding is down.
	TotalValueSize uint64
	// PebbleTombstones are the Pebble point tombstones of MVCC GC.
	PebbleTombstones uint64
	// Counts is the sum over the table's vnodes.
	Counts Counts
	// Vnodes is the number of vnodes with data in the live SSTs.
	Vnodes int
}
