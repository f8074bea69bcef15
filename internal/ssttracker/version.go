package ssttracker

// A Version is the sum of the FileSummaries of one set of live SSTs. The
// Tracker derives each Version from the previous one by subtracting the SSTs
// that left and adding those that arrived; nothing in a published Version
// changes afterwards.
//
// # Layout (copy-on-write)
//
//	Version ─ tables []*tableState (sorted by id)
//	           └ tableState ─ totals, chunks []*vnodeChunk (vnode>>6)
//	                           └ vnodeChunk [64]*vnodeState
//	                              └ vnodeState ─ counts, files []fileVnode (sorted by file)
//
// A refresh copies the table slice (O(tables) pointers), and only the
// tableStates, chunks and vnodeStates that the changed files touch; every
// other node is shared with the previous Version. Each node records the
// generation of the builder that created it, so a builder mutates its own
// copies in place and copies anything older on first write. Work per refresh
// is thus proportional to the (table, vnode)s of the changed files, plus the
// O(files) file list.
//
// vnodeState.files lists the live files that hold the vnode (a handful: the
// L0 files plus about one per level), which is what Range walks.

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/internal/sstsummary"
)

// SummarySource says where a live file's FileSummary came from.
type SummarySource uint8

const (
	// FromPayload: decoded from the file's user property.
	FromPayload SummarySource = iota
	// FromVirtualScan: a virtual SST; its backing file's keys within the
	// virtual bounds were classified (the property covers the whole backing
	// file).
	FromVirtualScan
	// FromRebuild: the payload was missing, corrupt or inconsistent with
	// Pebble's NumEntries; the file's keys were classified instead. The
	// Version lists these files in Rebuilt.
	FromRebuild
	// FromMemtable: not a file but a part of a batch committed through the
	// memtable and not flushed yet; its keys were classified as the batch
	// was built (unflushed.go).
	FromMemtable
)

func (s SummarySource) String() string {
	switch s {
	case FromPayload:
		return "payload"
	case FromVirtualScan:
		return "virtual-scan"
	case FromRebuild:
		return "rebuilt"
	case FromMemtable:
		return "memtable"
	default:
		return fmt.Sprintf("SummarySource(%d)", uint8(s))
	}
}

// FileInfo describes one live SST of a Version (a copy; its Summary is
// shared and read-only).
type FileInfo struct {
	// FileNum is Pebble's table number.
	FileNum uint64
	// BackingNum is the disk file number of the physical file (equal to
	// FileNum unless Virtual).
	BackingNum uint64
	Level      int
	// Size is Pebble's size of the table (for a virtual SST, its estimated
	// share of the backing file).
	Size    uint64
	Virtual bool
	// Smallest and Largest are the table's user key bounds (inclusive,
	// unless LargestExclusive); for a virtual SST, the part of the backing
	// file it covers.
	Smallest, Largest []byte
	LargestExclusive  bool
	// NumEntries, NumRangeDeletions, RawKeySize and RawValueSize are Pebble's
	// properties of the physical file. For a virtual SST NumEntries counts
	// the point keys within its bounds plus NumRangeDeletions, the range
	// deletions overlapping them; RawKeySize and RawValueSize are the
	// backing file's scaled by the share of its point keys in bounds.
	NumEntries        uint64
	NumRangeDeletions uint64
	RawKeySize        uint64
	RawValueSize      uint64
	// Summary is shared and read-only.
	Summary *sstsummary.FileSummary
	Source  SummarySource
}

// FileError records a live file whose payload could not be used, and why.
type FileError struct {
	FileNum uint64
	Err     error
}

func (e FileError) Error() string { return fmt.Sprintf("sst %06d: %v", e.FileNum, e.Err) }

// Version is an immutable snapshot of the physical statistics over one
// consistent set of live SSTs. All methods are safe for concurrent use. The
// zero value is the empty Version (no files); Tracker.Current never returns
// nil.
type Version struct {
	gen   uint64
	files []*liveFile // sorted by FileNum
	// slots[i] is the number and level of files[i]: a refresh diffs the
	// listing against them without loading each file's struct, which a
	// store of a thousand files would meet cold (a cache miss per file).
	slots   []fileSlot
	mem     []*liveFile // unflushed batches' parts, in sequence order
	tables  []*tableState
	rebuilt []FileError // sorted by FileNum
}

// fileSlot is a live file's number and level.
type fileSlot struct {
	num   uint64
	level int
}

// slotsOf returns the slots of files.
func slotsOf(files []*liveFile) []fileSlot {
	out := make([]fileSlot, len(files))
	for i, f := range files {
		out[i] = fileSlot{f.info.FileNum, f.info.Level}
	}
	return out
}

