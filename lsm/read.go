package lsm

import (
	"bytes"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/livebuckets"
	"github.com/lsmstats/lsmstats/keys"
)

// Reads happen at an epoch: the newest version of each pk at or below the
// epoch wins, and a delete version hides the pk. Reads from the Store are at
// the committed epoch when the read starts (a Pebble iterator is a consistent
// view, so a read never sees half of a later checkpoint or of a later GC).
// Reads at older epochs go through a Snapshot, which pins its epoch: garbage
// collection keeps every version a pinned epoch can see. The smallest pinned
// epoch (or the committed epoch, without pins) is the safe epoch.

// Snapshot is a pinned read epoch. Safe for concurrent use; Close releases
// the pin.
type Snapshot struct {
	s     *Store
	epoch uint64
	once  sync.Once
}

// Snapshot pins the committed epoch.
func (s *Store) Snapshot() (*Snapshot, error) {
	// The committed epoch is read under s.mu (in pin): a GC pass fixes its
	// safe epoch (at most the committed epoch) under it too, so this pin is
	// never below the pass's.
	return s.pin(math.MaxUint64)
}

// Pin pins an epoch between the garbage-collection watermark and the
// committed epoch.
func (s *Store) Pin(epoch uint64) (*Snapshot, error) {
	if epoch == math.MaxUint64 {
		return nil, errors.Wrapf(ErrEpochUnavailable, "epoch %d is above the committed epoch %d", epoch, s.committed.Load())
	}
	return s.pin(epoch)
}

// pin pins epoch; MaxUint64 means the committed epoch.
func (s *Store) pin(epoch uint64) (*Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil, ErrClosed
	}
	if epoch == math.MaxUint64 {
		epoch = s.committed.Load()
	}
	if err := s.checkEpochLocked(epoch); err != nil {
		return nil, err
	}
	s.mu.pins[epoch]++
	return &Snapshot{s: s, epoch: epoch}, nil
}

func (s *Store) checkEpochLocked(epoch uint64) error {
	if c := s.committed.Load(); epoch > c {
		return errors.Wrapf(ErrEpochUnavailable, "epoch %d is above the committed epoch %d", epoch, c)
	}
	if wm := max(s.mu.gcEpoch, s.mu.gcPending); epoch < wm {
		return errors.Wrapf(ErrEpochUnavailable, "epoch %d is below the garbage-collection watermark %d", epoch, wm)
	}
	return nil
}

// Epoch returns the pinned epoch.
func (sn *Snapshot) Epoch() uint64 { return sn.epoch }

// Close releases the pin.
func (sn *Snapshot) Close() {
	sn.once.Do(func() {
		sn.s.mu.Lock()
		defer sn.s.mu.Unlock()
		if sn.s.mu.pins[sn.epoch]--; sn.s.mu.pins[sn.epoch] == 0 {
			delete(sn.s.mu.pins, sn.epoch)
		}
	})
}

// SafeEpoch is the smallest epoch a reader may still read: the smallest
// pinned epoch, or the committed epoch. Garbage collection must keep every
// version visible at it or above.
func (s *Store) SafeEpoch() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.safeEpochLocked()
}

func (s *Store) safeEpochLocked() uint64 {
	safe := s.committed.Load()
	for e := range s.mu.pins {
		safe = min(safe, e)
	}
	return safe
}

// Get reads a row at the committed epoch.
func (s *Store) Get(table uint32, vnode uint16, pk []byte) ([]byte, bool, error) {
	// MaxUint64: the committed epoch paired with the iterator's view (see
	// iterPool.acquire), not one loaded before it, which a GC at a newer
	// committed epoch could have collected below.
	return s.get(table, vnode, pk, math.MaxUint64)
}

// Get reads a row at the snapshot's epoch.
func (sn *Snapshot) Get(table uint32, vnode uint16, pk []byte) ([]byte, bool, error) {
	return sn.s.get(table, vnode, pk, sn.epoch)
}

