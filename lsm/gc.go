package lsm

// MVCC garbage collection below the safe epoch.
//
// # What a pass removes
//
// Let S be the safe epoch of the pass: the smallest of the committed epoch,
// every pinned epoch and the caller's bound. Readers at an epoch e >= S see,
// for each pk, its newest version with epoch <= e. For one MVCC prefix, with
// its versions newest first, let h be the newest version with epoch <= S
// (the head at S):
//
//   - every version above S is kept: readers above S may see it;
//   - every version below h is removed: at any e >= S, h or a version above
//     S shadows it;
//   - h itself is kept if it is a put; if it is an MVCC delete it is removed
//     too, in the same ingestion as everything below it: a reader at e >= S
//     that would have stopped at h now finds no version at or below e, which
//     reads as "absent", exactly what h said. Removing h while an older put
//     survived would resurrect that put, so a batch never splits a prefix.
//
// So no row visible at any epoch >= S changes, and readers below S are
// refused: the pass raises the store's garbage-collection watermark to S.
//
// # How versions are removed
//
// Pebble has no compaction filter. Every version key is written exactly once
// (epochs and spill offsets are never reused, see the epoch high-water mark),
// so a Pebble SINGLEDEL is provably safe: it meets exactly one SET, and
// compaction drops both. A pass reads the range with a Pebble iterator and
// collects the keys to remove; every BatchSize of them (at a prefix boundary)
// it writes them as SINGLEDELs into SSTs, followed by the metadata key
// gc_epoch = max(watermark, S), and ingests them in one Ingest call under
// ingestMu: one MANIFEST edit, so after a crash either the whole batch and
// its watermark are there or none of it. The in-memory watermark is raised
// only after the ingestion succeeded; during the pass, pins below S are
// refused (Store.mu.gcPending) so that no reader can start below it.
//
// The SSTs carry the stats collector, which counts the SINGLEDELs as Pebble
// tombstones of their (table, vnode), apart from MVCC entries; the tracker
// is refreshed after each ingestion. Physical entries drop when compaction
// meets the SINGLEDEL with its SET (CompactRange compacts a range down to
// the bottom level); until then Entries - PebbleTombstones is what will be
// left. Live statistics do not change: no live row does.
//
// # Resuming, pacing, concurrency
//
// A pass examines the prefixes of [VnodeLo, VnodeHi) in key order; it stops
// after MaxVersions examined versions or on cancellation and returns the
// prefix to resume at, which a later pass (at any safe epoch) accepts as
// Start. A new iterator is made per batch, so a long, slowly paced pass does
// not pin old SSTs, and it sees the SINGLEDELs of its own earlier batches
// (deleted keys are gone): a rerun over a range never deletes a key twice.
// Versions examined are paced by an optional rate.Limiter. Passes and manual
// compactions are serialised (two passes deleting one key twice would break
// SINGLEDEL's contract); commits proceed concurrently (they only add versions
// above the committed epoch, hence above S). Close cancels a running pass
// and waits for it.

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/livebuckets"
	"github.com/lsmstats/lsmstats/keys"
	"golang.org/x/time/rate"
)

// defaultGCBatchSize is the number of version deletions per ingestion when
// GCRequest.BatchSize is zero.
const defaultGCBatchSize = 16384

// limiterChunk is the number of examined versions accounted to the limiter
// at once.
const limiterChunk = 256

// GCRequest describes one GC pass over a vnode range of one table. The zero
// value of each optional field means its default.
type GCRequest struct {
	// Table is the table to collect.
	Table uint32
	// VnodeLo and VnodeHi bound the vnodes [VnodeLo, VnodeHi); VnodeHi 0
	// means the table's vnode count.
	VnodeLo, VnodeHi int
	// Start resumes an earlier pass: its GCResult.Resume, a key inside the
	// range. nil starts at VnodeLo.
	Start []byte
	// SafeEpoch caps the pass's safe epoch; 0 means the store's safe epoch
	// (Store.SafeEpoch) when the pass starts. A larger value than the
	// store's is lowered to it.
	SafeEpoch uint64
	// Limiter paces the pass: each version examined takes one token. nil
	// means no pacing.
	Limiter *rate.Limiter
	// BatchSize is the number of version deletions per ingestion (a batch
	// never splits a prefix, so it may hold more); 0 means 16384.
	BatchSize int
	// MaxVersions stops the pass at the first prefix boundary after it
	// examined this many versions; 0 means no limit. GCResult.Resume then
	// says where to continue.
	MaxVersions int64
}