// fileIndex returns the index of the live file num in v.files.
func (v *Version) fileIndex(num uint64) (int, bool) {
	return slices.BinarySearchFunc(v.slots, num, func(s fileSlot, n uint64) int {
		return cmp.Compare(s.num, n)
	})
}

type liveFile struct {
	info FileInfo
	// values are the apportioned value bytes of each (table, vnode) of the
	// summary, in summary order.
	values []uint64
	// rebuildErr is why the summary was rebuilt from keys (FromRebuild).
	rebuildErr error
	// batchSeq is an unflushed part's batch's first sequence number.
	batchSeq uint64
}

// tableTotals are a table's counts summed over its vnodes, and the
// number of vnodes with data.
type tableTotals struct {
	Counts sstsummary.Counts
	Vnodes int
}

type tableState struct {
	gen    uint64
	id     uint32
	totals tableTotals
	chunks []*vnodeChunk
}

const chunkShift = 6

type vnodeChunk struct {
	gen    uint64
	vnodes [1 << chunkShift]*vnodeState
}

type vnodeState struct {
	gen    uint64
	counts sstsummary.Counts
	files  []fileVnode
}

type fileVnode struct {
	fileNum uint64
	vs      *sstsummary.VnodeSummary
	values  uint64
}

// Vnode returns the counts of one (table, vnode): zero if it has no data.
func (v *Version) Vnode(table uint32, vnode uint16) sstsummary.Counts {
	if s := v.vnodeState(table, vnode); s != nil {
		return s.counts
	}
	return sstsummary.Counts{}
}

