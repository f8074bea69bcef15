package lsm

// A vnode move's export as a value of its own (VnodeExport), and its
// wire form, so that the export and the import of a move run in different
// processes (move.go says what a move does).
//
// The source takes the export (Store.ExportVnodes) and holds it: the
// range stays frozen on the source (no writer takes it), and each shared
// SST's backing handle keeps the source's Pebble from removing its
// reference marker on the SST's object, even when its own compactions
// drop the SST. Its bytes (MarshalBinary) carry the rest to the
// destination, which decodes them (DecodeVnodeExport) and imports them
// (Store.ImportVnodes). Pebble's attach of a shared SST
// (objstorageprovider's AttachRemoteObjects, called by the ingestion)
// first writes the destination's own reference marker beside the object,
// then checks that the source's marker is still there (the backing names
// it: the source's creator id and file number), and refuses the backing
// as corruption if it is not: the source's object may be gone. So the
// source holds its export until the destination acknowledged the import
// (from then on the destination's marker keeps the object), then drops
// the range (Store.DropVnodes, under the export) and releases the export.
// A destination that failed or never answered changes nothing for the
// source: release the export and the range is the source's again.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage"
	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/lsmstats/lsmstats"
	"github.com/lsmstats/lsmstats/internal/livebuckets"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/objstore"
)

// VnodeExport is a vnode range of a table as its source store hands it to
// a destination store (see Store.ExportVnodes and the file comment of
// move.go): the range's SSTs in Pebble's shared levels by reference, its
// other versions copied into SSTs, its live statistics, and the source's
// committed epoch and GC watermark. It is either the source's own export,
// which holds the range frozen on the source and the shared SSTs' objects
// until Release, or one decoded from another process's bytes
// (DecodeVnodeExport), which holds nothing of another store.
//
// Make one with ExportVnodes or DecodeVnodeExport: a nil *VnodeExport and
// the zero value are no export (ImportVnodes and MarshalBinary refuse
// them). Its methods are safe for concurrent
// use; Release waits for an import, a marshalling or a drop under the
// export in progress.
type VnodeExport struct {
	// mu is held shared by the uses of the export (ImportVnodes,
	// MarshalBinary, DropVnodes under the export), exclusively by Release.
	mu       sync.RWMutex
	released bool

	// src is the source store for the source's own export, nil for a
	// decoded one.
	src          *Store
	origin       exportOrigin
	def          TableDef
	lo, hi       int
	lower, upper []byte
	// epoch is the source's committed epoch when it took the export, and
	// gcEpoch its GC watermark.
	epoch, gcEpoch uint64
	// shared are the source's SSTs of the shared levels in the range. The
	// source's backing handles keep the source from removing its reference
	// markers until release; a decoded export's are receivedBackings.
	shared []pebble.SharedSSTMeta
	// copied are the SSTs in the source's staging directory holding the
	// other versions of the range, in key order (the source's export);
	// copiedSSTs are the same SSTs' bytes (a decoded export).
	copied     []string
	copiedSSTs [][]byte
	live       *livebuckets.VnodeRows
	stats      MoveStats
	// frozen says the range is frozen on src (freeze) until release.
	frozen bool
}

// exportOrigin names the source store of an export and its object store,
// so that a destination can tell whether it is on the same one.
type exportOrigin struct {
	// creator is the source's creator id; dir its directory (for
	// messages).
	creator uint64
	dir     string
	// name names the object store as the source's messages do (its URL,
	// without credentials; empty for a caller's storage without one).
	name string
	// endpoint, bucket and prefix are those of the source's Bucket; empty
	// when its object store is another remote.Storage.
	endpoint, bucket, prefix string
}

// origin returns the export origin of a store on this object store.
func (o *objectStore) origin(dir string) exportOrigin {
	r := exportOrigin{creator: o.rec.creator, dir: dir, name: o.name}
	if b, ok := o.tails.Storage.(*objstore.Bucket); ok {
		cfg := b.Config()
		r.endpoint, r.bucket, r.prefix = cfg.Endpoint, cfg.Bucket, cfg.Prefix
	}
	return r
}

// describe names the origin's object store in a message.
func (r exportOrigin) describe() string {
	if r.name == "" {
		return "the caller's object store"
	}
	return "object store " + r.name
}

