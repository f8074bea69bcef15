package lsm

import (
	"bytes"
	"container/heap"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/lsmstats/lsmstats/internal/livebuckets"
	"github.com/lsmstats/lsmstats/internal/sstsummary"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/stats"
)

// Commit makes every sealed epoch <= epoch of every writer durable and
// visible, atomically, and records epoch as the committed epoch.
//
// It merges the in-memory pieces and the staged spills of those epochs in
// key order, followed by the metadata (committed epoch, high-water mark,
// changed live-statistics buckets). A checkpoint without spills and smaller
// than Options.CommitBatchBytes is committed as one synced Pebble batch
// (WAL and memtable); any other is written into non-overlapping SSTs and
// ingested in one Pebble Ingest call (one MANIFEST edit). Either way a
// crash leaves all of the checkpoint or none of it. When Commit returns,
// the physical statistics include the checkpoint (a batch's summary until
// its flush, see ssttracker's unflushed.go), unless reading an ingested SST's
// properties failed: the checkpoint is durable all the same, so Commit
// returns nil, and Stats().PhysicalErr reports the failure until the
// statistics tracker's background retry succeeds. On error nothing is
// visible and the buffers are kept, so Commit can be retried.
func (s *Store) Commit(epoch uint64) error {
	if err := s.checkWritable(); err != nil {
		return err
	}
	s.ingestMu.Lock()
	defer s.ingestMu.Unlock()
	if err := s.checkWritable(); err != nil {
		return err
	}
	if c := s.committed.Load(); epoch <= c || epoch > keys.MaxEpoch {
		return errors.Wrapf(ErrEpochOrder, "commit of epoch %d, committed epoch is %d", epoch, c)
	}
	bufs, err := s.gather(epoch)
	if err != nil {
		return err
	}
	s.phase("committing")

	s.mu.Lock()
	live := s.mu.live
	hwm := max(s.mu.hwm, epoch)
	s.mu.Unlock()
	batch := live.Begin()
	var sk sink
	if size, ok := s.commitsAsBatch(bufs); ok {
		// Pebble's write stall, bounded: a commit whose memtable write
		// could wait without end fails instead, with its buffers kept.
		if err := s.waitForMemtable(); err != nil {
			return errors.Wrapf(err, "lsmstats: commit of epoch %d", epoch)
		}
		// Sized once: a batch grown from Pebble's default copies its
		// contents at every doubling (a load's commit of 20,000 rows, 3%
		// of its CPU).
		sk = &batchSink{b: s.db.NewBatchWithSize(int(size), pebble.WithMaxRetainedSizeBytes(batchRetained))}
	} else {
		sk = s.newOutput()
	}
	if err := s.writeData(sk, bufs, batch); err != nil {
		sk.abort()
		return err
	}
	batch.Normalize()
	meta := batch.MetaEntries(epoch) // sorted
	meta = insertMeta(meta, livebuckets.MetaEntry{Key: keys.MetaKey([]byte(keys.CommittedEpochName)), Value: be64(epoch)})
	meta = insertMeta(meta, livebuckets.MetaEntry{Key: keys.MetaKey([]byte(hwmName)), Value: be64(hwm)})
	for _, e := range meta {
		if err := sk.addMeta(e); err != nil {
			sk.abort()
			return err
		}
	}
	var unflushed *batchSink
	switch sk := sk.(type) {
	case *batchSink:
		if err := sk.commit(epoch); err != nil {
			return err
		}
		unflushed = sk
		if sk.seq == 0 {
			// Pebble took the batch as a large batch: a memtable of its
			// own, queued for a flush at once, and the batch's sequence
			// number is gone with its contents. Its statistics come from
			// that flush's SST.
			unflushed = nil
			if err := s.flushMemtable(); err != nil {
				s.logf("lsmstats: flush the large batch of epoch %d: %v", epoch, err)
			}
		}
	case *output:
		s.waitForL0()
		if err := s.ingest(sk, "checkpoint of epoch %d", epoch); err != nil {
			return err
		}
	}

	// The checkpoint is durable: publish it with its statistics. statsMu
	// makes Stats see the physical and live sides of one checkpoint.
	s.statsMu.Lock()
	if unflushed != nil {
		s.tracker.AddUnflushed(unflushed.seq, &unflushed.sum)
	}
	if err := s.tracker.RefreshSignalled(); err != nil {
		s.logf("lsmstats: refresh statistics after commit %d: %v", epoch, err)
	}
	s.mu.Lock()
	batch.Publish()
	s.partitionLarge()
	s.committed.Store(epoch)
	s.pub.Store(&published{epoch: epoch, gen: s.pub.Load().gen + 1})
	s.mu.hwm = hwm
	s.mu.Unlock()
	s.statsMu.Unlock()
	s.writeMark(epoch)
	s.iters.close() // pooled iterators predate the checkpoint: release their files
	var written int64
	for _, b := range bufs {
		written += b.bytes
	}
	s.drop(bufs)
	s.metrics.commits.Add(1)
	s.metrics.committedBytes.Add(written)
	s.rescanBuckets(batch.Rescans())
	return nil
}

