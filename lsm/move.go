package lsm

// Moving a vnode range of a table from one store to another on the same
// object store, without copying the rows of its shared SSTs.
//
// # What moves, and how
//
// Everything a store keeps of a vnode: its row versions, every epoch the
// source keeps (from its GC watermark to its committed epoch), and its
// live statistics (the buckets, with their bounds, anchors and
// calibrations). Nothing else is per vnode: the physical statistics are
// derived from the SSTs, the catalog entry is the table's, and a
// backfill's state is rows of a table of its own (its state table is
// vnode-keyed: a job moves it with the same vnodes).
//
// The versions move with Pebble's shared storage (objstore/pebble_move_test.go
// checks each assumption on a real S3 server):
//
//  1. Export, on the source. Pebble's ScanInternal over the range hands
//     the SSTs of its shared levels (L5 and L6, in the object store) that
//     hold keys of the range as SharedSSTMetas, cut to the range, and every
//     other version of the range (Pebble's memtables and L0–L4, whether
//     their SSTs are in the object store or not) as a point, which the
//     export copies into SSTs in the source's staging directory. The live
//     statistics of the range are taken as their bucket rows
//     (livebuckets.VnodeRows). Pebble's ScanInternal cannot read a
//     SINGLEDEL above the shared levels (it panics), and GC writes them:
//     a range with any there is compacted to the bottom level first
//     (MoveStats.Compacted).
//  2. Import, on the destination, in one IngestAndExcise: the shared SSTs
//     by reference (Pebble makes each a virtual SST of the same level,
//     restricted to the range, and puts a reference marker beside its
//     object), the copied versions in new SSTs, and, in an SST outside the
//     range, the range's live statistics folded into its bucket rows, and
//     the raised GC watermark. One MANIFEST edit: after a crash the
//     destination holds all of it or none. Whatever the destination held
//     in the range before is excised.
//  3. Drop, on the source, in one IngestAndExcise too: the range excised
//     (the SSTs wholly inside it leave; those across its ends become
//     virtual SSTs without it) with its live statistics folded into empty
//     vnodes.
//
// An object stays in the object store as long as a store references it:
// the source's compactions and deletions drop its own marker only.
//
// # Across processes
//
// The export is a value (VnodeExport, vnodeexport.go) with a wire form
// (MarshalBinary, DecodeVnodeExport; docs/format.md, "Vnode export"), so
// the source and the destination may be two processes, each with its own
// store on the shared bucket and prefix (a node each): the source takes
// the export (Store.ExportVnodes) and sends its bytes — the table's
// definition, the range, the epochs, the object store's bucket and prefix
// and the source's creator id, each shared SST's metadata with its
// backing (the bytes Pebble's provider encodes for another instance to
// attach it), the copied SSTs' bytes, the live statistics' rows, and a
// checksum; the destination decodes and imports them
// (Store.ImportVnodes), after checking that its own object store holds
// the same bucket and prefix and the source's identity marker. Who holds
// what: Pebble's attach on the destination writes the destination's
// reference marker beside each shared SST's object and then checks that
// the source's marker is still there; the source's export keeps that
// marker (its backing handles make the source's Pebble keep it, even when
// a compaction drops the SST) and the range frozen. So the source holds
// its export until the destination acknowledged the import, then drops
// the range under it (DropVnodes) and releases it (Release). Released too
// early, the source may have removed the object: the import then fails as
// corruption and changes nothing. MoveVnodes is the same three steps in
// one process.
//
// # Epochs
//
// A version keeps its key, so its epoch: the destination must not read
// above its own committed epoch what the source committed later, nor
// reuse an epoch the moved versions hold. So the destination's committed
// epoch must be at least the source's when the export was taken (the
// export's epoch): a cluster whose stores commit the same epochs (a
// global barrier, as RisingWave's meta injects) has them equal. Every
// moved version is then at or below the destination's committed epoch,
// and every epoch the destination writes later is above them. The
// destination's reads of the range at any epoch from the source's GC
// watermark to its own committed epoch see what the source's saw (the
// range does not change on the source between its last write and the
// export). Below the source's watermark the source collected versions, so
// the import raises the destination's GC watermark to the source's, if it
// is higher (refused while a reader of the destination pins an epoch
// below it): the watermark is a store's, not a vnode's.
//
// # Statistics
//
// The destination's physical statistics of the range come from its SSTs:
// a virtual SST's summary is rebuilt by a scan of its backing file within
// its bounds (ssttracker: exact, its keys read from the object store once),
// the new SSTs carry their payloads. The live statistics are the source's,
// bucket for bucket. The source's statistics of the range are zero once it
// dropped it: its SSTs across the range's ends are virtual SSTs without
// it, rescanned the same way. Pebble's own properties of a virtual SST are
// its backing file's scaled by size (GetScaledProperties), and on the
// destination a foreign SST's backing size is the virtual SST's, so
// Pebble counts every key of the backing file there: estimates, which
// the statistics of the store never use.
//
// # What a move does not do (yet)
//
//   - Survive a crash as a whole: each step is atomic, but a crash after
//     the import and before the drop leaves the range on both stores;
//     DropVnodes on the source ends the move. A caller that records its
//     moves (a coordinator) redoes the drop.
//   - Move a range that writers are writing: every writer owning a vnode
//     of the range must be closed and its sealed epochs committed (or
//     aborted) first. NewWriter refuses the range on the source until the
//     move ends and on the destination while it imports; a writer on the
//     destination may take it once the import is done. Reads of the range
//     on the source return no rows once it dropped it, at any epoch.
//   - Move between stores on different prefixes or buckets: Pebble names
//     a shared SST by locator, creator and file number only, and the
//     destination would look for it under its own prefix.
//   - Carry the export between processes: the caller sends its bytes (a
//     node protocol), and tells the source when the destination imported
//     them.
//   - Keep the source's reference markers of SSTs its compactions dropped
//     while an export held them from leaking: Pebble's provider skips
//     their removal then (objstorageprovider's sharedUnref, a TODO of
//     Pebble's), and a writable Open's sweep of orphaned objects removes
//     them.