// ExportVnodes takes vnodes [vnodeLo, vnodeHi) of a table (vnodeHi 0: the
// table's vnode count) out of the store for a move to a store of another
// process on the same object store (the same bucket and prefix): their
// SSTs in Pebble's shared levels by reference, their other versions
// copied into SSTs in the store's staging directory, and their live
// statistics (the first step of MoveVnodes; see move.go's file comment).
// The store keeps the range, unchanged but for a compaction of it when GC
// left Pebble SINGLEDELs above the shared levels (MoveStats.Compacted);
// until Release, NewWriter refuses the range and the store keeps the
// shared SSTs' objects (and its reference markers on them) even if its
// compactions drop them.
//
// Hold the export until the destination's ImportVnodes returned: its
// ingestion checks that the source still references each shared SST.
// Then drop the range (DropVnodes, which the export lets through) and
// Release the export; or, if the import failed, Release it alone.
//
// It refuses, changing nothing, what MoveVnodes refuses of its source: an
// unknown table (ErrUnknownTable), vnodes out of the table's range
// (ErrInvalidVnode), owned by a writer or held by another export, a store
// that is read-only (ErrReadOnly), closed or failed, or on local disk.
// Cancelling ctx stops it. It is safe for concurrent use with the store's
// other methods.
func (s *Store) ExportVnodes(ctx context.Context, table uint32, vnodeLo, vnodeHi int) (*VnodeExport, error) {
	def, lo, hi, err := s.moveRange(table, vnodeLo, vnodeHi)
	if err != nil {
		return nil, err
	}
	if err := s.checkMoveStore(def, lo, hi); err != nil {
		return nil, err
	}
	return s.exportVnodes(ctx, def, lo, hi)
}

