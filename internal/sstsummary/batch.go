package sstsummary

import (
	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/keys"
)

// BatchSummary summarises the keys of one batch, part by part: a part per
// table, in the order the keys were added, as a checkpoint's SSTs are cut.
// Each table's keys must come in key order and together. A checkpoint
// committed through the memtable counts in the physical statistics by its
// parts until a flush writes its keys into an SST (ssttracker's unflushed
// parts). The zero value is ready to use; not safe for concurrent use.
type BatchSummary struct {
	parts []BatchPart
	cur   *Collector
}

// BatchPart is the summary of one table's keys in a batch, with the
// figures Pebble's properties would give an SST of them: its point keys,
// their key bytes and value bytes.
type BatchPart struct {
	Table                        uint32
	Summary                      *FileSummary
	Entries, KeyBytes, ValueSize uint64
}

// Add adds one key of the batch, of a Pebble point kind, with its value's
// length.
func (b *BatchSummary) Add(key []byte, kind pebble.InternalKeyKind, valueLen int) {
	t, _ := keys.TableOf(key)
	if b.cur == nil || b.parts[len(b.parts)-1].Table != t {
		b.finishPart()
		b.cur = NewScanCollector()
		b.parts = append(b.parts, BatchPart{Table: t})
	}
	b.cur.add(key, kind)
	p := &b.parts[len(b.parts)-1]
	p.Entries++
	p.KeyBytes += uint64(len(key))
	p.ValueSize += uint64(valueLen)
}

func (b *BatchSummary) finishPart() {
	if b.cur != nil {
		b.parts[len(b.parts)-1].Summary = b.cur.Summary()
		b.cur = nil
	}
}

// Err returns the collector's error, if a key could not be classified.
func (b *BatchSummary) Err() error {
	if b.cur != nil {
		return b.cur.err
	}
	return nil
}

// Parts ends the batch and returns its parts, in the order their keys
// were added. No key may be added after it.
func (b *BatchSummary) Parts() []BatchPart {
	b.finishPart()
	return b.parts
}