import (
	"context"
	"fmt"
	"reflect"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/cockroachdb/pebble/v2/rangekey"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/sstable/block"
	"github.com/lsmstats/lsmstats"
	"github.com/lsmstats/lsmstats/internal/livebuckets"
	"github.com/lsmstats/lsmstats/internal/ssttracker"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/objstore"
)

// MoveStats reports a vnode move (Store.MoveVnodes): what the destination
// took by reference and what it copied. The zero value is a move of
// nothing.
type MoveStats struct {
	// SharedSSTs counts the source's SSTs in Pebble's shared levels (L5
	// and L6, in the object store) that hold versions of the range: the
	// destination took each by reference, as a virtual SST restricted to
	// the range that reads the source's object. SharedBytes are their bytes
	// within the range, as Pebble estimates them from their index blocks.
	SharedSSTs  int
	SharedBytes int64
	// CopiedVersions counts the versions of the range that were in no
	// shared SST (in Pebble's memtables and L0–L4) and were copied;
	// CopiedBytes are their keys' and values' bytes, and CopiedSSTBytes
	// the size of the SSTs the destination wrote them into.
	CopiedVersions, CopiedBytes, CopiedSSTBytes int64
	// LiveRows and LiveBytes are the live rows of the range and their
	// bytes, as the live statistics that moved with them count them.
	LiveRows, LiveBytes int64
	// Compacted says that the source compacted the range to Pebble's
	// bottom level first: GC had left Pebble SINGLEDELs of the range above
	// the shared levels, which Pebble's ScanInternal cannot read.
	Compacted bool
}