// insertMeta inserts e into meta, sorted by key, where it sorts.
func insertMeta(meta []livebuckets.MetaEntry, e livebuckets.MetaEntry) []livebuckets.MetaEntry {
	i, _ := slices.BinarySearchFunc(meta, e.Key, func(m livebuckets.MetaEntry, k []byte) int { return bytes.Compare(m.Key, k) })
	return slices.Insert(meta, i, e)
}

// gather checks that every writer sealed epoch and returns the buffers to
// commit.
func (s *Store) gather(epoch uint64) ([]*epochBuf, error) {
	writers, orphans := s.writersAndOrphans()
	var bufs []*epochBuf
	for _, b := range orphans {
		if b.epoch <= epoch {
			bufs = append(bufs, b)
		}
	}
	for _, w := range writers {
		w.mu.Lock()
		if !w.closed && w.lastSealed < epoch {
			w.mu.Unlock()
			return nil, errors.Wrapf(ErrNotSealed, "commit of epoch %d: %s last sealed epoch %d", epoch, w.name, w.lastSealed)
		}
		for _, b := range w.sealed {
			if b.epoch <= epoch {
				bufs = append(bufs, b)
			}
		}
		w.mu.Unlock()
	}
	return bufs, nil
}

// drop releases committed buffers.
func (s *Store) drop(bufs []*epochBuf) {
	committed := make(map[*epochBuf]bool, len(bufs))
	for _, b := range bufs {
		committed[b] = true
		b.w.mu.Lock()
		b.w.sealed = slices.DeleteFunc(b.w.sealed, func(x *epochBuf) bool { return x == b })
		s.release(b)
		b.w.mu.Unlock()
	}
	s.mu.Lock()
	s.mu.orphans = slices.DeleteFunc(s.mu.orphans, func(x *epochBuf) bool { return committed[x] })
	s.mu.Unlock()
}

// writeData merges every piece of bufs into out in key order and adds each
// entry's live delta to the batch.
func (s *Store) writeData(out sink, bufs []*epochBuf, batch *livebuckets.Batch) error {
	var h sourceHeap
	defer func() {
		for _, src := range h {
			src.close()
		}
	}()
	estimated := map[uint32]bool{}
	for _, b := range bufs {
		if b.unchecked {
			estimated[b.w.def.ID] = true
		}
		for _, f := range b.spills {
			src, err := newSpillSource(f)
			if err != nil {
				return err
			}
			if src.valid() {
				h = append(h, src)
			} else if err := src.err; err != nil {
				return err
			}
		}
		if src := newMemSource(b); src.valid() {
			h = append(h, src)
		}
	}
	for t := range estimated {
		if err := batch.MarkEstimates(t); err != nil {
			return err
		}
	}
	if bs, ok := out.(*batchSink); ok {
		if srcs := disjointMemSources(h); srcs != nil {
			return writeDisjoint(bs, srcs, batch)
		}
	}
	heap.Init(&h)
	// A pk's versions come newest first: the newest says whether its row is
	// live once the commit lands, which Apply needs for every version.
	var prefix []byte
	var live bool
	for len(h) > 0 {
		src := h[0]
		key := src.key()
		if err := out.set(key, src.row()); err != nil {
			return err
		}
		k, err := keys.Decode(key)
		if err != nil {
			return errors.NewAssertionErrorWithWrappedErrf(err, "commit produced an invalid key")
		}
		if p := key[:keys.Split(key)]; !bytes.Equal(p, prefix) {
			prefix, live = append(prefix[:0], p...), k.Kind == keys.KindPut
		}
		if err := batch.Apply(livebuckets.Delta{Table: k.Table, Vnode: k.Vnode, PK: k.PK, Counts: livebuckets.Counts(src.delta(len(k.PK))), Live: live}); err != nil {
			return err
		}
		if src.next(); src.valid() {
			heap.Fix(&h, 0)
		} else {
			if err := src.error(); err != nil {
				return err
			}
			src.close()
			heap.Pop(&h)
		}
	}
	return nil
}

