package lsm

import (
	"bytes"
	"context"
	"encoding/binary"
	"slices"
	"sort"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/lsmstats/lsmstats/internal/livebuckets"
	"github.com/lsmstats/lsmstats/keys"
)

// The sync manager decides when buffered data leaves memory: at every
// checkpoint (Commit writes all sealed epochs it covers), and earlier when the
// writers' buffers together pass Options.MemoryWatermark. Then it spills the
// largest in-memory pieces, each into a staged SST outside Pebble, until the
// total is below half the watermark. A spilled piece keeps its version
// (epoch, spill offset) and the writer continues the epoch with the next
// offset, so versions written later in the epoch sort newer.
//
// Staged spills are invisible to every reader but their own writer, and they
// are deleted at Open: spilled data never survives a crash unless its epoch
// commits, because the only way into Pebble is the single ingestion of a
// Commit. Before a spill writes data of an epoch above the durable epoch
// high-water mark, the mark is raised durably, so that no epoch whose data
// reached the disk is used again after a restart.

// spillFile is one staged piece. Its values carry the entry's prior state:
// flags u8 (bit 0: the row was live before the piece) | prior bytes uvarint |
// row.
type spillFile struct {
	path   string
	reader *sstable.Reader
	epoch  uint64
	offset uint16
}

func encodeSpillValue(dst []byte, e *entry) []byte {
	var flags byte
	if e.prior {
		flags = 1
	}
	dst = append(dst, flags)
	dst = binary.AppendUvarint(dst, uint64(e.priorBytes))
	return append(dst, e.value...)
}

func decodeSpillValue(v []byte) (prior bool, priorBytes int64, row []byte, err error) {
	if len(v) < 2 {
		return false, 0, nil, errors.Newf("lsmstats: staged value %x too short", v)
	}
	pb, n := binary.Uvarint(v[1:])
	if n <= 0 {
		return false, 0, nil, errors.Newf("lsmstats: staged value %x has a bad header", v)
	}
	return v[0]&1 == 1, int64(pb), v[1+n:], nil
}

// maybeSpill runs the memory-watermark policy.
func (s *Store) maybeSpill() error {
	s.ingestMu.Lock()
	defer s.ingestMu.Unlock()
	limit := s.opts.MemoryWatermark
	if s.buffered.Load() <= limit {
		return nil
	}
	if err := s.checkWritable(); err != nil {
		return err
	}
	type cand struct {
		b     *epochBuf
		bytes int64
	}
	var cands []cand
	writers, orphans := s.writersAndOrphans()
	for _, b := range orphans {
		cands = append(cands, cand{b, b.bytes})
	}
	for _, w := range writers {
		w.mu.Lock()
		for _, b := range w.sealed {
			cands = append(cands, cand{b, b.bytes})
		}
		if w.open != nil {
			cands = append(cands, cand{w.open, w.open.bytes})
		}
		w.mu.Unlock()
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].bytes > cands[j].bytes })
	for _, c := range cands {
		if s.buffered.Load() <= limit/2 {
			break
		}
		if err := s.spill(c.b); err != nil {
			return s.fail(err)
		}
	}
	return nil
}

// spill writes the in-memory piece of b to a staged SST. The caller holds
// ingestMu.
func (s *Store) spill(b *epochBuf) error {
	w := b.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(b.entries) == 0 { // nothing since the last spill, or released
		return nil
	}
	if b.offset == 1<<16-1 {
		return errors.Newf("lsmstats: %s spilled epoch %d %d times", w.name, b.epoch, b.offset)
	}
	s.phase("spilling")
	defer s.phase("buffering")
	if err := s.raiseHWM(b.epoch); err != nil {
		return err
	}
	path := s.stagingPath("spill")
	// Not synced: only this writer reads the spill, and Open deletes it.
	out := &output{fs: s.fs, opts: s.spillOpts, target: 1 << 62, path: func() string { return path }, noSync: true}
	entries := b.sortedEntries()
	if len(entries) == 0 {
		// Only no-op entries: nothing to write, the memory is freed all the
		// same and the offset stays.
		s.buffered.Add(-b.bytes)
		b.piece = b.piece.reuse(0)
		return nil
	}
	version := keys.MakeVersion(b.epoch, b.offset)
	var key, val []byte
	for _, e := range entries {
		kind := keys.KindDelete
		if e.put {
			kind = keys.KindPut
		}
		key = keys.AppendSuffix(append(key[:0], e.prefix...), version, kind)
		val = encodeSpillValue(val[:0], e)
		if err := out.set(key, val); err != nil {
			out.abort()
			return err
		}
	}
	if _, err := out.finish(); err != nil {
		return err
	}
	sf, err := s.openSpill(path, b.epoch, b.offset)
	if err != nil {
		_ = s.fs.Remove(path)
		return err
	}
	b.spills = append(b.spills, sf)
	s.metrics.spills.Add(1)
	s.metrics.spilledBytes.Add(b.bytes)
	s.buffered.Add(-b.bytes)
	b.piece = b.piece.reuse(0)
	b.offset++
	return nil
}