// MoveVnodes moves vnodes [vnodeLo, vnodeHi) of a table (vnodeHi 0: the
// table's vnode count) from s to dst, two stores on the same object store
// (the same bucket and prefix, each with its own creator id; see the file
// comment for how): dst takes the range's SSTs in Pebble's shared levels
// by reference and copies the rest, with the range's live statistics; then
// s drops the range: s.ExportVnodes, dst.ImportVnodes, s.DropVnodes under
// the export, and its Release, in one process. dst's committed epoch must be at least s's; dst's GC
// watermark rises to s's if that is higher. No writer of either store may
// own a vnode of the range (close them, committing their sealed epochs,
// first); NewWriter refuses the range meanwhile. It is safe for
// concurrent use with the stores' other methods, and with other moves.
//
// It refuses, with an error naming what is wrong and changing nothing
// (but for the compaction an export may have run):
// an unknown table (ErrUnknownTable), vnodes out of the table's range
// (ErrInvalidVnode) or owned by a writer, a store that is read-only
// (ErrReadOnly), closed or failed, on local disk, or on another object
// store than the other's, dst being s, a table of the same id and another
// definition on dst, dst's committed epoch below s's (ErrEpochOrder), and
// a reader of dst pinned below s's GC watermark (ErrEpochUnavailable). A
// failure in the import leaves both stores as they were; a failure in the
// drop leaves the range on both, which the error says: call DropVnodes on
// s to end the move. Cancelling ctx stops the export or the import.
func (s *Store) MoveVnodes(ctx context.Context, dst *Store, table uint32, vnodeLo, vnodeHi int) (MoveStats, error) {
	if dst == nil {
		return MoveStats{}, errors.New("lsmstats: move vnodes to a nil store")
	}
	if dst == s {
		return MoveStats{}, errors.Newf("lsmstats: move vnodes of table %d from store %s to itself", table, s.dir)
	}
	def, lo, hi, err := s.moveRange(table, vnodeLo, vnodeHi)
	if err != nil {
		return MoveStats{}, err
	}
	if err := checkMovable(s, dst, def, lo, hi); err != nil {
		return MoveStats{}, err
	}
	exp, err := s.exportVnodes(ctx, def, lo, hi)
	if err != nil {
		return MoveStats{}, err
	}
	defer exp.Release()
	st, err := dst.ImportVnodes(ctx, exp)
	if err != nil {
		return st, err
	}
	if err := s.DropVnodes(ctx, table, lo, hi); err != nil {
		return st, errors.Wrapf(err, "lsmstats: store %s holds vnodes [%d, %d) of table %d now, and store %s still does: "+
			"call DropVnodes on %s to end the move", dst.dir, lo, hi, table, s.dir, s.dir)
	}
	return st, nil
}

// DropVnodes removes vnodes [vnodeLo, vnodeHi) of a table (vnodeHi 0: the
// table's vnode count) from the store: their row versions at every epoch
// and their live statistics, in one atomic step (Pebble's excise, with
// the statistics folded into empty vnodes). It is how a move cut short
// after its import (a crash, a failure of MoveVnodes' drop) ends on the
// source; the store keeps nothing of the range, so call it only once
// another store holds it. Reads of the range return no rows from then on,
// at every epoch. No writer may own a vnode of the range, nor a move be
// moving one, but for an export of the store that holds the range
// (ExportVnodes) and is not released: the source of a move drops the
// range under its export, once the destination imported it, and then
// releases the export, so that no writer takes the range in between.
func (s *Store) DropVnodes(ctx context.Context, table uint32, vnodeLo, vnodeHi int) error {
	def, lo, hi, err := s.moveRange(table, vnodeLo, vnodeHi)
	if err != nil {
		return err
	}
	if err := s.checkWritable(); err != nil {
		return err
	}
	if e := s.exportHolding(def.ID, lo, hi); e != nil {
		defer e.mu.RUnlock()
		return s.dropVnodes(ctx, def, lo, hi)
	}
	if err := s.freeze(def.ID, lo, hi); err != nil {
		return err
	}
	defer s.thaw(def.ID, lo, hi)
	return s.dropVnodes(ctx, def, lo, hi)
}

// moveRange checks a table and a vnode range of it and returns its
// definition and the range; vnodeHi 0 is the vnode count.
func (s *Store) moveRange(table uint32, vnodeLo, vnodeHi int) (TableDef, int, int, error) {
	def, err := s.Table(table)
	if err != nil {
		return TableDef{}, 0, 0, err
	}
	if vnodeHi == 0 {
		vnodeHi = def.VnodeCount
	}
	if vnodeLo < 0 || vnodeLo >= vnodeHi || vnodeHi > def.VnodeCount {
		return TableDef{}, 0, 0, errors.Wrapf(ErrInvalidVnode, "vnode range [%d, %d) of table %d (vnode count %d)", vnodeLo, vnodeHi, table, def.VnodeCount)
	}
	return def, vnodeLo, vnodeHi, nil
}

// moveSpan returns the key span of vnodes [lo, hi) of a table.
func moveSpan(table uint32, lo, hi int) (lower, upper []byte) {
	lower = keys.AppendVnodeBound(nil, table, uint16(lo))
	_, upper = keys.VnodeSpan(table, uint16(hi-1))
	return lower, upper
}