// NewIter iterates the live rows of one vnode with pk in [lo, hi) (nil:
// unbounded) at the committed epoch, in pk order.
func (s *Store) NewIter(table uint32, vnode uint16, lo, hi []byte) (*Iter, error) {
	return s.newIter(table, vnode, lo, hi, math.MaxUint64)
}

// NewIter iterates at the snapshot's epoch.
func (sn *Snapshot) NewIter(table uint32, vnode uint16, lo, hi []byte) (*Iter, error) {
	return sn.s.newIter(table, vnode, lo, hi, sn.epoch)
}

func (s *Store) get(table uint32, vnode uint16, pk []byte, epoch uint64) ([]byte, bool, error) {
	if err := s.checkOpen(); err != nil {
		return nil, false, err
	}
	def, err := s.table(table)
	if err != nil {
		return nil, false, err
	}
	if err := def.checkRow(vnode, pk); err != nil {
		return nil, false, err
	}
	// getPrefix returns a copy: the row is the caller's.
	return s.getPrefix(keys.AppendPrefix(nil, table, vnode, pk), epoch)
}

// getCommitted reads a prefix at the committed epoch (a checked writer's
// view below its buffers).
func (s *Store) getCommitted(prefix []byte) ([]byte, bool, error) {
	return s.getPrefix(prefix, math.MaxUint64)
}

// getPrefix finds the newest version of prefix at or below epoch; MaxUint64
// means the committed epoch. It uses a pooled Pebble iterator: creating one
// costs about as much as the seek itself.
func (s *Store) getPrefix(prefix []byte, epoch uint64) ([]byte, bool, error) {
	it, err := s.iters.acquire(s)
	if err != nil {
		return nil, false, err
	}
	defer s.iters.release(it)
	if epoch == math.MaxUint64 {
		epoch = it.epoch
	}
	it.seek = keys.AppendSeekKey(it.seek[:0], prefix, epoch)
	if !it.SeekPrefixGE(it.seek) {
		if err := it.Error(); err != nil {
			return nil, false, markPebble(errors.Wrapf(err, "lsmstats: read %v", keys.Comparer.FormatKey(prefix)))
		}
		return nil, false, nil
	}
	k, err := keys.Decode(it.Key())
	if err != nil {
		return nil, false, err
	}
	if k.Kind != keys.KindPut {
		return nil, false, nil
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return nil, false, markPebble(errors.Wrapf(err, "lsmstats: read %v", keys.Comparer.FormatKey(prefix)))
	}
	return slices.Clone(v), true, nil
}

// published pairs the committed epoch with the generation of the ingestion
// that committed it: an iterator created at that generation or later sees
// the epoch's data.
type published struct {
	epoch, gen uint64
}

// iterPool keeps a few Pebble iterators for point reads. An iterator is a
// snapshot of the LSM when it was created, so it is reused only while no
// commit has happened since (same generation).
type iterPool struct {
	mu   sync.Mutex
	free []*pooledIter
	// open are the Iters handed out and not closed yet. Pebble's Close
	// panics on iterators that still hold SSTs, so the store's Close
	// releases them first (closeOpen); they then stop with ErrClosed.
	open map[*Iter]struct{}
}

func (p *iterPool) track(i *Iter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.open == nil {
		p.open = map[*Iter]struct{}{}
	}
	p.open[i] = struct{}{}
}

// untrack reports whether i was still open (not released by closeOpen).
func (p *iterPool) untrack(i *Iter) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.open[i]
	delete(p.open, i)
	return ok
}

// closeOpen releases the Pebble iterator of every Iter left open; the
// store is closing (and has set its closed flag, which the Iters check
// before touching their Pebble iterator).
func (p *iterPool) closeOpen() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.open {
		_ = i.it.Close()
	}
	p.open = nil
}

type pooledIter struct {
	*pebble.Iterator
	gen   uint64
	epoch uint64 // the committed epoch it can read
	seek  []byte // the last seek key
}

const maxPooledIters = 8

