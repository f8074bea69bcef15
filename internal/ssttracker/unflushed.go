package ssttracker

// Unflushed checkpoints.
//
// A small checkpoint is committed as one synced Pebble batch: its keys sit
// in the memtable (and the WAL) until a flush writes them into an SST, and
// only then does the collector summarise them. Until that flush the
// Version carries a summary of the batch, built by the same collector over
// the same keys in the same order (BatchSummary), one part per table as a
// checkpoint's SSTs are cut. Its parts count in every total, vnode and
// range like files, under file numbers above any Pebble table number, and
// are not listed by Files.
//
// A batch leaves the Version in the refresh that adds its flush's SST.
// The listener logs the flush's change and then records the largest
// sequence number of the flush's output, and a refresh retires every batch
// whose first sequence number is at or below the mark read before it took
// the logged changes (or listed). Memtables flush in sequence order, and a
// flush never drops the newest key of its input, so the mark covers every
// batch of the flushed memtables and none after them. A refresh that lists
// between the install and FlushEnd sees the SST while the mark lags: the
// batch counts twice until the refresh that FlushEnd asks for, a window of
// Pebble's own bookkeeping between the two.

import (
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/sstsummary"
)

// MemtableLevel is the Level of an unflushed batch's part (Unflushed).
const MemtableLevel = -1

// unflushedBase is added to a batch's sequence numbers to number its parts:
// far above any Pebble table number.
const unflushedBase = 1 << 62

// AddUnflushed adds the batch whose first sequence number is seq, and
// whose keys b summarises, to the current Version. A batch a recorded
// flush already wrote is left out: the refresh that the flush's event asked
// for lists its SST.
func (t *Tracker) AddUnflushed(seq uint64, b *sstsummary.BatchSummary) {
	parts := b.Parts()
	if len(parts) == 0 {
		return
	}
	t.refreshMu.Lock()
	defer t.refreshMu.Unlock()
	if seq <= t.flushedSeq.Load() {
		return
	}
	base := t.current.Load()
	bld := newBuilder(base)
	mem := append([]*liveFile(nil), base.mem...)
	for i, p := range parts {
		num := unflushedBase + seq + uint64(i)
		f := newLiveFile(FileInfo{
			FileNum: num, BackingNum: num, Level: MemtableLevel,
			NumEntries: p.Entries, RawKeySize: p.KeyBytes, RawValueSize: p.ValueSize,
			Summary: p.Summary, Source: FromMemtable,
		})
		f.batchSeq = seq
		bld.apply(f, true)
		mem = append(mem, f)
	}
	t.current.Store(bld.finish(base.files, base.slots, base.rebuilt, mem))
}

// recordFlush raises the flushed sequence mark to the largest sequence
// number of a flush's output (FlushEnd; under Pebble's mutex).
func (t *Tracker) recordFlush(info pebble.FlushInfo) {
	if info.Err != nil || info.Ingest {
		return
	}
	for _, o := range info.Output {
		atomicMax(&t.flushedSeq, uint64(o.LargestSeqNum))
	}
}

func atomicMax(a *atomic.Uint64, v uint64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// Unflushed returns v's parts of the batches committed through the
// memtable whose flush no refresh has listed yet, in sequence order (Level
// MemtableLevel, Source FromMemtable).
func Unflushed(v *Version) []FileInfo {
	out := make([]FileInfo, len(v.mem))
	for i, f := range v.mem {
		out[i] = f.info
	}
	return out
}

// NumUnflushed returns the number of v's unflushed parts (Unflushed).
func NumUnflushed(v *Version) int { return len(v.mem) }