// disjointMinEntries is the fewest entries for which writeDisjoint hands
// the copy into Pebble's batch to a goroutine of its own (a variable for
// tests, which compare both ways of writing a checkpoint).
var disjointMinEntries = 512

// disjointCommits counts the checkpoints writeDisjoint wrote, for tests.
var disjointCommits atomic.Int64

// disjointMemSources returns the in-memory sources of a checkpoint in key
// order if their key ranges do not overlap and they hold disjointMinEntries
// entries or more between them; otherwise nil. Disjoint they are when each
// writer writes its own vnodes and has sealed one epoch since the last
// commit, as a backfill's actors do: then the checkpoint's keys in key
// order are the sources' one source after the other, and each prefix comes
// once.
func disjointMemSources(h sourceHeap) []*memSource {
	srcs := make([]*memSource, 0, len(h))
	n := 0
	for _, src := range h {
		m, ok := src.(*memSource)
		if !ok {
			return nil // a spill (a batched checkpoint has none)
		}
		srcs = append(srcs, m)
		n += len(m.entries)
	}
	if n < disjointMinEntries {
		return nil
	}
	slices.SortFunc(srcs, func(a, b *memSource) int { return bytes.Compare(a.entries[0].prefix, b.entries[0].prefix) })
	for i := 1; i < len(srcs); i++ {
		prev := srcs[i-1].entries
		if bytes.Compare(prev[len(prev)-1].prefix, srcs[i].entries[0].prefix) >= 0 {
			return nil
		}
	}
	return srcs
}

// writeDisjoint is writeData for a checkpoint committed as one Pebble
// batch whose sources are disjoint (disjointMemSources). Commit runs on
// its caller's critical path (a backfill's actors wait for its barrier),
// so a goroutine copies the rows into out's batch, with the batch's
// summary, while this one adds the live statistics' deltas; out is not
// touched here until that goroutine is done. Both walk the keys in key
// order, so out's batch and summary are what writeData's merge would have
// made.
func writeDisjoint(out *batchSink, srcs []*memSource, batch *livebuckets.Batch) error {
	copied := make(chan error, 1)
	go func() {
		// The sources' own iteration (their key buffers and positions are
		// this goroutine's; applyDisjoint reads only their entries).
		for _, m := range srcs {
			for ; m.valid(); m.next() {
				if err := out.set(m.key(), m.row()); err != nil {
					copied <- err
					return
				}
			}
		}
		copied <- nil
	}()
	disjointCommits.Add(1)
	err := applyDisjoint(srcs, batch)
	if cerr := <-copied; err == nil {
		err = cerr
	}
	return err
}

// applyDisjoint adds the live delta of every entry of srcs, in key order,
// to batch. Each prefix comes once, so its entry is its newest version.
func applyDisjoint(srcs []*memSource, batch *livebuckets.Batch) error {
	for _, m := range srcs {
		for _, e := range m.entries {
			t, vn, ok := keys.Header(e.prefix)
			if !ok || len(e.prefix) < 7 {
				return errors.AssertionFailedf("commit of an invalid prefix %x", e.prefix)
			}
			pk := e.prefix[6 : len(e.prefix)-1] // after table and vnode, before the terminator
			if err := batch.Apply(livebuckets.Delta{Table: t, Vnode: vn, PK: pk, Counts: livebuckets.Counts(e.delta()), Live: e.put}); err != nil {
				return err
			}
		}
	}
	return nil
}

// sink receives a checkpoint's keys in key order, then its metadata in key
// order: the SSTs of an ingestion (output) or one Pebble batch (batchSink).
type sink interface {
	set(key, value []byte) error
	addMeta(e livebuckets.MetaEntry) error
	abort()
}