func (p *iterPool) acquire(s *Store) (*pooledIter, error) {
	pub := s.pub.Load()
	p.mu.Lock()
	for len(p.free) > 0 {
		it := p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
		if it.gen >= pub.gen {
			p.mu.Unlock()
			return it, nil
		}
		_ = it.Close()
	}
	p.mu.Unlock()
	it, pub, err := s.newPairedIter(nil)
	if err != nil {
		return nil, err
	}
	return &pooledIter{Iterator: it, gen: pub.gen, epoch: pub.epoch}, nil
}

// newPairedIter returns a Pebble iterator and the committed epoch it may
// read at. The publication is read before the iterator is created, so the
// iterator sees at least that checkpoint's ingestion; and it is read again
// after: if a checkpoint was published in between, a GC pass at that newer
// epoch may have landed too and collected versions below it, so the
// iterator is created again.
func (s *Store) newPairedIter(o *pebble.IterOptions) (*pebble.Iterator, *published, error) {
	for {
		pub := s.pub.Load()
		it, err := s.db.NewIter(o)
		if err != nil {
			return nil, nil, err
		}
		if s.pub.Load() == pub {
			return it, pub, nil
		}
		_ = it.Close()
	}
}

func (p *iterPool) release(it *pooledIter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) < maxPooledIters {
		p.free = append(p.free, it)
		return
	}
	_ = it.Close()
}

func (p *iterPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, it := range p.free {
		_ = it.Close()
	}
	p.free = nil
}

// Iter iterates live rows of one vnode in pk order. PK and Row are valid
// until the next positioning call. Not safe for concurrent use.
type Iter struct {
	s  *Store
	it *pebble.Iterator
	// closed is the store's: an iterator used after the store's Close
	// stops with ErrClosed instead of touching the closed Pebble DB.
	closed *atomic.Bool
	pool   *iterPool
	table  uint32
	vnode  uint16
	epoch  uint64
	lower  []byte

	pk, row []byte
	valid   bool
	err     error
	seek    []byte
}

func (s *Store) newIter(table uint32, vnode uint16, lo, hi []byte, epoch uint64) (*Iter, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	def, err := s.table(table)
	if err != nil {
		return nil, err
	}
	lower, upper, err := iterBounds(def, table, vnode, lo, hi)
	if err != nil {
		return nil, err
	}
	o := &pebble.IterOptions{LowerBound: lower, UpperBound: upper}
	var it *pebble.Iterator
	if epoch == math.MaxUint64 {
		// The committed epoch, paired with the iterator's view.
		var pub *published
		if it, pub, err = s.newPairedIter(o); err != nil {
			return nil, err
		}
		epoch = pub.epoch
	} else if it, err = s.db.NewIter(o); err != nil {
		return nil, err
	}
	i := &Iter{s: s, it: it, closed: &s.closed, pool: &s.iters, table: table, vnode: vnode, epoch: epoch, lower: lower}
	s.iters.track(i)
	return i, nil
}

// iterBounds returns the Pebble bounds of the rows of a vnode with pk in
// [lo, hi) (nil: unbounded).
func iterBounds(def *TableDef, table uint32, vnode uint16, lo, hi []byte) (lower, upper []byte, err error) {
	if int(vnode) >= def.VnodeCount {
		return nil, nil, errors.Wrapf(ErrInvalidVnode, "vnode %d of table %d (vnode count %d)", vnode, table, def.VnodeCount)
	}
	for _, b := range [][]byte{lo, hi} {
		if b != nil {
			if err := def.PK.Validate(b); err != nil {
				return nil, nil, errors.Wrapf(err, "iterator bound of table %d", table)
			}
		}
	}
	lower, upper = keys.VnodeSpan(table, vnode)
	if lo != nil {
		lower = keys.AppendPrefix(nil, table, vnode, lo)
	}
	if hi != nil {
		upper = keys.AppendPrefix(nil, table, vnode, hi)
	}
	return lower, upper, nil
}

// Reset makes the iterator one over the live rows of another vnode of its
// table with pk in [lo, hi) (nil: unbounded), at the same epoch and with the
// same view of the store, and unpositions it: cheaper than closing it and
// creating another, since Pebble keeps the files and blocks it has loaded.
// A reader that visits many vnodes in turn uses one iterator this way.
func (i *Iter) Reset(vnode uint16, lo, hi []byte) error {
	return i.rebind(i.table, vnode, lo, hi)
}

