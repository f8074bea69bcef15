package lsm

import (
	"bytes"
	"encoding/binary"
	"maps"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/keys"
)

// vnodePartitions is the number of SST spans a table's vnodes fall into:
// contiguous ranges of about VnodeCount/16 vnodes (every vnode its own for
// tables of 16 vnodes or fewer).
const vnodePartitions = 16

// sstSpans says where an SST must end: at the end of a table (the metadata
// table is the last one) and at the end of each of a table's vnode
// partitions. Pebble's flushes and compactions follow it (Options'
// Experimental.SpanPolicyFunc is policy), and so do the store's own SSTs
// (output.cut).
//
// Why tables: a flushed memtable of a backfill holds MV rows, the
// backfill's state rows and the metadata its checkpoints rewrote. As one
// SST it spans from the MV rows to the metadata, and the flushes of a
// backfill all overlap: L0 cannot move them down and compacts them.
//
// Why vnode partitions: the actors of a backfill own contiguous vnode
// ranges and write them at the same time, each in key order. A flush's MV
// rows then lie at two or more places of the MV's key space, and one SST
// around them overlaps what each actor wrote before or will write next.
// Cut at the partitions, which fall on the actors' boundaries when their
// count divides 16, each piece lies where only one actor writes, after
// its earlier pieces: it overlaps nothing, and Pebble moves it down the
// levels without rewriting it, as it moves raw Pebble's SSTs of a scan in
// key order. In BenchmarkScale at 16M rows (uniform, vnode order) the
// backfill compacted 249 bytes per row with one SST per flush, 196 with
// tables cut and 74 with partitions cut too; raw Pebble's backfill 76–98.
// RisingWave's Hummock splits SSTs by table, and by vnode partition for
// its big tables, for the same reason.
//
// The price is more and smaller SSTs where a table's writes spread over
// its vnodes (a load, an interleaved backfill): up to 16 per table per
// flush where there was one, in the same sublevels. A small table gains
// nothing for it (its compactions are small whatever they rewrite), and
// many small tables would make a flush hundreds of tiny SSTs, each with
// its file, sync, metadata and statistics payload. So a table is cut
// into partitions only once its live bytes reach Options.PartitionBytes
// (32 MiB by default, 2 MiB a partition; Store.partitionLarge), as Hummock
// splits a table by vnode only when it is large or written fast. A table
// stays partitioned while the store is open; Open decides afresh from the
// live statistics.
//
// A nil *sstSpans knows no catalog and cuts at tables only, and so are
// tables not (or not yet) partitioned and foreign keys.
type sstSpans struct {
	// vnodes is each partitioned table's vnode count, copied on write:
	// Pebble's compactions read it concurrently with partition.
	vnodes atomic.Pointer[map[uint32]int]
}

// partitioned reports whether a table's SSTs are cut at its partitions.
func (p *sstSpans) partitioned(table uint32) bool {
	m := p.vnodes.Load()
	if m == nil {
		return false
	}
	_, ok := (*m)[table]
	return ok
}

// partition cuts a table's SSTs at its vnode partitions from now on.
// Callers serialise partitions (Store.mu).
func (p *sstSpans) partition(table uint32, vnodeCount int) {
	m := map[uint32]int{}
	if old := p.vnodes.Load(); old != nil {
		m = maps.Clone(*old)
	}
	m[table] = vnodeCount
	p.vnodes.Store(&m)
}

// end returns the first key after key's span: the bound of the next vnode
// partition of its table, or the table's end (nil for the metadata table:
// the end of the key space). It is always above key.
func (p *sstSpans) end(key []byte) []byte {
	table, ok := keys.TableOf(key)
	if !ok {
		// Shorter than a table id (not the store's): the table bound
		// just above it.
		end := make([]byte, 4)
		copy(end, key)
		return end
	}
	_, tableEnd := keys.TableSpan(table)
	if p == nil || table == keys.MetaTable {
		return tableEnd
	}
	m := p.vnodes.Load()
	if m == nil {
		return tableEnd
	}
	n := (*m)[table]
	if n <= 1 {
		return tableEnd
	}
	// The key's vnode; a key too short to hold one sorts as if padded
	// with zeros.
	var vb [2]byte
	copy(vb[:], key[4:])
	v := int(binary.BigEndian.Uint16(vb[:]))
	parts := min(n, vnodePartitions)
	next := v*parts/n + 1 // the partition after key's
	if v >= n || next >= parts {
		return tableEnd
	}
	// The first vnode of partition k is ceil(k·n/parts).
	return keys.AppendVnodeBound(nil, table, uint16((next*n+parts-1)/parts))
}

// policy is Pebble's SpanPolicyFunc: the default policy, up to end(start).
func (p *sstSpans) policy(start []byte) (pebble.SpanPolicy, []byte, error) {
	return pebble.SpanPolicy{}, p.end(start), nil
}

// within reports whether key lies before end, the end of an SST's span
// (nil: unbounded). Bounds are table or vnode bounds, shorter than every
// key of their tables, so byte order is the comparer's order here.
func within(key, end []byte) bool {
	return end == nil || bytes.Compare(key, end) < 0
}