// GCResult reports one GC pass.
type GCResult struct {
	// SafeEpoch is the epoch the pass collected at.
	SafeEpoch uint64
	// Examined counts the versions read and Prefixes the distinct pks.
	Examined, Prefixes int64
	// Deleted counts the versions removed (SINGLEDELs ingested) and
	// DeletedBytes their key and value bytes.
	Deleted, DeletedBytes int64
	// Ingestions counts the batches ingested.
	Ingestions int
	// Resume is where a later pass continues (GCRequest.Start); nil when the
	// range is done.
	Resume []byte
}

// gcState is the store's GC plumbing.
type gcState struct {
	// mu serialises GC passes and manual compactions.
	mu sync.Mutex
	// closing is closed by Close: it cancels a pass or compaction.
	closing   chan struct{}
	closeOnce sync.Once

	passes, examined, deleted, deletedBytes, ingestions, compactions atomic.Int64
}

// stop cancels a running pass or compaction and waits for it.
func (g *gcState) stop() {
	g.closeOnce.Do(func() { close(g.closing) })
	g.mu.Lock()
	defer g.mu.Unlock()
}

// beginMaintenance takes the GC lock and returns a context that Close cancels, or
// ErrClosed.
func (s *Store) beginMaintenance(ctx context.Context) (context.Context, func(), error) {
	if err := s.checkWritable(); err != nil {
		return nil, nil, err
	}
	s.gc.mu.Lock()
	// Close sets closed before it waits for gc.mu: if it is not set now,
	// Close waits for this pass, and the DB stays open until we return.
	if err := s.checkWritable(); err != nil {
		s.gc.mu.Unlock()
		return nil, nil, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	// Close cancels the pass; the goroutine ends with the pass.
	go func() {
		select {
		case <-s.gc.closing:
			cancel(ErrClosed)
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		cancel(nil)
		s.gc.mu.Unlock()
	}, nil
}

// closedErr marks err with ErrClosed if Close cancelled ctx.
func closedErr(ctx context.Context, err error) error {
	if err != nil && errors.Is(context.Cause(ctx), ErrClosed) && !errors.Is(err, ErrClosed) {
		return errors.Mark(errors.Wrap(err, "lsmstats: store closed during GC or compaction"), ErrClosed)
	}
	return err
}

// GCEpoch returns the garbage-collection watermark: reads below it are
// refused.
func (s *Store) GCEpoch() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.gcEpoch
}

// gcRange validates a request's table and vnodes and returns the key bounds
// of the range.
func (s *Store) gcRange(table uint32, lo, hi int) (lower, upper []byte, err error) {
	def, err := s.table(table)
	if err != nil {
		return nil, nil, err
	}
	if hi == 0 {
		hi = def.VnodeCount
	}
	if lo < 0 || lo >= hi || hi > def.VnodeCount {
		return nil, nil, errors.Wrapf(ErrInvalidVnode, "vnode range [%d, %d) of table %d (vnode count %d)", lo, hi, table, def.VnodeCount)
	}
	lower = keys.AppendVnodeBound(nil, table, uint16(lo))
	_, upper = keys.VnodeSpan(table, uint16(hi-1))
	return lower, upper, nil
}

// GC removes the versions of one table's vnode range that no reader at or
// above the safe epoch can see (see the file comment), in batches that are
// each ingested atomically with the raised garbage-collection watermark. It
// returns what it did also on error; Resume is then where a retry should
// start. Cancelling ctx stops the pass between versions: the batch being
// collected is dropped, earlier batches stay.
func (s *Store) GC(ctx context.Context, req GCRequest) (GCResult, error) {
	var res GCResult
	lower, upper, err := s.gcRange(req.Table, req.VnodeLo, req.VnodeHi)
	if err != nil {
		return res, err
	}
	start := lower
	if req.Start != nil {
		if err := keys.Validate(req.Start); err != nil {
			return res, errors.Wrap(err, "lsmstats: GC start key")
		}
		if bytes.Compare(req.Start, lower) < 0 || bytes.Compare(req.Start, upper) >= 0 {
			return res, errors.Newf("lsmstats: GC start key %x is outside vnodes [%d, %d) of table %d",
				req.Start, req.VnodeLo, req.VnodeHi, req.Table)
		}
		start = req.Start
	}
	if req.BatchSize < 0 || req.MaxVersions < 0 {
		return res, errors.Newf("lsmstats: GC batch size %d and max versions %d must not be negative", req.BatchSize, req.MaxVersions)
	}
	batchSize := req.BatchSize
	if batchSize == 0 {
		batchSize = defaultGCBatchSize
	}
	ctx, done, err := s.beginMaintenance(ctx)
	if err != nil {
		return res, err
	}
	defer done()

	// Fix the safe epoch and refuse pins below it from now on.
	s.mu.Lock()
	safe := s.safeEpochLocked()
	if req.SafeEpoch != 0 {
		safe = min(safe, req.SafeEpoch)
	}
	s.mu.gcPending = safe
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.mu.gcPending = 0
		s.mu.Unlock()
	}()
	res.SafeEpoch = safe
	s.gc.passes.Add(1)

	sc := gcScanner{s: s, safe: safe, limiter: req.Limiter, batchSize: batchSize, maxVersions: req.MaxVersions, upper: upper}
	for start != nil {
		s.phase("gc-scanning")
		b, err := sc.collect(ctx, start)
		res.Examined += b.examined
		res.Prefixes += b.prefixes
		s.gc.examined.Add(b.examined)
		if err != nil {
			// The batch is dropped: resume at its first prefix.
			res.Resume = start
			return res, closedErr(ctx, err)
		}
		if len(b.dels) > 0 {
			if err := s.ingestGC(b.dels, b.bytes, safe); err != nil {
				res.Resume = start
				return res, err
			}
			res.Deleted += int64(len(b.dels))
			res.DeletedBytes += b.bytes
			res.Ingestions++
		}
		start = b.next
		if start != nil && sc.budgetSpent(res.Examined) {
			res.Resume = start
			return res, nil
		}
	}
	return res, nil
}