// ImportVnodes installs an export of another store (the source's own, in
// this process, or one decoded from its bytes) in s, as the import step of
// MoveVnodes (see move.go's file comment): in one Pebble IngestAndExcise,
// the shared SSTs by reference, the copied versions in new SSTs, and the
// live statistics; whatever s held in the range before is excised. It
// returns what it took by reference and copied. s's GC watermark rises to
// the export's if that is higher.
//
// It refuses, with an error naming what is wrong and changing nothing: a
// released export, an export of s itself, a store s that is read-only
// (ErrReadOnly), closed or failed, or on local disk; an export from
// another object store (another bucket or prefix, or an object store
// without the source's identity marker); a source with s's creator
// id; a table of the same id and another definition on s; s's committed
// epoch below the export's (ErrEpochOrder: commit it first); a reader of
// s pinned below the export's GC watermark (ErrEpochUnavailable); a
// writer of s owning a vnode of the range (ErrInvalidVnode); and a
// damaged export (lsmstats.ErrCorruption), or a shared SST whose source
// dropped its reference (Pebble's corruption error: the source released
// its export too early). Cancelling ctx stops it. It is safe for
// concurrent use with s's other methods.
func (s *Store) ImportVnodes(ctx context.Context, e *VnodeExport) (MoveStats, error) {
	if e == nil || e.live == nil {
		return MoveStats{}, errors.Newf("lsmstats: import into store %s: no vnode export (make one with ExportVnodes or DecodeVnodeExport)", s.dir)
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.released {
		return MoveStats{}, errors.Newf("lsmstats: import %s into store %s: the export was released", e.what(), s.dir)
	}
	if e.src == s {
		return MoveStats{}, errors.Newf("lsmstats: move vnodes of table %d from store %s to itself", e.def.ID, s.dir)
	}
	if err := s.checkImport(e); err != nil {
		return MoveStats{}, err
	}
	return s.importVnodes(ctx, e)
}

// checkImport checks what an import of e needs of s before anything
// starts (importVnodes checks the epochs and the pins again under its
// locks).
func (s *Store) checkImport(e *VnodeExport) error {
	def, lo, hi := e.def, e.lo, e.hi
	if err := s.checkMoveStore(def, lo, hi); err != nil {
		return err
	}
	if e.src != nil {
		if !sameObjectStore(e.src.obj, s.obj) {
			return errors.Newf("lsmstats: move vnodes [%d, %d) of table %d: store %s is on %s, store %s on %s: "+
				"vnodes move between stores on the same bucket and prefix only", lo, hi, def.ID, e.src.dir, e.src.obj.describe(), s.dir, s.obj.describe())
		}
	} else if err := s.checkOrigin(e); err != nil {
		return err
	}
	if err := s.checkMoveTarget(def, lo, hi, e.origin.creator, e.origin.dir); err != nil {
		return err
	}
	if c := s.CommittedEpoch(); c < e.epoch {
		return errors.Wrapf(ErrEpochOrder, "move vnodes [%d, %d) of table %d: store %s has committed epoch %d, below the committed epoch %d of store %s when it exported them: "+
			"commit epoch %d on it first", lo, hi, def.ID, s.dir, c, e.epoch, e.origin.dir, e.epoch)
	}
	return s.checkPins(e.gcEpoch, fmt.Sprintf("move vnodes [%d, %d) of table %d from store %s to store %s", lo, hi, def.ID, e.origin.dir, s.dir))
}

// checkOrigin checks that a decoded export comes from s's object store:
// the same bucket and prefix when both are Buckets, and, either way, the
// source store's identity marker in s's object store. The endpoints are
// not compared: nodes may reach one server by different addresses; the
// marker (its name holds the source's random creator id) is only where
// the source wrote it.
func (s *Store) checkOrigin(e *VnodeExport) error {
	o := e.origin
	refuse := func(why string) error {
		return errors.Newf("lsmstats: move vnodes [%d, %d) of table %d: store %s is on %s, the export's source store %s on %s%s: "+
			"vnodes move between stores on the same bucket and prefix only", e.lo, e.hi, e.def.ID, s.dir, s.obj.describe(), o.dir, o.describe(), why)
	}
	if b, ok := s.obj.tails.Storage.(*objstore.Bucket); ok && o.bucket != "" {
		cfg := b.Config()
		if cfg.Bucket != o.bucket || cfg.Prefix != o.prefix {
			return refuse(fmt.Sprintf(" (bucket %q, prefix %q against %q, %q)", o.bucket, o.prefix, cfg.Bucket, cfg.Prefix))
		}
	}
	marker := markerName(o.creator)
	if _, err := s.obj.storage.Size(marker); err != nil {
		if s.obj.storage.IsNotExistError(err) {
			return refuse(fmt.Sprintf(" (no identity marker %s of the source's creator %d in store %s's object store)", marker, o.creator, s.dir))
		}
		return errors.Wrapf(err, "lsmstats: move vnodes [%d, %d) of table %d: look for the source's identity marker %s in %s",
			e.lo, e.hi, e.def.ID, marker, s.obj.describe())
	}
	return nil
}

// Table returns the definition of the export's table.
func (e *VnodeExport) Table() TableDef { return e.def }

// Vnodes returns the export's vnode range, [lo, hi).
func (e *VnodeExport) Vnodes() (lo, hi int) { return e.lo, e.hi }

// Epoch returns the source's committed epoch when it took the export: an
// importer must have committed it (ImportVnodes).
func (e *VnodeExport) Epoch() uint64 { return e.epoch }

// Stats returns what the export takes by reference and copies; its
// CopiedSSTBytes, the size of the SSTs the destination writes, is 0
// (ImportVnodes returns them).
func (e *VnodeExport) Stats() MoveStats { return e.stats }

// Release ends the export: the source's own export lets writers take the
// range again and lets the source remove the shared SSTs' objects it no
// longer uses (release it only once the destination's import returned,
// or will never run), and removes the copied SSTs from the source's
// staging directory; a decoded one drops its bytes. The export is of no
// use afterwards. Releasing twice is a no-op. It waits for the export's
// uses in progress (an import, a marshalling, a drop under it).
func (e *VnodeExport) Release() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.released {
		return
	}
	e.released = true
	e.release()
}

// release releases the backings and the copied SSTs, and lets writers
// take the range on the source again.
func (e *VnodeExport) release() {
	for _, m := range e.shared {
		m.Backing.Close()
	}
	e.shared = nil
	e.copiedSSTs = nil
	if e.src == nil {
		return
	}
	e.src.removeFiles(e.copied)
	e.copied = nil
	if e.frozen {
		e.src.mu.Lock()
		delete(e.src.mu.exports, e)
		e.src.mu.Unlock()
		e.src.thaw(e.def.ID, e.lo, e.hi)
		e.frozen = false
	}
}

// what names the export in messages.
func (e *VnodeExport) what() string {
	return fmt.Sprintf("the export of vnodes [%d, %d) of table %d of store %s", e.lo, e.hi, e.def.ID, e.origin.dir)
}