// checkMovable checks what a move from src to dst needs of both stores
// before anything starts: writable, on one object store, and a table on
// dst that is the same table if it exists.
func checkMovable(src, dst *Store, def TableDef, lo, hi int) error {
	for _, st := range []*Store{src, dst} {
		if err := st.checkMoveStore(def, lo, hi); err != nil {
			return err
		}
	}
	if !sameObjectStore(src.obj, dst.obj) {
		return errors.Newf("lsmstats: move vnodes [%d, %d) of table %d: store %s is on %s, store %s on %s: "+
			"vnodes move between stores on the same bucket and prefix only", lo, hi, def.ID, src.dir, src.obj.describe(), dst.dir, dst.obj.describe())
	}
	if err := dst.checkMoveTarget(def, lo, hi, src.obj.rec.creator, src.dir); err != nil {
		return err
	}
	if c, e := dst.CommittedEpoch(), src.CommittedEpoch(); c < e {
		return errors.Wrapf(ErrEpochOrder, "move vnodes [%d, %d) of table %d: store %s has committed epoch %d, below the committed epoch %d of store %s: "+
			"commit epoch %d on it first", lo, hi, def.ID, dst.dir, c, e, src.dir, e)
	}
	return dst.checkPins(src.GCEpoch(), fmt.Sprintf("move vnodes [%d, %d) of table %d from store %s to store %s", lo, hi, def.ID, src.dir, dst.dir))
}

// checkMoveStore checks what a move needs of either store: writable, and
// on an object store.
func (s *Store) checkMoveStore(def TableDef, lo, hi int) error {
	if err := s.checkWritable(); err != nil {
		if errors.Is(err, ErrReadOnly) { // names the store
			return errors.Wrapf(err, "lsmstats: move vnodes [%d, %d) of table %d", lo, hi, def.ID)
		}
		return errors.Wrapf(err, "lsmstats: move vnodes [%d, %d) of table %d: store %s", lo, hi, def.ID, s.dir)
	}
	if s.obj == nil {
		return errors.Newf("lsmstats: move vnodes [%d, %d) of table %d: store %s keeps its SSTs on local disk; "+
			"vnodes move between stores on one object store (Options.ObjectStore)", lo, hi, def.ID, s.dir)
	}
	return nil
}

// checkMoveTarget checks what a move needs of its destination, s, once
// the source (of creator srcCreator, directory srcDir) is known to be on
// the same object store: another creator id, and a table of the same id
// that is the same table, if s has one.
func (s *Store) checkMoveTarget(def TableDef, lo, hi int, srcCreator uint64, srcDir string) error {
	if srcCreator == s.obj.rec.creator {
		return errors.Newf("lsmstats: move vnodes [%d, %d) of table %d: stores %s and %s have the same creator id %d (is one a copy of the other?)",
			lo, hi, def.ID, srcDir, s.dir, srcCreator)
	}
	if d, err := s.Table(def.ID); err == nil && !sameDef(&d, &def) {
		return errors.Newf("lsmstats: move vnodes [%d, %d) of table %d: store %s has a table %d of another definition",
			lo, hi, def.ID, s.dir, def.ID)
	}
	return nil
}

// checkPins refuses a GC watermark that a move would raise the store's to
// while a reader pins an epoch below it.
func (s *Store) checkPins(gcEpoch uint64, what string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p := range s.mu.pins {
		if p < gcEpoch {
			return errors.Wrapf(ErrEpochUnavailable, "%s: a reader of store %s pins epoch %d, below the source's GC watermark %d, "+
				"which the move would raise the store's to", what, s.dir, p, gcEpoch)
		}
	}
	return nil
}

// sameObjectStore reports whether two stores' object stores are one: the
// same storage, or Buckets of the same endpoint, bucket and prefix.
func sameObjectStore(a, b *objectStore) bool {
	x, y := a.tails.Storage, b.tails.Storage // under the store's wrappers
	if reflect.TypeOf(x) == reflect.TypeOf(y) && reflect.TypeOf(x).Comparable() && x == y {
		return true
	}
	bx, ok := x.(*objstore.Bucket)
	by, ok2 := y.(*objstore.Bucket)
	if !ok || !ok2 {
		return false
	}
	cx, cy := bx.Config(), by.Config()
	return cx.Endpoint == cy.Endpoint && cx.Bucket == cy.Bucket && cx.Prefix == cy.Prefix
}