// raiseHWM durably raises the epoch high-water mark to epoch. The caller
// holds ingestMu.
func (s *Store) raiseHWM(epoch uint64) error {
	s.mu.Lock()
	hwm := s.mu.hwm
	s.mu.Unlock()
	if epoch <= hwm {
		return nil
	}
	if err := s.ingestMeta([]livebuckets.MetaEntry{{Key: keys.MetaKey([]byte(hwmName)), Value: be64(epoch)}}); err != nil {
		return errors.Wrapf(err, "lsmstats: raise epoch high-water mark to %d", epoch)
	}
	s.mu.Lock()
	s.mu.hwm = max(s.mu.hwm, epoch)
	s.mu.Unlock()
	return nil
}

func (s *Store) openSpill(path string, epoch uint64, offset uint16) (*spillFile, error) {
	f, err := s.fs.Open(path)
	if err != nil {
		return nil, errors.Wrapf(err, "lsmstats: open spill %s", path)
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		_ = f.Close()
		return nil, errors.Wrapf(err, "lsmstats: open spill %s", path)
	}
	r, err := sstable.NewReader(context.Background(), readable, s.popts.MakeReaderOptions())
	if err != nil {
		_ = readable.Close()
		return nil, errors.Wrapf(err, "lsmstats: open spill %s", path)
	}
	return &spillFile{path: path, reader: r, epoch: epoch, offset: offset}, nil
}

func (f *spillFile) close(s *Store) {
	if f.reader != nil {
		_ = f.reader.Close()
		f.reader = nil
	}
	if err := s.fs.Remove(f.path); err != nil && !errors.Is(err, errNotExist) {
		s.logf("lsmstats: remove %s: %v", f.path, err)
	}
}

// get looks up a prefix in the staged piece.
func (f *spillFile) get(prefix []byte) (row []byte, put, found bool, err error) {
	it, err := f.reader.NewIter(sstable.NoTransforms, prefix, nil, sstable.AssertNoBlobHandles)
	if err != nil {
		return nil, false, false, err
	}
	defer it.Close()
	kv := it.SeekGE(prefix, 0)
	if kv == nil {
		return nil, false, false, it.Error()
	}
	if !bytes.Equal(kv.K.UserKey[:keys.Split(kv.K.UserKey)], prefix) {
		return nil, false, false, nil
	}
	v, _, err := kv.Value(nil)
	if err != nil {
		return nil, false, false, err
	}
	_, _, row, err = decodeSpillValue(v)
	if err != nil {
		return nil, false, false, errors.Wrapf(err, "spill %s", f.path)
	}
	k, err := keys.Decode(kv.K.UserKey)
	if err != nil {
		return nil, false, false, err
	}
	return append([]byte(nil), row...), k.Kind == keys.KindPut, true, nil
}

// iter returns an iterator over the staged piece, in key order.
func (f *spillFile) iter() (sstable.Iterator, error) {
	return f.reader.NewIter(sstable.NoTransforms, nil, nil, sstable.AssertNoBlobHandles)
}

// writersAndOrphans returns the open writers and the buffers of closed
// writers not yet committed, as of now (a copy: callers lock each writer to
// read its buffers).
func (s *Store) writersAndOrphans() ([]*Writer, []*epochBuf) {
	s.mu.Lock()
	defer s.mu.Unlock()
	writers := make([]*Writer, 0, len(s.mu.writers))
	for w := range s.mu.writers {
		writers = append(writers, w)
	}
	return writers, slices.Clone(s.mu.orphans)
}

// spillAll spills every in-memory piece, whatever the watermark. Tests use it
// to place spills exactly.
func (s *Store) spillAll() (int, error) {
	s.ingestMu.Lock()
	defer s.ingestMu.Unlock()
	if err := s.checkWritable(); err != nil {
		return 0, err
	}
	writers, bufs := s.writersAndOrphans()
	for _, w := range writers {
		w.mu.Lock()
		bufs = append(bufs, w.sealed...)
		if w.open != nil {
			bufs = append(bufs, w.open)
		}
		w.mu.Unlock()
	}
	n := 0
	for _, b := range bufs {
		if len(b.entries) == 0 {
			continue
		}
		if err := s.spill(b); err != nil {
			return n, s.fail(err)
		}
		n++
	}
	return n, nil
}