// exportHolding returns an export of the store, not released, whose range
// holds vnodes [lo, hi) of a table, held shared (the caller unlocks its
// mu): a drop under it. nil if there is none.
func (s *Store) exportHolding(table uint32, lo, hi int) *VnodeExport {
	s.mu.Lock()
	var found []*VnodeExport
	for e := range s.mu.exports {
		if e.def.ID == table && e.lo <= lo && hi <= e.hi {
			found = append(found, e)
		}
	}
	s.mu.Unlock()
	for _, e := range found { // Release locks e.mu before the store's
		e.mu.RLock()
		if !e.released {
			return e
		}
		e.mu.RUnlock()
	}
	return nil
}

// numCopied returns the number of the export's copied SSTs.
func (e *VnodeExport) numCopied() int { return max(len(e.copied), len(e.copiedSSTs)) }

// openCopied opens the export's copied SST i, and names it.
func (e *VnodeExport) openCopied(i int) (string, objstorage.Readable, error) {
	if e.src == nil {
		name := fmt.Sprintf("copied SST %d of %s", i, e.what())
		return name, newMemReadable(e.copiedSSTs[i]), nil
	}
	p := e.copied[i]
	f, err := e.src.fs.Open(p)
	if err != nil {
		return p, nil, errors.Wrapf(err, "lsmstats: open %s", p)
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		_ = f.Close()
		return p, nil, errors.Wrapf(err, "lsmstats: open %s", p)
	}
	return p, readable, nil
}