// commitsAsBatch reports whether a checkpoint of bufs goes through one
// Pebble batch: no spilled pieces (they are SSTs already), and less buffered
// data than Options.CommitBatchBytes. size is the buffered data's bytes,
// the batch's size hint.
func (s *Store) commitsAsBatch(bufs []*epochBuf) (size int64, ok bool) {
	limit := s.opts.CommitBatchBytes
	if limit < 0 {
		return 0, false
	}
	if limit == 0 {
		limit = int64(s.popts.MemTableSize / 4)
	}
	var n int64
	for _, b := range bufs {
		if len(b.spills) > 0 {
			return 0, false
		}
		n += b.bytes
	}
	return n, n < limit
}

// batchRetained is the largest batch buffer a closed batch keeps for the
// next commit to reuse (Pebble's batch pool; its default keeps 1 MB): a
// load's commits of 20,000 rows build batches of 3 to 5 MB.
const batchRetained = 8 << 20

// batchSink writes a checkpoint into one Pebble batch and summarises its
// keys for the physical statistics as the collector would an SST's.
type batchSink struct {
	b   *pebble.Batch
	sum sstsummary.BatchSummary
	seq uint64 // the batch's first sequence number, once committed
}

func (s *batchSink) set(key, value []byte) error {
	if err := s.b.Set(key, value, nil); err != nil {
		return errors.Wrap(err, "lsmstats: add to the checkpoint's batch")
	}
	s.sum.Add(key, pebble.InternalKeyKindSet, len(value))
	return nil
}

func (s *batchSink) addMeta(e livebuckets.MetaEntry) error {
	if !e.Delete {
		return s.set(e.Key, e.Value)
	}
	if err := s.b.Delete(e.Key, nil); err != nil {
		return errors.Wrap(err, "lsmstats: add to the checkpoint's batch")
	}
	s.sum.Add(e.Key, pebble.InternalKeyKindDelete, 0)
	return nil
}

func (s *batchSink) abort() { _ = s.b.Close() }

// commit commits the batch with a WAL sync and releases it.
func (s *batchSink) commit(epoch uint64) error {
	defer s.abort()
	if err := s.sum.Err(); err != nil {
		return errors.NewAssertionErrorWithWrappedErrf(err, "checkpoint of epoch %d: a key the collector cannot classify", epoch)
	}
	if err := s.b.Commit(pebble.Sync); err != nil {
		return errors.Wrapf(err, "lsmstats: commit the checkpoint of epoch %d", epoch)
	}
	// Zero for a batch that Pebble committed as a large batch: it keeps
	// neither the batch's contents nor its sequence number.
	s.seq = uint64(s.b.SeqNum())
	return nil
}

// waitForL0 is the store's write stall: ingestion bypasses Pebble's own, so
// Commit and GC wait while L0 is too deep for compactions to keep up.
// Options.L0StallLimit bounds one wait; Options.L0IdleLimit ends it early
// when no compaction is running or finishing, and a compaction that fails
// during the wait ends it at once. After a wait gave up, later commits do
// not wait until a compaction succeeds again. Callers hold ingestMu, which
// guards s.l0.
func (s *Store) waitForL0() {
	limit := s.opts.L0StopSublevels
	if limit < 0 || s.popts.DisableAutomaticCompactions {
		return // nothing would drain L0 while we wait
	}
	m := s.db.Metrics()
	if int(m.Levels[0].Sublevels) < limit {
		s.l0.gaveUp = false
		return
	}
	s.metrics.stalls.Add(1)
	// succeeded counts the compactions that finished and installed their
	// output: Pebble's Count also counts failed and cancelled ones.
	succeeded := func(m *pebble.Metrics) int64 {
		return m.Compact.Count - m.Compact.FailedCount - m.Compact.CancelledCount
	}
	if s.l0.gaveUp && succeeded(m) == s.l0.compactions {
		// The last wait gave up and no compaction has succeeded since
		// (failed retries do not count): waiting again would only cost
		// another L0IdleLimit.
		s.metrics.stallsAbandoned.Add(1)
		return
	}
	start, failed, done := time.Now(), m.Compact.FailedCount, succeeded(m)
	lastProgress := start
	for d := time.Millisecond; ; d = min(2*d, 50*time.Millisecond) {
		time.Sleep(d)
		m = s.db.Metrics()
		if int(m.Levels[0].Sublevels) < limit {
			s.l0.gaveUp = false
			break
		}
		now := time.Now()
		if n := succeeded(m); n > done || m.Compact.NumInProgress > 0 {
			done, lastProgress = n, now
		}
		why := ""
		switch {
		case m.Compact.FailedCount > failed:
			why = "compactions are failing"
		case now.Sub(lastProgress) > s.opts.L0IdleLimit:
			why = fmt.Sprintf("no compaction ran for %s", s.opts.L0IdleLimit)
		case now.Sub(start) > s.opts.L0StallLimit:
			why = fmt.Sprintf("still after %s (Options.L0StallLimit)", s.opts.L0StallLimit)
		}
		if why != "" {
			s.l0.gaveUp, s.l0.compactions = true, succeeded(m)
			s.metrics.stallsAbandoned.Add(1)
			s.logf("lsmstats: L0 has %d sublevels (limit %d) and %s; committing anyway", m.Levels[0].Sublevels, limit, why)
			break
		}
	}
	s.metrics.stallNanos.Add(int64(time.Since(start)))
}