// gcScanner collects the deletions of one pass, batch by batch.
type gcScanner struct {
	s           *Store
	safe        uint64
	limiter     *rate.Limiter
	batchSize   int
	maxVersions int64
	upper       []byte
	// examined is the pass's total, for MaxVersions.
	examined int64
	// owed are examined versions not yet taken from the limiter.
	owed int
}

type gcBatch struct {
	dels               [][]byte
	bytes              int64
	examined, prefixes int64
	// next is the prefix to continue at; nil at the end of the range.
	next []byte
}

func (sc *gcScanner) budgetSpent(examined int64) bool {
	return sc.maxVersions > 0 && examined >= sc.maxVersions
}

// pace takes the owed tokens from the limiter.
func (sc *gcScanner) pace(ctx context.Context, force bool) error {
	if sc.limiter == nil || sc.limiter.Limit() == rate.Inf {
		sc.owed = 0
		return ctx.Err()
	}
	if sc.owed < limiterChunk && !force {
		return nil
	}
	burst := max(sc.limiter.Burst(), 1)
	for sc.owed > 0 {
		n := min(sc.owed, burst)
		if err := sc.limiter.WaitN(ctx, n); err != nil {
			return errors.Wrap(err, "lsmstats: GC pacing")
		}
		sc.owed -= n
	}
	return nil
}

// collect reads prefixes from start until the batch holds batchSize
// deletions, the pass's MaxVersions is reached, or the range ends; it stops
// only at prefix boundaries.
func (sc *gcScanner) collect(ctx context.Context, start []byte) (b gcBatch, err error) {
	it, err := sc.s.db.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: sc.upper})
	if err != nil {
		return b, err
	}
	defer func() { err = errors.CombineErrors(err, it.Close()) }()
	var prefix []byte
	seenHead := false
	for valid := it.First(); valid; valid = it.Next() {
		key := it.Key()
		k, derr := keys.Decode(key)
		if derr != nil {
			return b, errors.Wrapf(derr, "lsmstats: GC below %x", sc.upper)
		}
		p := key[:keys.Split(key)]
		if !bytes.Equal(p, prefix) {
			if len(b.dels) >= sc.batchSize || sc.budgetSpent(sc.examined) {
				b.next = append([]byte(nil), p...)
				return b, sc.pace(ctx, true)
			}
			prefix = append(prefix[:0], p...)
			seenHead = false
			b.prefixes++
		}
		b.examined++
		sc.examined++
		sc.owed++
		if err := sc.pace(ctx, false); err != nil {
			return b, err
		}
		switch {
		case k.Version.Epoch() > sc.safe:
			// Visible above the safe epoch: kept.
		case !seenHead:
			// The head at the safe epoch: a put stays, a delete goes with
			// everything below it (same batch: the prefix is not split).
			seenHead = true
			if k.Kind == keys.KindDelete {
				b.add(key, it)
			}
		default:
			b.add(key, it)
		}
	}
	if err := it.Error(); err != nil {
		return b, err
	}
	return b, sc.pace(ctx, true)
}