// sstObject returns the name of backing SST num's object in the object
// store: the store's own, or, for an SST of another store that a vnode
// move took by reference, that store's (Pebble's catalog knows it).
func (o *objectStore) sstObject(num uint64) string {
	if o.foreign.Load() && o.db != nil {
		for _, m := range o.db.ObjProvider().List() {
			if uint64(m.DiskFileNum) == num && m.IsShared() {
				return objstore.SSTName(uint64(m.Remote.CreatorID), uint64(m.Remote.CreatorFileNum))
			}
		}
	}
	return objstore.SSTName(o.rec.creator, num)
}

// freeze keeps writers off vnodes [lo, hi) of a table while a move or a
// drop works on them (NewWriter refuses them): it fails if a writer owns
// one, a closed writer's sealed epochs still hold rows of the table
// uncommitted, or another move is moving one.
func (s *Store) freeze(table uint32, lo, hi int) error {
	r := roaring.New()
	r.AddRange(uint64(lo), uint64(hi))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return ErrClosed
	}
	for w := range s.mu.writers {
		if w.def.ID == table && w.vnodes.Intersects(r) {
			return errors.Wrapf(ErrInvalidVnode, "vnode %d of table %d of store %s is owned by %s: close it (and commit its sealed epochs) before moving it",
				roaring.And(w.vnodes, r).Minimum(), table, s.dir, w.name)
		}
	}
	for _, b := range s.mu.orphans {
		if b.w.def.ID == table && b.w.vnodes.Intersects(r) {
			return errors.Wrapf(ErrInvalidVnode, "vnodes of table %d of store %s hold sealed epoch %d of the closed %s, not committed yet: commit it before moving them",
				table, s.dir, b.epoch, b.w.name)
		}
	}
	if m := s.mu.moving[table]; m != nil && m.Intersects(r) {
		return errors.Wrapf(ErrInvalidVnode, "vnode %d of table %d of store %s is being moved already", roaring.And(m, r).Minimum(), table, s.dir)
	}
	if s.mu.moving[table] == nil {
		s.mu.moving[table] = roaring.New()
	}
	s.mu.moving[table].Or(r)
	return nil
}

// thaw ends what freeze started.
func (s *Store) thaw(table uint32, lo, hi int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.mu.moving[table]; m != nil {
		m.RemoveRange(uint64(lo), uint64(hi))
		if m.IsEmpty() {
			delete(s.mu.moving, table)
		}
	}
}