// copiedBytes returns the bytes of the export's copied SST i.
func (e *VnodeExport) copiedBytes(i int) ([]byte, error) {
	if e.src == nil {
		return e.copiedSSTs[i], nil
	}
	p := e.copied[i]
	f, err := e.src.fs.Open(p)
	if err != nil {
		return nil, errors.Wrapf(err, "lsmstats: open %s", p)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	return b, errors.Wrapf(err, "lsmstats: read %s", p)
}

// memReadable is an SST in memory, for sstable.NewReader.
type memReadable struct {
	b  []byte
	rh objstorage.NoopReadHandle
}

func newMemReadable(b []byte) *memReadable {
	r := &memReadable{b: b}
	r.rh = objstorage.MakeNoopReadHandle(r)
	return r
}

func (r *memReadable) ReadAt(_ context.Context, p []byte, off int64) error {
	if off < 0 || off+int64(len(p)) > int64(len(r.b)) {
		return lsmstats.Corruptionf("lsmstats: read of %d bytes at %d of an SST of %d bytes", len(p), off, len(r.b))
	}
	copy(p, r.b[off:])
	return nil
}

func (r *memReadable) Close() error { return nil }
func (r *memReadable) Size() int64  { return int64(len(r.b)) }
func (r *memReadable) NewReadHandle(objstorage.ReadBeforeSize) objstorage.ReadHandle {
	return &r.rh
}

// receivedBacking is the backing of a shared SST of a decoded export: the
// bytes the source's Pebble encoded (objstorage.RemoteObjectBacking, which
// the destination's Pebble decodes when it attaches the object). It holds
// nothing in this process: the source's export keeps the object.
type receivedBacking struct {
	b objstorage.RemoteObjectBacking
}

func (r *receivedBacking) Get() (objstorage.RemoteObjectBacking, error) {
	if r.b == nil {
		return nil, errors.New("lsmstats: the backing of a released vnode export")
	}
	return r.b, nil
}

func (r *receivedBacking) Close() { r.b = nil }

// The wire form (docs/format.md, "Vnode export"): a magic, a version, the
// body, and a CRC-32C of everything before it.
const (
	exportMagic   = "LSVX"
	exportVersion = 1
	// exportFlagCompacted and exportFlagEstimates are the bits of the
	// flags byte.
	exportFlagCompacted = 1 << 0
	exportFlagEstimates = 1 << 1
)

var exportCRC = crc32.MakeTable(crc32.Castagnoli)

// MarshalBinary returns the export's wire form (docs/format.md, "Vnode
// export"), which DecodeVnodeExport reads in another process: everything
// the destination needs, the copied SSTs' bytes included, with a
// checksum. The bytes hold no reference to the shared SSTs' objects: the
// export does, until Release. It fails on a released export.
func (e *VnodeExport) MarshalBinary() ([]byte, error) {
	if e == nil || e.live == nil {
		return nil, errors.New("lsmstats: marshal no vnode export (make one with ExportVnodes or DecodeVnodeExport)")
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.released {
		return nil, errors.Newf("lsmstats: marshal %s: the export was released", e.what())
	}
	b := append([]byte(exportMagic), exportVersion)
	o := e.origin
	b = binary.BigEndian.AppendUint64(b, o.creator)
	for _, str := range []string{o.dir, o.name, o.endpoint, o.bucket, o.prefix} {
		b = appendBytes(b, []byte(str))
	}
	b = binary.BigEndian.AppendUint32(b, e.def.ID)
	b = appendBytes(b, encodeCatalogEntry(&e.def))
	b = binary.AppendUvarint(b, uint64(e.lo))
	b = binary.AppendUvarint(b, uint64(e.hi))
	b = binary.BigEndian.AppendUint64(b, e.epoch)
	b = binary.BigEndian.AppendUint64(b, e.gcEpoch)
	var flags byte
	if e.stats.Compacted {
		flags |= exportFlagCompacted
	}
	if e.live.Estimates {
		flags |= exportFlagEstimates
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(e.stats.CopiedVersions))
	b = binary.AppendUvarint(b, uint64(e.stats.CopiedBytes))

	b = binary.AppendUvarint(b, uint64(len(e.shared)))
	for i := range e.shared {
		m := &e.shared[i]
		backing, err := m.Backing.Get()
		if err != nil {
			return nil, errors.Wrapf(err, "lsmstats: marshal %s: shared SST %d", e.what(), i)
		}
		b = append(b, m.Level)
		b = binary.AppendUvarint(b, m.Size)
		for _, k := range []pebble.InternalKey{m.Smallest, m.Largest, m.SmallestPointKey, m.LargestPointKey, m.SmallestRangeKey, m.LargestRangeKey} {
			b = appendBytes(b, k.UserKey)
			b = binary.BigEndian.AppendUint64(b, uint64(k.Trailer))
		}
		b = appendBytes(b, backing)
	}

	b = binary.AppendUvarint(b, uint64(e.numCopied()))
	for i := range e.numCopied() {
		sst, err := e.copiedBytes(i)
		if err != nil {
			return nil, errors.Wrapf(err, "lsmstats: marshal %s", e.what())
		}
		b = appendBytes(b, sst)
	}

	b = binary.AppendVarint(b, e.live.Counts.Rows)
	b = binary.AppendVarint(b, e.live.Counts.Bytes)
	b = binary.AppendUvarint(b, uint64(len(e.live.Rows)))
	for _, r := range e.live.Rows {
		b = appendBytes(b, r.Key)
		b = appendBytes(b, r.Value)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, exportCRC)), nil
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// DecodeVnodeExport decodes an export from its wire form (MarshalBinary),
// as another process wrote it, for ImportVnodes. Bytes that are damaged,
// truncated, of another version, or that do not describe a valid export
// (bounds out of the range, shared SSTs outside Pebble's shared levels,
// live statistics that do not add up) are refused with an error marked
// lsmstats.ErrCorruption naming what is wrong. The export keeps a copy of
// what it needs of b. Its Release frees only its own memory: the source
// keeps the shared SSTs' objects until it releases its own export.
func DecodeVnodeExport(b []byte) (*VnodeExport, error) {
	if len(b) < len(exportMagic)+1+4 {
		return nil, lsmstats.Corruptionf("lsmstats: vnode export: %d bytes, shorter than a header and a checksum", len(b))
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, exportCRC); got != sum {
		return nil, lsmstats.Corruptionf("lsmstats: vnode export of %d bytes: checksum %08x, the bytes hold %08x (damaged or truncated)", len(b), sum, got)
	}
	if string(body[:len(exportMagic)]) != exportMagic {
		return nil, lsmstats.Corruptionf("lsmstats: vnode export: magic %q, not %q", body[:len(exportMagic)], exportMagic)
	}
	if v := body[len(exportMagic)]; v != exportVersion {
		return nil, lsmstats.Corruptionf("lsmstats: vnode export: version %d, this library reads version %d", v, exportVersion)
	}
	d := &exportDecoder{b: bytes.Clone(body), off: len(exportMagic) + 1}
	e, err := d.export()
	if err != nil {
		return nil, lsmstats.MarkCorruption(errors.Wrap(err, "lsmstats: vnode export"))
	}
	return e, nil
}

// exportDecoder reads the body of a vnode export; the first error sticks.
type exportDecoder struct {
	b   []byte
	off int
	err error
}

func (d *exportDecoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = errors.Newf("at byte %d: %s", d.off, fmt.Sprintf(format, args...))
	}
}

func (d *exportDecoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail("%s: not a uvarint", what)
		return 0
	}
	d.off += n
	return v
}