func (b *gcBatch) add(key []byte, it *pebble.Iterator) {
	b.dels = append(b.dels, append([]byte(nil), key...))
	lv := it.LazyValue()
	b.bytes += int64(len(key) + lv.Len())
}

// ingestGC writes one batch of SINGLEDELs and the raised watermark and
// ingests them in one Ingest call.
func (s *Store) ingestGC(dels [][]byte, delBytes int64, safe uint64) error {
	s.ingestMu.Lock()
	defer s.ingestMu.Unlock()
	if err := s.checkWritable(); err != nil {
		return err
	}
	s.mu.Lock()
	wm := max(s.mu.gcEpoch, safe)
	s.mu.Unlock()
	out := s.newOutput()
	for _, k := range dels {
		if err := out.add(k, pebble.InternalKeyKindSingleDelete, nil); err != nil {
			out.abort()
			return err
		}
	}
	if err := out.addMeta(livebuckets.MetaEntry{Key: keys.MetaKey([]byte(gcEpochName)), Value: be64(wm)}); err != nil {
		out.abort()
		return err
	}
	s.waitForL0()
	s.phase("gc-ingesting")
	if err := s.ingest(out, "GC batch at safe epoch %d", safe); err != nil {
		return err
	}
	s.statsMu.Lock()
	if err := s.tracker.RefreshSignalled(); err != nil {
		s.logf("lsmstats: refresh statistics after GC: %v", err)
	}
	s.mu.Lock()
	s.mu.gcEpoch = wm
	s.mu.Unlock()
	s.statsMu.Unlock()
	s.gc.deleted.Add(int64(len(dels)))
	s.gc.deletedBytes.Add(delBytes)
	s.gc.ingestions.Add(1)
	return nil
}

// CompactRange compacts the keys of vnodes [vnodeLo, vnodeHi) of a table
// (vnodeHi 0: the table's vnode count) down to Pebble's bottom level with a
// manual compaction, so that GC's SINGLEDELs meet their SETs and both are
// dropped, then refreshes the physical statistics. Pebble compacts whole
// SSTs, so keys next to the range may be compacted too. Close cancels it.
func (s *Store) CompactRange(ctx context.Context, table uint32, vnodeLo, vnodeHi int) error {
	lower, upper, err := s.gcRange(table, vnodeLo, vnodeHi)
	if err != nil {
		return err
	}
	if vnodeHi == 0 {
		def, err := s.table(table)
		if err != nil {
			return err
		}
		vnodeHi = def.VnodeCount // for the error message
	}
	ctx, done, err := s.beginMaintenance(ctx)
	if err != nil {
		return err
	}
	defer done()
	s.phase("gc-compacting")
	if err := s.flushUnflushed(); err != nil {
		return errors.Wrapf(err, "lsmstats: compact vnodes [%d, %d) of table %d", vnodeLo, vnodeHi, table)
	}
	// Not parallelized. Pebble (v2.1.7) splits a parallel manual
	// compaction into one per in-use key range, and when one of them fails
	// it drops the others from its queue, including one it may have picked
	// and cached while its compaction slots were full; running that cached
	// pick later panics in Pebble's goroutine ("did not find manual
	// compaction with id"). SSTs cut at vnode partitions make many such
	// ranges. One compaction per level has no sibling to drop. That pick
	// cached and then cancelled (by ctx) is dropped by the store's
	// compaction scheduler (scheduler.go).
	if err := s.db.Compact(ctx, lower, upper, false); err != nil {
		return closedErr(ctx, errors.Wrapf(err, "lsmstats: compact vnodes [%d, %d) of table %d", vnodeLo, vnodeHi, table))
	}
	s.gc.compactions.Add(1)
	// Pooled iterators pin the compacted inputs: release them.
	s.iters.close()
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	// The compactions' events were logged before Compact returned.
	return errors.Wrap(s.tracker.RefreshSignalled(), "lsmstats: refresh statistics after compaction")
}