// exportVnodes takes vnodes [lo, hi) of a table out of the store for a
// move: their shared SSTs by reference, their other versions copied, and
// their live statistics. The store is unchanged, but for a compaction of
// the range when GC left SINGLEDELs above the shared levels; the range is
// frozen until release.
func (s *Store) exportVnodes(ctx context.Context, def TableDef, lo, hi int) (_ *VnodeExport, err error) {
	lower, upper := moveSpan(def.ID, lo, hi)
	e := &VnodeExport{src: s, def: def, lo: lo, hi: hi, lower: lower, upper: upper, origin: s.obj.origin(s.dir)}
	if err := s.freeze(def.ID, lo, hi); err != nil {
		return nil, err
	}
	e.frozen = true
	defer func() {
		if err != nil {
			e.release()
		}
	}()
	ctx, done, err := s.beginMaintenance(ctx) // no GC pass or manual compaction meanwhile
	if err != nil {
		return nil, err
	}
	defer done()
	what := fmt.Sprintf("vnodes [%d, %d) of table %d of store %s", lo, hi, def.ID, s.dir)

	above, err := s.singleDelsAbove(def.ID, lo, hi, lower, upper)
	if err != nil {
		return nil, errors.Wrapf(err, "lsmstats: export %s", what)
	}
	if above {
		if err := s.flushUnflushed(); err != nil {
			return nil, errors.Wrapf(err, "lsmstats: export %s", what)
		}
		if err := s.db.Compact(ctx, lower, upper, false); err != nil {
			return nil, closedErr(ctx, errors.Wrapf(err, "lsmstats: export %s: compact the range below GC's SINGLEDELs", what))
		}
		e.stats.Compacted = true
		s.gc.compactions.Add(1)
		s.iters.close()
		if above, err = s.singleDelsAbove(def.ID, lo, hi, lower, upper); err != nil {
			return nil, errors.Wrapf(err, "lsmstats: export %s", what)
		}
		if above {
			return nil, errors.Newf("lsmstats: export %s: Pebble SINGLEDELs of the range are above Pebble's shared levels after a compaction of the range", what)
		}
	}

	// The range is frozen (no writer, no GC): its rows and live statistics
	// change no more, whatever else commits meanwhile.
	s.ingestMu.Lock()
	e.epoch = s.committed.Load()
	s.mu.Lock()
	e.gcEpoch = s.mu.gcEpoch
	e.live, err = s.mu.live.Current().ExportVnodes(def.ID, lo, hi)
	s.mu.Unlock()
	s.ingestMu.Unlock()
	if err != nil {
		return nil, errors.Wrapf(err, "lsmstats: export %s", what)
	}
	e.stats.LiveRows, e.stats.LiveBytes = e.live.Counts.Rows, e.live.Counts.Bytes

	out := &output{fs: s.fs, opts: s.spillOpts, target: uint64(s.opts.TargetFileSize), noSync: true,
		path: func() string { return s.stagingPath("export") }}
	var buf []byte
	err = s.scanInternal(ctx, lower, upper,
		func(key *pebble.InternalKey, value pebble.LazyValue, _ pebble.IteratorLevel) error {
			if k := key.Kind(); k != pebble.InternalKeyKindSet && k != pebble.InternalKeyKindSetWithDelete {
				return errors.Newf("key %s is a Pebble %s, which the store does not write", keys.Comparer.FormatKey(key.UserKey), k)
			}
			v, owned, err := value.Value(buf[:0])
			if err != nil {
				return err
			}
			if owned {
				buf = v // else v is Pebble's memory: never a buffer of ours
			}
			e.stats.CopiedVersions++
			e.stats.CopiedBytes += int64(len(key.UserKey) + len(v))
			return out.set(key.UserKey, v)
		},
		func(sst *pebble.SharedSSTMeta) error {
			e.shared = append(e.shared, *sst)
			e.stats.SharedSSTs++
			e.stats.SharedBytes += int64(sst.Size)
			return nil
		})
	if err != nil {
		out.abort()
		return nil, closedErr(ctx, errors.Wrapf(err, "lsmstats: export %s", what))
	}
	if e.copied, err = out.finish(); err != nil {
		return nil, errors.Wrapf(err, "lsmstats: export %s", what)
	}
	s.mu.Lock()
	s.mu.exports[e] = struct{}{}
	s.mu.Unlock()
	return e, nil
}

// scanInternal runs Pebble's ScanInternal over [lower, upper) in its
// skip-shared mode: the shared SSTs to shared, every other key to point.
// Range deletions and range keys (the store writes none) are errors, and
// so is a panic of Pebble's (a SINGLEDEL or MERGE above the shared
// levels, which its iterator does not support).
func (s *Store) scanInternal(ctx context.Context, lower, upper []byte,
	point func(*pebble.InternalKey, pebble.LazyValue, pebble.IteratorLevel) error,
	shared func(*pebble.SharedSSTMeta) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.Newf("Pebble's ScanInternal failed: %v", r)
		}
	}()
	return s.db.ScanInternal(ctx, block.CategoryUnknown, lower, upper, point,
		func(start, end []byte, _ pebble.SeqNum) error {
			return errors.Newf("a range deletion [%s, %s), which the store does not write", keys.Comparer.FormatKey(start), keys.Comparer.FormatKey(end))
		},
		func(start, end []byte, _ []rangekey.Key) error {
			return errors.Newf("range keys [%s, %s), which the store does not write", keys.Comparer.FormatKey(start), keys.Comparer.FormatKey(end))
		},
		shared, nil)
}

// singleDelsAbove reports whether an SST that Pebble's ScanInternal reads
// key by key (above the shared levels, or not in the object store) holds
// Pebble tombstones of vnodes [lo, hi) of a table, which it cannot read.
// An SST the statistics do not know yet counts as holding some.
func (s *Store) singleDelsAbove(table uint32, lo, hi int, lower, upper []byte) (bool, error) {
	s.statsMu.Lock()
	err := s.tracker.Refresh()
	v := s.tracker.Current()
	s.statsMu.Unlock()
	if err != nil {
		return false, err
	}
	levels, err := s.db.SSTables(pebble.WithKeyRangeFilter(lower, upper))
	if err != nil {
		return false, err
	}
	for level, tables := range levels {
		for _, t := range tables {
			if level >= remote.SharedLevelsStart && t.BackingType != pebble.BackingTypeLocal {
				continue // taken by reference
			}
			fi, ok := ssttracker.File(v, uint64(t.FileNum))
			if !ok || fi.Summary == nil {
				return true, nil
			}
			for vn := lo; vn < hi; vn++ {
				if vs := fi.Summary.Vnode(table, uint16(vn)); vs != nil && vs.Counts.PebbleTombstones > 0 {
					return true, nil
				}
			}
		}
	}
	return false, nil
}