func (v *Version) table(table uint32) *tableState {
	ts := v.tables
	lo, hi := 0, len(ts)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ts[m].id < table {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(ts) && ts[lo].id == table {
		return ts[lo]
	}
	return nil
}

func (v *Version) vnodeState(table uint32, vnode uint16) *vnodeState {
	t := v.table(table)
	if t == nil {
		return nil
	}
	ci := int(vnode >> chunkShift)
	if ci >= len(t.chunks) || t.chunks[ci] == nil {
		return nil
	}
	return t.chunks[ci].vnodes[vnode&(1<<chunkShift-1)]
}

// Table returns the counts of one table summed over its vnodes, and the
// number of its vnodes with data: zero if it has no data.
func (v *Version) Table(table uint32) (counts sstsummary.Counts, vnodes int) {
	if t := v.table(table); t != nil {
		return t.totals.Counts, t.totals.Vnodes
	}
	return sstsummary.Counts{}, 0
}

// Tables returns the ids of the tables with data, in increasing order.
func (v *Version) Tables() []uint32 {
	out := make([]uint32, len(v.tables))
	for i, t := range v.tables {
		out[i] = t.id
	}
	return out
}

// Vnodes returns the vnodes of a table that have data, in increasing order.
func (v *Version) Vnodes(table uint32) []uint16 {
	t := v.table(table)
	if t == nil {
		return nil
	}
	out := make([]uint16, 0, t.totals.Vnodes)
	t.each(func(vnode uint16, _ *vnodeState) { out = append(out, vnode) })
	return out
}

func (t *tableState) each(f func(uint16, *vnodeState)) {
	for ci, c := range t.chunks {
		if c == nil {
			continue
		}
		for i, s := range c.vnodes {
			if s != nil {
				f(uint16(ci<<chunkShift|i), s)
			}
		}
	}
}

// Sum returns the counts of a table summed over a set of vnodes; a nil set
// means every vnode.
func (v *Version) Sum(table uint32, vnodes *roaring.Bitmap) sstsummary.Counts {
	t := v.table(table)
	if t == nil {
		return sstsummary.Counts{}
	}
	if vnodes == nil {
		return t.totals.Counts
	}
	var sum sstsummary.Counts
	if vnodes.GetCardinality() <= uint64(t.totals.Vnodes) {
		vnodes.Iterate(func(x uint32) bool {
			if x > math.MaxUint16 {
				return false
			}
			if s := v.vnodeState(table, uint16(x)); s != nil {
				sum.Add(s.counts)
			}
			return true
		})
		return sum
	}
	t.each(func(vnode uint16, s *vnodeState) {
		if vnodes.Contains(uint32(vnode)) {
			sum.Add(s.counts)
		}
	})
	return sum
}

// NumFiles returns the number of live files.
func (v *Version) NumFiles() int { return len(v.files) }

// Files returns v's live files in increasing file number order. The
// summaries are shared and read-only.
func Files(v *Version) []FileInfo {
	out := make([]FileInfo, len(v.files))
	for i, f := range v.files {
		out[i] = f.info
	}
	return out
}

// File returns one live file of v.
func File(v *Version, fileNum uint64) (FileInfo, bool) {
	i, ok := v.fileIndex(fileNum)
	if !ok {
		return FileInfo{}, false
	}
	return v.files[i].info, true
}

// Rebuilt returns v's live files whose payload could not be used and whose
// summary was rebuilt from their keys, with the reason.
func Rebuilt(v *Version) []FileError { return slices.Clone(v.rebuilt) }

// CountRange returns v's physical counts of MVCC entries of one (table, vnode)
// with lo <= pk < hi (nil: unbounded), summed over the live files. Each
// count comes with bounds that always contain the true value (see the
// collector's error bound) and a linear interpolation between samples.
func CountRange(v *Version, table uint32, vnode uint16, lo, hi []byte) sstsummary.RangeCounts {
	var rc sstsummary.RangeCounts
	s := v.vnodeState(table, vnode)
	if s == nil || (lo != nil && hi != nil && bytes.Compare(lo, hi) >= 0) {
		return rc
	}
	for _, fv := range s.files {
		rc.Add(fv.vs.CountRange(lo, hi))
	}
	rc.Files = len(s.files)
	return rc
}

// DiffVersions returns nil if v and o hold the same files and the same sums, else an
// error describing the first differences. Verify and the tests use it to
// compare an incremental Version with a recomputation.
func DiffVersions(v, o *Version) error {
	var diffs []string
	add := func(format string, args ...interface{}) {
		if len(diffs) < 10 {
			diffs = append(diffs, fmt.Sprintf(format, args...))
		}
	}
	for _, x := range []*Version{v, o} {
		if !slices.Equal(x.slots, slotsOf(x.files)) {
			add("version %d: the file slots do not follow its files", x.gen)
		}
	}
	nums := func(es []FileError) []uint64 {
		out := make([]uint64, len(es))
		for i, e := range es {
			out[i] = e.FileNum
		}
		return out
	}
	if a, b := nums(v.rebuilt), nums(o.rebuilt); !slices.Equal(a, b) {
		add("rebuilt files: %v vs %v", a, b)
	}
	vf, of := Files(v), Files(o)
	if len(vf) != len(of) {
		add("files: %d vs %d", len(vf), len(of))
	}
	for i := range min(len(vf), len(of)) {
		a, b := vf[i], of[i]
		if a.FileNum != b.FileNum || a.Level != b.Level || a.NumEntries != b.NumEntries || a.Source != b.Source {
			add("file %d: %06d L%d %d entries %s vs %06d L%d %d entries %s", i,
				a.FileNum, a.Level, a.NumEntries, a.Source, b.FileNum, b.Level, b.NumEntries, b.Source)
		}
	}
	vt, ot := v.Tables(), o.Tables()
	if !slices.Equal(vt, ot) {
		add("tables: %v vs %v", vt, ot)
	}
	for _, id := range vt {
		if a, b := v.table(id).totals, o.table(id).totals; a != b {
			add("table %d: %+v vs %+v", id, a, b)
		}
		vv, ov := v.Vnodes(id), o.Vnodes(id)
		if !slices.Equal(vv, ov) {
			add("table %d vnodes: %v vs %v", id, vv, ov)
			continue
		}
		for _, vn := range vv {
			a, b := v.vnodeState(id, vn), o.vnodeState(id, vn)
			if a.counts != b.counts {
				add("t%d/v%d: %+v vs %+v", id, vn, a.counts, b.counts)
			}
			if len(a.files) != len(b.files) {
				add("t%d/v%d: %d files vs %d", id, vn, len(a.files), len(b.files))
				continue
			}
			for k := range a.files {
				if a.files[k].fileNum != b.files[k].fileNum || a.files[k].values != b.files[k].values {
					add("t%d/v%d: file %d: %+v vs %+v", id, vn, k, a.files[k], b.files[k])
				}
			}
		}
	}
	if len(v.rebuilt) != len(o.rebuilt) {
		add("rebuilt: %v vs %v", v.rebuilt, o.rebuilt)
	} else {
		for i := range v.rebuilt {
			if v.rebuilt[i].FileNum != o.rebuilt[i].FileNum {
				add("rebuilt: %v vs %v", v.rebuilt, o.rebuilt)
				break
			}
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	return errors.Newf("lsmstats/stats: versions differ:\n  %s", strings.Join(diffs, "\n  "))
}

// apportion returns total*weight/denom rounded down (0 if denom is 0).
func apportion(total, weight, denom uint64) uint64 {
	if denom == 0 || weight == 0 {
		return 0
	}
	hi, lo := bits.Mul64(total, weight)
	if hi >= denom { // cannot happen with weight <= denom; stay safe
		return total
	}
	q, _ := bits.Div64(hi, lo, denom)
	return q
}

// newLiveFile wraps a loaded file and apportions its RawValueSize.
func newLiveFile(info FileInfo) *liveFile {
	f := &liveFile{info: info}
	s := info.Summary
	var denom uint64
	n := 0
	for i := range s.Tables {
		for j := range s.Tables[i].Vnodes {
			denom += s.Tables[i].Vnodes[j].Counts.Puts
			n++
		}
	}
	f.values = make([]uint64, 0, n)
	for i := range s.Tables {
		for j := range s.Tables[i].Vnodes {
			f.values = append(f.values, apportion(info.RawValueSize, s.Tables[i].Vnodes[j].Counts.Puts, denom))
		}
	}
	return f
}

// builder derives a new Version from a base one.
type builder struct {
	gen    uint64
	tables []*tableState
}

func newBuilder(base *Version) *builder {
	return &builder{gen: base.gen + 1, tables: slices.Clone(base.tables)}
}

// tableFor returns a mutable tableState for id, creating it if needed.
func (b *builder) tableFor(id uint32) *tableState {
	i, ok := slices.BinarySearchFunc(b.tables, id, func(t *tableState, id uint32) int {
		return cmp.Compare(uint64(t.id), uint64(id))
	})
	if !ok {
		t := &tableState{gen: b.gen, id: id}
		b.tables = slices.Insert(b.tables, i, t)
		return t
	}
	t := b.tables[i]
	if t.gen != b.gen {
		c := *t
		c.gen = b.gen
		c.chunks = slices.Clone(t.chunks)
		t = &c
		b.tables[i] = t
	}
	return t
}

// vnodeFor returns a mutable vnodeState of t (which must be mutable),
// creating it if needed.
func (b *builder) vnodeFor(t *tableState, vnode uint16) *vnodeState {
	ci := int(vnode >> chunkShift)
	if ci >= len(t.chunks) {
		t.chunks = append(t.chunks, make([]*vnodeChunk, ci+1-len(t.chunks))...)
	}
	c := t.chunks[ci]
	switch {
	case c == nil:
		c = &vnodeChunk{gen: b.gen}
		t.chunks[ci] = c
	case c.gen != b.gen:
		cc := *c
		cc.gen = b.gen
		c = &cc
		t.chunks[ci] = c
	}
	slot := &c.vnodes[vnode&(1<<chunkShift-1)]
	s := *slot
	switch {
	case s == nil:
		s = &vnodeState{gen: b.gen}
		*slot = s
		t.totals.Vnodes++
	case s.gen != b.gen:
		cs := *s
		cs.gen = b.gen
		// Room for the file a refresh most often adds (a flush's, or a
		// checkpoint's batch), so that apply's insert does not copy the
		// list again.
		cs.files = append(make([]fileVnode, 0, len(s.files)+1), s.files...)
		s = &cs
		*slot = s
	}
	return s
}

func (b *builder) apply(f *liveFile, add bool) {
	s := f.info.Summary
	k := 0
	for i := range s.Tables {
		ts := &s.Tables[i]
		t := b.tableFor(ts.Table)
		for j := range ts.Vnodes {
			vs := &ts.Vnodes[j]
			c := vs.Counts
			c.ValueBytes = f.values[k]
			k++
			st := b.vnodeFor(t, vs.Vnode)
			pos, found := slices.BinarySearchFunc(st.files, f.info.FileNum, func(fv fileVnode, n uint64) int {
				return cmp.Compare(fv.fileNum, n)
			})
			if add {
				st.counts.Add(c)
				t.totals.Counts.Add(c)
				if !found {
					st.files = slices.Insert(st.files, pos, fileVnode{fileNum: f.info.FileNum, vs: vs, values: c.ValueBytes})
				}
			} else {
				st.counts.Sub(c)
				t.totals.Counts.Sub(c)
				if found {
					st.files = slices.Delete(st.files, pos, pos+1)
				}
				if len(st.files) == 0 {
					t.chunks[vs.Vnode>>chunkShift].vnodes[vs.Vnode&(1<<chunkShift-1)] = nil
					t.totals.Vnodes--
				}
			}
		}
	}
}

// finish drops empty tables and trailing empty chunks and returns the
// Version.
func (b *builder) finish(files []*liveFile, slots []fileSlot, rebuilt []FileError, mem []*liveFile) *Version {
	tables := b.tables[:0]
	for _, t := range b.tables {
		if t.gen == b.gen {
			for i, c := range t.chunks {
				if c != nil && c.gen == b.gen && c.empty() {
					t.chunks[i] = nil
				}
			}
			for len(t.chunks) > 0 && t.chunks[len(t.chunks)-1] == nil {
				t.chunks = t.chunks[:len(t.chunks)-1]
			}
			if t.totals.Vnodes == 0 {
				continue
			}
		}
		tables = append(tables, t)
	}
	clear(b.tables[len(tables):])
	return &Version{gen: b.gen, files: files, slots: slots, mem: mem, tables: tables, rebuilt: rebuilt}
}

func (c *vnodeChunk) empty() bool {
	for _, s := range c.vnodes {
		if s != nil {
			return false
		}
	}
	return true
}
