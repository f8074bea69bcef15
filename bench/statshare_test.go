package bench

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats/internal/lsminternal"
	"github.com/lsmstats/lsmstats/internal/sstsummary"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// statsShare measures the statistics' share of the bytes a store's Pebble
// writes into SSTs by its flushes and its compactions (BenchmarkScale's
// stats-share-*): its event listener (lsm.Options.EventListener) takes
// each SST that a flush or a compaction wrote as the job ends (the file
// is opened there, under Pebble's mutex, so that a compaction cannot
// delete it before it is read), and a goroutine of its own reads each
// one's properties:
//
//   - its size on disk, the SST's bytes written;
//   - the statistics' payload (the sstsummary collector's user property),
//     counted uncompressed: since TableFormatPebblev7 Pebble compresses the
//     properties block, so this is at most what it took on disk;
//   - the metadata rows (table keys.MetaTable: the live statistics' bucket
//     rows and the store's other metadata), read with an iterator over
//     their span: their raw key (user key and trailer) and value bytes,
//     over the SST's raw key and value bytes (its properties), times the
//     SST's bytes less the payload: compression is taken to shrink them
//     as it shrinks the rest.
//
// A flush of ingested tables and a move (no bytes written) are not
// counted, as Pebble's metrics do not count them as flushed or compacted.
// Neither is the WAL. The listener calls nothing of the DB's; the reads
// run beside the job (readTime says how long they took).
//
// Safe for concurrent use; close ends it.
type statsShare struct {
	ropts sstable.ReaderOptions

	mu      sync.Mutex
	dir     string // the store's Pebble directory; events before it is set are not counted
	queue   []sharedFile
	closed  bool
	missed  int   // SSTs that could not be opened or read
	firstEr error // the first of those errors
	by      [2]shareBytes
	reading time.Duration // the reads' wall time, summed
	wake    chan struct{}
	done    chan struct{}
}

// shareBytes are the bytes of one way of writing SSTs (flush, compaction).
type shareBytes struct {
	files                 int
	sst, meta, payload    float64 // bytes on disk, estimated metadata rows, payload
	metaRaw, raw, metaKVs float64 // raw key+value bytes of the metadata rows and of all; metadata rows
}

const (
	shareFlush = iota
	shareCompaction
)

// sharedFile is an SST to read: opened in the event.
type sharedFile struct {
	way  int
	f    vfs.File
	size uint64
	num  uint64
}