// importVnodes installs an export of another store in this one (see the
// file comment), checked by the caller (checkImport): one IngestAndExcise
// of the shared SSTs, the copied versions and the live statistics. It
// returns the export's statistics with the size of the SSTs it wrote.
func (s *Store) importVnodes(ctx context.Context, e *VnodeExport) (_ MoveStats, err error) {
	def, lo, hi := e.def, e.lo, e.hi
	stats := e.stats
	what := fmt.Sprintf("vnodes [%d, %d) of table %d into store %s", lo, hi, def.ID, s.dir)
	if err := s.CreateTable(def); err != nil {
		return stats, errors.Wrapf(err, "lsmstats: import %s", what)
	}
	if err := s.freeze(def.ID, lo, hi); err != nil {
		return stats, err
	}
	defer s.thaw(def.ID, lo, hi)
	ctx, done, err := s.beginRangeIngest(ctx) // GC waits: the watermark may rise
	if err != nil {
		return stats, err
	}
	defer done()
	epoch := s.committed.Load()
	if epoch < e.epoch {
		return stats, errors.Wrapf(ErrEpochOrder, "import %s: its committed epoch %d is below the export's, %d", what, epoch, e.epoch)
	}
	if err := s.checkPins(e.gcEpoch, "import "+what); err != nil {
		return stats, err
	}
	s.mu.Lock()
	live := s.mu.live
	raise := e.gcEpoch > s.mu.gcEpoch
	s.mu.Unlock()

	batch, err := live.Replace(def.ID, lo, hi, e.live)
	if err != nil {
		return stats, errors.Wrapf(err, "lsmstats: import %s", what)
	}
	out := s.newOutput()
	if err := e.copyInto(out, s.popts.MakeReaderOptions()); err != nil {
		out.abort()
		return stats, errors.Wrapf(err, "lsmstats: import %s", what)
	}
	copied := len(out.paths) // the metadata goes into an SST of its own
	meta := batch.MetaEntries(epoch)
	if raise {
		meta = insertMeta(meta, livebuckets.MetaEntry{Key: keys.MetaKey([]byte(gcEpochName)), Value: be64(e.gcEpoch)})
	}
	paths, err := out.finishWithMeta(meta)
	if err != nil {
		return stats, err
	}
	for _, p := range paths[:copied] {
		if st, err := s.fs.Stat(p); err == nil {
			stats.CopiedSSTBytes += st.Size()
		}
	}
	s.waitForL0()
	// The tracker reads the shared SSTs by their creator's names from the
	// ingestion's refresh on, and learns of them by a listing (published):
	// Pebble's event of the ingestion does not say they are virtual.
	s.obj.foreign.Store(true)
	s.movingIn.Store(true)
	err = s.ingestFiles(ctx, paths, e.shared, pebble.KeyRange{Start: e.lower, End: e.upper})
	s.movingIn.Store(false)
	if err != nil {
		return stats, closedErr(ctx, errors.Wrapf(err, "lsmstats: import %s", what))
	}
	s.published(batch, e.gcEpoch, "import "+what)
	return stats, nil
}

// beginRangeIngest starts a move's ingestion into the store: no GC pass
// or manual compaction meanwhile (beginMaintenance), no other ingestion
// (ingestMu), and a store that takes writes. done ends it.
func (s *Store) beginRangeIngest(ctx context.Context) (_ context.Context, done func(), err error) {
	ctx, end, err := s.beginMaintenance(ctx)
	if err != nil {
		return nil, nil, err
	}
	s.ingestMu.Lock()
	done = func() {
		s.ingestMu.Unlock()
		end()
	}
	if err := s.checkWritable(); err != nil {
		done()
		return nil, nil, err
	}
	return ctx, done, nil
}