func (i *Iter) rebind(table uint32, vnode uint16, lo, hi []byte) error {
	if err := i.s.checkOpen(); err != nil {
		return err
	}
	def, err := i.s.table(table)
	if err != nil {
		return err
	}
	lower, upper, err := iterBounds(def, table, vnode, lo, hi)
	if err != nil {
		return err
	}
	i.table, i.vnode, i.lower = table, vnode, lower
	i.valid, i.err, i.pk, i.row = false, nil, nil, nil
	i.it.SetBounds(lower, upper)
	return nil
}

// First positions at the first live row.
func (i *Iter) First() bool {
	if i.storeClosed() {
		return false
	}
	i.it.First()
	return i.settle()
}

// storeClosed stops the iterator with ErrClosed once the store is closed.
func (i *Iter) storeClosed() bool {
	if !i.closed.Load() {
		return false
	}
	i.valid = false
	if i.err == nil {
		i.err = errors.Wrapf(ErrClosed, "iterator over vnode %d of table %d used after Close", i.vnode, i.table)
	}
	return true
}

// SeekGE positions at the first live row with pk >= pk.
func (i *Iter) SeekGE(pk []byte) bool {
	if i.storeClosed() {
		return false
	}
	i.seek = keys.AppendPrefix(i.seek[:0], i.table, i.vnode, pk)
	if bytes.Compare(i.seek, i.lower) < 0 {
		i.seek = append(i.seek[:0], i.lower...)
	}
	i.it.SeekGE(i.seek)
	return i.settle()
}

// Next moves to the next live row.
func (i *Iter) Next() bool {
	if !i.valid || i.storeClosed() {
		return false
	}
	i.it.NextPrefix()
	return i.settle()
}

// settle moves forward from the current Pebble position to the first prefix
// whose newest version at or below the epoch is a put.
func (i *Iter) settle() bool {
	i.valid = false
	for i.it.Valid() {
		key := i.it.Key()
		k, err := keys.Decode(key)
		if err != nil || k.Table != i.table || k.Vnode != i.vnode {
			i.err = errors.Wrapf(keys.ErrMalformedKey, "reading vnode %d of table %d: key %x has none of the key shapes", i.vnode, i.table, key)
			return false
		}
		if k.Version.Epoch() > i.epoch {
			prefix := key[:keys.Split(key)]
			i.seek = keys.AppendSeekKey(i.seek[:0], prefix, i.epoch)
			// Re-evaluate: either the newest visible version of this prefix,
			// or (none visible) the next prefix.
			i.it.SeekGE(i.seek)
			continue
		}
		if k.Kind != keys.KindPut {
			i.it.NextPrefix()
			continue
		}
		row, err := i.it.ValueAndErr()
		if err != nil {
			i.err = markPebble(errors.Wrapf(err, "lsmstats: read vnode %d of table %d", i.vnode, i.table))
			return false
		}
		i.pk, i.row, i.valid = k.PK, row, true
		return true
	}
	if err := i.it.Error(); err != nil && i.err == nil {
		i.err = markPebble(errors.Wrapf(err, "lsmstats: read vnode %d of table %d", i.vnode, i.table))
	}
	return false
}

// Valid reports whether the iterator is at a row.
func (i *Iter) Valid() bool { return i.valid }

// PK returns the current row's pk.
func (i *Iter) PK() []byte { return i.pk }

// Row returns the current row.
func (i *Iter) Row() []byte { return i.row }

// Error returns the error that stopped the iteration, if any. A key of none
// of the shapes in the vnode's range stops it with keys.ErrMalformedKey.
func (i *Iter) Error() error { return i.err }

// Close releases the iterator. After the store's Close (which released it)
// it only returns the error that stopped the iteration, if any.
func (i *Iter) Close() error {
	var err error
	if i.pool.untrack(i) {
		err = i.it.Close()
	}
	if i.err != nil {
		return i.err
	}
	return err
}