func newStatsShare(ropts sstable.ReaderOptions) *statsShare {
	s := &statsShare{ropts: ropts, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go s.loop()
	return s
}

// setDir starts the counting, in the store's Pebble directory.
func (s *statsShare) setDir(dir string) {
	s.mu.Lock()
	s.dir = dir
	s.mu.Unlock()
}

// listener returns the event listener to give the store.
func (s *statsShare) listener() *pebble.EventListener {
	return &pebble.EventListener{
		FlushEnd: func(info pebble.FlushInfo) {
			if info.Err == nil && !info.Ingest {
				s.take(shareFlush, info.Output)
			}
		},
		CompactionEnd: func(info pebble.CompactionInfo) {
			if info.Err == nil && info.Reason != "move" && info.Reason != "delete-only" {
				s.take(shareCompaction, info.Output.Tables)
			}
		},
	}
}

// take opens the SSTs a job wrote (under Pebble's mutex: quick).
func (s *statsShare) take(way int, tables []pebble.TableInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dir == "" || s.closed {
		return
	}
	for _, t := range tables {
		f, err := vfs.Default.Open(filepath.Join(s.dir, fmt.Sprintf("%06d.sst", uint64(t.FileNum))))
		if err != nil {
			s.miss(err)
			continue
		}
		s.queue = append(s.queue, sharedFile{way: way, f: f, size: t.Size, num: uint64(t.FileNum)})
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *statsShare) miss(err error) {
	s.missed++
	if s.firstEr == nil {
		s.firstEr = err
	}
}

func (s *statsShare) loop() {
	defer close(s.done)
	for {
		s.mu.Lock()
		if len(s.queue) == 0 {
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return
			}
			<-s.wake
			continue
		}
		f := s.queue[0]
		s.queue = s.queue[1:]
		s.mu.Unlock()
		start := time.Now()
		b, err := s.read(f)
		s.mu.Lock()
		s.reading += time.Since(start)
		if err != nil {
			s.miss(errors.Wrapf(err, "sst %06d", f.num))
		} else {
			c := &s.by[f.way]
			c.files++
			c.sst += b.sst
			c.meta += b.meta
			c.payload += b.payload
			c.metaRaw += b.metaRaw
			c.raw += b.raw
			c.metaKVs += b.metaKVs
		}
		s.mu.Unlock()
	}
}

// read measures one SST.
func (s *statsShare) read(f sharedFile) (shareBytes, error) {
	var b shareBytes
	readable, err := sstable.NewSimpleReadable(f.f) // closes f with the reader
	if err != nil {
		_ = f.f.Close()
		return b, err
	}
	r, err := sstable.NewReader(context.Background(), readable, s.ropts)
	if err != nil {
		_ = readable.Close()
		return b, err
	}
	defer r.Close()
	props, err := r.ReadPropertiesBlock(context.Background(), nil)
	if err != nil {
		return b, err
	}
	b.sst = float64(f.size)
	b.payload = float64(len(props.UserProperties[sstsummary.CollectorName]))
	b.raw = float64(props.RawKeySize + props.RawValueSize)
	lo, _ := keys.TableSpan(keys.MetaTable)
	it, err := r.NewIter(sstable.NoTransforms, lo, nil, sstable.DebugHandlesBlobContext)
	if err != nil {
		return b, err
	}
	for kv := it.SeekGE(lo, 0); kv != nil; kv = it.Next() {
		v, _, err := kv.Value(nil)
		if err != nil {
			_ = it.Close()
			return b, err
		}
		b.metaRaw += float64(len(kv.K.UserKey) + 8 + len(v))
		b.metaKVs++
	}
	if err := it.Close(); err != nil {
		return b, err
	}
	if b.raw > 0 {
		b.meta = (b.sst - b.payload) * b.metaRaw / b.raw
	}
	return b, nil
}

// close waits for the SSTs taken so far and returns the bytes of flushes
// and of compactions, and the SSTs missed with the first error.
func (s *statsShare) close() (flushed, compacted shareBytes, missed int, err error) {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.by[shareFlush], s.by[shareCompaction], s.missed, s.firstEr
}

// readTime returns how long the reads of the SSTs took so far.
func (s *statsShare) readTime() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reading
}

// add returns the bytes of b and o together.
func (b shareBytes) add(o shareBytes) shareBytes {
	return shareBytes{files: b.files + o.files, sst: b.sst + o.sst, meta: b.meta + o.meta, payload: b.payload + o.payload,
		metaRaw: b.metaRaw + o.metaRaw, raw: b.raw + o.raw, metaKVs: b.metaKVs + o.metaKVs}
}

// share returns the statistics' bytes (metadata rows and payload) over
// all the bytes, in percent.
func (b shareBytes) share() float64 {
	if b.sst <= 0 {
		return 0
	}
	return 100 * (b.meta + b.payload) / b.sst
}