// ---- merge sources --------------------------------------------------------

type source interface {
	valid() bool
	key() []byte
	row() []byte
	delta(pkLen int) stats.LiveCounts
	next()
	error() error
	close()
}

type sourceHeap []source

func (h sourceHeap) Len() int           { return len(h) }
func (h sourceHeap) Less(i, j int) bool { return bytes.Compare(h[i].key(), h[j].key()) < 0 }
func (h sourceHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *sourceHeap) Push(x any)        { *h = append(*h, x.(source)) }
func (h *sourceHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// memSource iterates an in-memory piece in key order.
type memSource struct {
	entries []*entry
	version keys.Version
	i       int
	buf     []byte
}

func newMemSource(b *epochBuf) *memSource {
	m := &memSource{entries: b.sortedEntries(), version: keys.MakeVersion(b.epoch, b.offset)}
	m.build()
	return m
}

func (m *memSource) build() {
	if m.i < len(m.entries) {
		e := m.entries[m.i]
		kind := keys.KindDelete
		if e.put {
			kind = keys.KindPut
		}
		m.buf = keys.AppendSuffix(append(m.buf[:0], e.prefix...), m.version, kind)
	}
}

func (m *memSource) valid() bool { return m.i < len(m.entries) }
func (m *memSource) key() []byte { return m.buf }
func (m *memSource) row() []byte { return m.entries[m.i].value }
func (m *memSource) delta(int) stats.LiveCounts {
	return m.entries[m.i].delta()
}
func (m *memSource) next()        { m.i++; m.build() }
func (m *memSource) error() error { return nil }
func (m *memSource) close()       {}

// spillSource iterates a staged piece.
type spillSource struct {
	f     *spillFile
	it    sstable.Iterator
	k     []byte
	v     []byte
	prior bool
	pb    int64
	err   error
}

func newSpillSource(f *spillFile) (*spillSource, error) {
	it, err := f.iter()
	if err != nil {
		return nil, errors.Wrapf(err, "lsmstats: read spill %s", f.path)
	}
	s := &spillSource{f: f, it: it}
	s.step(true)
	return s, nil
}

// step moves to the first or next entry and loads it.
func (s *spillSource) step(first bool) {
	move := s.it.Next
	if first {
		move = s.it.First
	}
	kv := move()
	s.k = nil
	if kv == nil {
		s.err = s.it.Error()
		return
	}
	v, _, err := kv.Value(nil)
	if err == nil {
		s.prior, s.pb, s.v, err = decodeSpillValue(v)
	}
	if err != nil {
		s.err = errors.Wrapf(err, "lsmstats: read spill %s", s.f.path)
		return
	}
	s.k = kv.K.UserKey
}

func (s *spillSource) valid() bool  { return s.k != nil }
func (s *spillSource) key() []byte  { return s.k }
func (s *spillSource) row() []byte  { return s.v }
func (s *spillSource) next()        { s.step(false) }
func (s *spillSource) error() error { return s.err }
func (s *spillSource) close() {
	if s.it != nil {
		_ = s.it.Close()
		s.it = nil
	}
}
func (s *spillSource) delta(pkLen int) stats.LiveCounts {
	return liveDelta(s.k[len(s.k)-2] == keys.KindPut, pkLen+len(s.v), s.prior, s.pb)
}