// rescanBuckets scans the live-statistics buckets that grew too big, to
// split them, or whose calibration is stale, at the committed epoch (see
// livebuckets.Rescan), and publishes them together. A backfill's commit asks for
// hundreds of small scans, and creating a Pebble iterator costs more than
// scanning one bucket: one iterator, re-bounded per vnode, serves them all.
// A scan that fails leaves its bucket as it was: its counts stay exact,
// only its estimates are less so until a later commit asks again.
func (s *Store) rescanBuckets(reqs []livebuckets.Rescan) {
	epoch := s.committed.Load()
	var done []livebuckets.ScannedBucket
	var it *Iter
	defer func() {
		if it != nil {
			_ = it.Close()
		}
	}()
	for len(reqs) > 0 {
		n := 1 // reqs is in (table, vnode, pk) order
		for n < len(reqs) && reqs[n].Table == reqs[0].Table && reqs[n].Vnode == reqs[0].Vnode {
			n++
		}
		var err error
		if it, err = s.boundIter(it, reqs[0].Table, reqs[0].Vnode, reqs[0].Lower, reqs[n-1].Upper, epoch); err == nil {
			done, err = s.scanBuckets(it, reqs[:n], done)
		}
		if err != nil {
			s.logf("lsmstats: rescan live buckets of table %d vnode %d: %v", reqs[0].Table, reqs[0].Vnode, err)
			if it != nil {
				_ = it.Close()
				it = nil
			}
		}
		reqs = reqs[n:]
	}
	if len(done) == 0 {
		return
	}
	s.mu.Lock()
	err := s.mu.live.ApplyRescans(done)
	s.mu.Unlock()
	if err != nil {
		s.logf("lsmstats: rescan live buckets: %v", err)
	}
}

// boundIter returns an iterator over [lo, hi) of a vnode at epoch: it (if
// not nil) with new bounds, or a new one.
func (s *Store) boundIter(it *Iter, table uint32, vnode uint16, lo, hi []byte, epoch uint64) (*Iter, error) {
	if it == nil || it.epoch != epoch {
		if it != nil {
			_ = it.Close()
		}
		return s.newIter(table, vnode, lo, hi, epoch)
	}
	return it, it.rebind(table, vnode, lo, hi)
}

// scanBuckets scans the rows of the buckets of reqs, all of one vnode and
// in pk order, with it (just bounded to them: its lower bound is the first
// bucket's), and appends them to done.
//
// Each positioning of a Pebble iterator seeks in every level and L0
// sublevel, which costs more than the few rows of a bucket (the rescans of
// a backfill's commit are hundreds of small buckets, each the last of its
// vnode): the first bucket starts at the iterator's lower bound (First),
// and a bucket that starts where the previous one ended (adjacent buckets
// of a split) continues from where that scan stopped, at the first row at
// or after its lower bound. Only a gap between two buckets costs a seek.
func (s *Store) scanBuckets(it *Iter, reqs []livebuckets.Rescan, done []livebuckets.ScannedBucket) ([]livebuckets.ScannedBucket, error) {
	for k, r := range reqs {
		sc := livebuckets.NewBucketScan(r)
		var n int64
		var valid bool
		switch {
		case k == 0:
			valid = it.First()
		case reqs[k-1].Upper != nil && bytes.Equal(reqs[k-1].Upper, r.Lower):
			valid = it.Valid() // at the first row at or after r.Lower, or exhausted
		case r.Lower == nil:
			valid = it.First()
		default:
			valid = it.SeekGE(r.Lower)
		}
		for ; valid && (r.Upper == nil || bytes.Compare(it.PK(), r.Upper) < 0); valid = it.Next() {
			sc.Add(it.PK(), int64(len(it.PK())+len(it.Row())))
			n++
		}
		if err := it.Error(); err != nil {
			return done, err
		}
		s.metrics.bucketScans.Add(1)
		s.metrics.bucketScanRows.Add(n)
		done = append(done, sc.Finish())
	}
	return done, nil
}