// TestStatsShare runs statsShare on a real store: checkpoints of rows in
// hashed pk order (every commit rewrites bucket rows), a flush and a full
// manual compaction with automatic compactions off, so that what the
// listener saw can be checked against what Pebble counted and what the
// store holds at the end:
//   - the SSTs' bytes of flushes and of compactions are Pebble's metrics'
//     (TableBytesFlushed, TableBytesCompacted) over the same time;
//   - read, on the SSTs left after the full compaction, finds the metadata
//     rows the store holds (read through Pebble), and their raw bytes;
//   - the payload is there, and the shares lie in (0, 100%] (a compaction
//     may write the metadata rows alone), the flushes' below 100%.
func TestStatsShare(t *testing.T) {
	dir := t.TempDir()
	opts := &lsm.Options{Logger: lsm.QuietLogger(nil), Pebble: func(o *pebble.Options) { o.DisableAutomaticCompactions = true }}
	share := newStatsShare(opts.PebbleOptions().MakeReaderOptions())
	opts.EventListener = share.listener()
	s, err := lsm.Open(dir, opts)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	db := lsminternal.DB(s)
	share.setDir(lsminternal.PebbleDir(s))
	before := lsmWrites(db.Metrics())

	def := lsm.TableDef{ID: 1, Name: "t", VnodeCount: 16, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	def, err = s.Table(1)
	require.NoError(t, err)
	w, err := s.NewWriter(1, nil, nil)
	require.NoError(t, err)
	const epochs, perEpoch = 20, 1000
	for e := range epochs {
		epoch := s.EpochFloor() + 1
		for i := range perEpoch {
			pk := keys.AppendUint64(nil, uint64(e*perEpoch+i)*0x9E3779B97F4A7C15)
			require.NoError(t, w.Insert(epoch, def.VnodeOf(pk), pk, []byte("a row of some forty bytes, give or take")))
		}
		require.NoError(t, w.Seal(epoch))
		require.NoError(t, s.Commit(epoch))
	}
	require.NoError(t, db.Flush())
	lo, _ := keys.TableSpan(0)
	require.NoError(t, db.Compact(context.Background(), lo, bytes.Repeat([]byte{0xff}, 16), true))

	flushed, compacted, missed, err := share.close()
	require.Zero(t, missed, "SSTs not read: %v", err)
	after := lsmWrites(db.Metrics())
	require.Positive(t, flushed.files)
	require.Positive(t, compacted.files)
	require.Equal(t, float64(after.Flushed-before.Flushed), flushed.sst, "bytes flushed")
	require.Equal(t, float64(after.Compacted-before.Compacted), compacted.sst, "bytes compacted")

	// The metadata rows the store holds, as Pebble's SSTs count them: user
	// key, 8-byte trailer and value; and those that read finds in the live
	// SSTs. After the full compaction every SST is in L6 and holds no key
	// another holds, nor two versions of one.
	metaLo, _ := keys.TableSpan(keys.MetaTable)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: metaLo})
	require.NoError(t, err)
	var metaRaw, metaKVs float64
	for ok := it.First(); ok; ok = it.Next() {
		metaRaw += float64(len(it.Key()) + 8 + len(it.Value()))
		metaKVs++
	}
	require.NoError(t, it.Close())
	require.Positive(t, metaKVs)
	levels, err := db.SSTables()
	require.NoError(t, err)
	var live shareBytes
	for l, tables := range levels {
		for _, tb := range tables {
			require.Equal(t, 6, l, "after a full compaction: %s", db.Metrics())
			f, err := vfs.Default.Open(filepath.Join(lsminternal.PebbleDir(s), fmt.Sprintf("%06d.sst", uint64(tb.FileNum))))
			require.NoError(t, err)
			b, err := share.read(sharedFile{f: f, size: tb.Size, num: uint64(tb.FileNum)})
			require.NoError(t, err)
			live = live.add(b)
		}
	}
	// The table's rows were flushed, and the flushes wrote more than the
	// statistics.
	require.Less(t, flushed.share(), 100.0)
	require.Equal(t, metaKVs, live.metaKVs, "metadata rows in the live SSTs")
	require.Equal(t, metaRaw, live.metaRaw, "their raw bytes")

	for name, b := range map[string]shareBytes{"flushed": flushed, "compacted": compacted, "both": flushed.add(compacted)} {
		require.Positive(t, b.payload, name)
		require.Positive(t, b.meta, name)
		require.LessOrEqual(t, b.meta+b.payload, b.sst, name)
		require.Greater(t, b.share(), 0.0, name)
		require.LessOrEqual(t, b.share(), 100.0, name)
		t.Logf("%s: %d SSTs, %.0f bytes, metadata rows %.0f (%.0f rows), payload %.0f: %.2f%%",
			name, b.files, b.sst, b.meta, b.metaKVs, b.payload, b.share())
	}
}