// published publishes what a move's ingestion changed, as a commit
// publishes its checkpoint: the statistics, the live batch, the GC
// watermark, and a new generation for the pooled iterators, which predate
// the ingestion. The physical statistics come from a listing of the SSTs:
// Pebble reports no event for the SSTs an excise cuts. Callers hold
// ingestMu.
func (s *Store) published(batch *livebuckets.Batch, gcEpoch uint64, what string) {
	s.statsMu.Lock()
	if err := s.tracker.Refresh(); err != nil {
		s.logf("lsmstats: refresh statistics after %s: %v", what, err)
	}
	s.mu.Lock()
	batch.Publish()
	s.mu.gcEpoch = max(s.mu.gcEpoch, gcEpoch)
	s.partitionLarge()
	pub := s.pub.Load()
	s.pub.Store(&published{epoch: pub.epoch, gen: pub.gen + 1})
	s.mu.Unlock()
	s.statsMu.Unlock()
	s.iters.close()
	s.rescanBuckets(batch.Rescans())
}

// copyInto writes the export's copied versions into out, in key order,
// reading its SSTs with ropts (the importing store's): each key must be
// of the range and follow the one before, and the versions and their
// bytes must add up to the export's counts (a decoded export's SSTs are
// another process's).
func (e *VnodeExport) copyInto(out *output, ropts sstable.ReaderOptions) error {
	var versions, size int64
	var last []byte
	for i := range e.numCopied() {
		name, readable, err := e.openCopied(i)
		if err != nil {
			return err
		}
		err = func() error {
			r, err := sstable.NewReader(context.Background(), readable, ropts)
			if err != nil {
				_ = readable.Close()
				return errors.Wrapf(err, "lsmstats: open %s", name)
			}
			defer r.Close()
			it, err := r.NewIter(sstable.NoTransforms, nil, nil, sstable.AssertNoBlobHandles)
			if err != nil {
				return errors.Wrapf(err, "lsmstats: read %s", name)
			}
			for kv := it.First(); kv != nil; kv = it.Next() {
				k := kv.K.UserKey
				if keys.Compare(k, e.lower) < 0 || keys.Compare(k, e.upper) >= 0 || (last != nil && keys.Compare(k, last) <= 0) || kv.K.Kind() != pebble.InternalKeyKindSet {
					_ = it.Close()
					return lsmstats.Corruptionf("lsmstats: %s holds key %s (a Pebble %s), out of the range's order or span [%s, %s)",
						name, keys.Comparer.FormatKey(k), kv.K.Kind(), keys.Comparer.FormatKey(e.lower), keys.Comparer.FormatKey(e.upper))
				}
				last = append(last[:0], k...)
				v, _, err := kv.Value(nil)
				if err == nil {
					versions++
					size += int64(len(k) + len(v))
					err = out.set(k, v)
				}
				if err != nil {
					_ = it.Close()
					return errors.Wrapf(err, "lsmstats: copy %s", name)
				}
			}
			return errors.Wrapf(errors.CombineErrors(it.Error(), it.Close()), "lsmstats: read %s", name)
		}()
		if err != nil {
			return err
		}
	}
	if versions != e.stats.CopiedVersions || size != e.stats.CopiedBytes {
		return lsmstats.Corruptionf("lsmstats: the export's copied SSTs hold %d versions of %d bytes, the export says %d of %d",
			versions, size, e.stats.CopiedVersions, e.stats.CopiedBytes)
	}
	return nil
}

// dropVnodes removes vnodes [lo, hi) of a table from the store (see
// DropVnodes), frozen by the caller: by a move's export, or by
// DropVnodes.
func (s *Store) dropVnodes(ctx context.Context, def TableDef, lo, hi int) error {
	what := fmt.Sprintf("vnodes [%d, %d) of table %d of store %s", lo, hi, def.ID, s.dir)
	lower, upper := moveSpan(def.ID, lo, hi)
	ctx, done, err := s.beginRangeIngest(ctx)
	if err != nil {
		return err
	}
	defer done()
	epoch := s.committed.Load()
	s.mu.Lock()
	live := s.mu.live
	s.mu.Unlock()
	batch, err := live.Replace(def.ID, lo, hi, nil)
	if err != nil {
		return errors.Wrapf(err, "lsmstats: drop %s", what)
	}
	paths, err := s.newOutput().finishWithMeta(batch.MetaEntries(epoch))
	if err != nil {
		return err
	}
	if err := s.ingestFiles(ctx, paths, nil, pebble.KeyRange{Start: lower, End: upper}); err != nil {
		return closedErr(ctx, errors.Wrapf(err, "lsmstats: drop %s", what))
	}
	s.published(batch, 0, "drop "+what)
	return nil
}