func (d *exportDecoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.fail("%s: not a varint", what)
		return 0
	}
	d.off += n
	return v
}

func (d *exportDecoder) fixed(what string, n int) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b)-d.off < n {
		d.fail("%s: %d bytes, %d left", what, n, len(d.b)-d.off)
		return nil
	}
	v := d.b[d.off : d.off+n : d.off+n]
	d.off += n
	return v
}

func (d *exportDecoder) u64(what string) uint64 {
	if v := d.fixed(what, 8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (d *exportDecoder) bytes(what string) []byte {
	n := d.uvarint(what + " length")
	if d.err == nil && n > uint64(len(d.b)-d.off) {
		d.fail("%s: %d bytes, %d left", what, n, len(d.b)-d.off)
	}
	return d.fixed(what, int(n))
}

// count reads a count of items of at least min bytes each.
func (d *exportDecoder) count(what string, min int) int {
	n := d.uvarint(what)
	if d.err == nil && n > uint64((len(d.b)-d.off)/min) {
		d.fail("%d %s in %d bytes", n, what, len(d.b)-d.off)
		return 0
	}
	return int(n)
}

func (d *exportDecoder) export() (*VnodeExport, error) {
	e := &VnodeExport{}
	o := &e.origin
	o.creator = d.u64("creator")
	strs := []*string{&o.dir, &o.name, &o.endpoint, &o.bucket, &o.prefix}
	for i, what := range []string{"source directory", "object store name", "endpoint", "bucket", "prefix"} {
		*strs[i] = string(d.bytes(what))
	}
	var table uint32
	if v := d.fixed("table", 4); v != nil {
		table = binary.BigEndian.Uint32(v)
	}
	entry := d.bytes("catalog entry")
	lo, hi := d.uvarint("vnode lo"), d.uvarint("vnode hi")
	e.epoch = d.u64("epoch")
	e.gcEpoch = d.u64("GC epoch")
	flags := d.fixed("flags", 1)
	e.stats.CopiedVersions = int64(d.uvarint("copied versions"))
	e.stats.CopiedBytes = int64(d.uvarint("copied bytes"))
	if d.err != nil {
		return nil, d.err
	}
	if o.creator == 0 {
		return nil, errors.New("creator id 0")
	}
	def, err := decodeCatalogEntry(table, entry)
	if err != nil {
		return nil, err
	}
	if table == keys.MetaTable {
		return nil, errors.Newf("table %d is the metadata table", table)
	}
	e.def = *def
	if hi > uint64(def.VnodeCount) || lo >= hi {
		return nil, errors.Newf("vnode range [%d, %d) of table %d of %d vnodes", lo, hi, table, def.VnodeCount)
	}
	e.lo, e.hi = int(lo), int(hi)
	e.lower, e.upper = moveSpan(table, e.lo, e.hi)
	if flags[0]&^(exportFlagCompacted|exportFlagEstimates) != 0 {
		return nil, errors.Newf("flags %08b: unknown bits", flags[0])
	}
	e.stats.Compacted = flags[0]&exportFlagCompacted != 0
	if e.stats.CopiedVersions < 0 || e.stats.CopiedBytes < 0 {
		return nil, errors.Newf("copied versions %d, bytes %d", e.stats.CopiedVersions, e.stats.CopiedBytes)
	}

	n := d.count("shared SSTs", 1+1+6*9+1)
	for i := range n {
		var m pebble.SharedSSTMeta
		if v := d.fixed("level", 1); v != nil {
			m.Level = v[0]
		}
		m.Size = d.uvarint("size")
		for _, k := range []*pebble.InternalKey{&m.Smallest, &m.Largest, &m.SmallestPointKey, &m.LargestPointKey, &m.SmallestRangeKey, &m.LargestRangeKey} {
			if k.UserKey = d.bytes("bound"); len(k.UserKey) == 0 {
				k.UserKey = nil // none: the range key bounds
			}
			k.Trailer = pebble.InternalKeyTrailer(d.u64("bound trailer"))
		}
		backing := d.bytes("backing")
		if d.err != nil {
			return nil, d.err
		}
		if err := e.checkShared(&m, backing); err != nil {
			return nil, errors.Wrapf(err, "shared SST %d", i)
		}
		m.Backing = &receivedBacking{b: backing}
		e.shared = append(e.shared, m)
		e.stats.SharedSSTs++
		e.stats.SharedBytes += int64(m.Size)
	}

	n = d.count("copied SSTs", 1)
	for i := range n {
		sst := d.bytes("copied SST")
		if d.err == nil && len(sst) == 0 {
			return nil, errors.Newf("copied SST %d is empty", i)
		}
		e.copiedSSTs = append(e.copiedSSTs, sst)
	}
	if (len(e.copiedSSTs) == 0) != (e.stats.CopiedVersions == 0) {
		return nil, errors.Newf("%d copied SSTs for %d copied versions", len(e.copiedSSTs), e.stats.CopiedVersions)
	}

	live := &livebuckets.VnodeRows{Table: table, Lo: e.lo, Hi: e.hi, Estimates: flags[0]&exportFlagEstimates != 0}
	live.Counts.Rows = d.varint("live rows")
	live.Counts.Bytes = d.varint("live bytes")
	n = d.count("live statistics rows", 2)
	for range n {
		k := d.bytes("live statistics key")
		v := d.bytes("live statistics value")
		live.Rows = append(live.Rows, livebuckets.MetaEntry{Key: k, Value: v})
	}
	if d.err != nil {
		return nil, d.err
	}
	if d.off != len(d.b) {
		return nil, errors.Newf("%d bytes after the live statistics", len(d.b)-d.off)
	}
	if err := live.Check(e.def.VnodeCount); err != nil {
		return nil, err
	}
	e.live = live
	e.stats.LiveRows, e.stats.LiveBytes = live.Counts.Rows, live.Counts.Bytes
	return e, nil
}

// checkShared checks a decoded shared SST's metadata against the export's
// range: what Pebble's ingestion takes on trust.
func (e *VnodeExport) checkShared(m *pebble.SharedSSTMeta, backing []byte) error {
	if int(m.Level) < remote.SharedLevelsStart || m.Level >= 7 {
		return errors.Newf("level %d, not a shared level (%d to 6)", m.Level, remote.SharedLevelsStart)
	}
	if m.Size == 0 {
		return errors.New("size 0")
	}
	if len(backing) == 0 {
		return errors.New("empty backing")
	}
	if m.SmallestRangeKey.UserKey != nil || m.LargestRangeKey.UserKey != nil ||
		m.SmallestRangeKey.Trailer != 0 || m.LargestRangeKey.Trailer != 0 {
		return errors.New("range key bounds (the store writes no range keys)")
	}
	fk := keys.Comparer.FormatKey
	for _, k := range []pebble.InternalKey{m.Smallest, m.Largest, m.SmallestPointKey, m.LargestPointKey} {
		if k.Kind() > pebble.InternalKeyKindMax {
			return errors.Newf("bound %s of unknown kind %d", fk(k.UserKey), k.Kind())
		}
		if keys.Compare(k.UserKey, e.lower) < 0 || keys.Compare(k.UserKey, e.upper) > 0 {
			return errors.Newf("bound %s outside the range [%s, %s)", fk(k.UserKey), fk(e.lower), fk(e.upper))
		}
	}
	if keys.Compare(m.Smallest.UserKey, m.Largest.UserKey) > 0 || keys.Compare(m.SmallestPointKey.UserKey, m.LargestPointKey.UserKey) > 0 {
		return errors.Newf("bounds [%s, %s] out of order", fk(m.Smallest.UserKey), fk(m.Largest.UserKey))
	}
	if keys.Compare(m.Smallest.UserKey, m.SmallestPointKey.UserKey) > 0 || keys.Compare(m.LargestPointKey.UserKey, m.Largest.UserKey) > 0 {
		return errors.Newf("point bounds [%s, %s] outside the bounds [%s, %s]",
			fk(m.SmallestPointKey.UserKey), fk(m.LargestPointKey.UserKey), fk(m.Smallest.UserKey), fk(m.Largest.UserKey))
	}
	if keys.Compare(m.Largest.UserKey, e.upper) == 0 && !m.Largest.IsExclusiveSentinel() {
		return errors.Newf("bound %s at the range's end, inclusive", fk(m.Largest.UserKey))
	}
	return nil
}
