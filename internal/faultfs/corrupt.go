package faultfs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/sstable/block"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats/keys"
)

// Corruption of files at rest: the corruption tests damage the files of a
// closed store — an SST block of a given kind, the MANIFEST, Pebble's
// OPTIONS, the WAL, a staged spill — and check what the store makes of it.

// Block is one block of an SST: its kind, and its byte range including the
// trailer (compression type and checksum) that follows it.
type Block struct {
	Kind   string
	Offset int64
	Len    int64
}

// Block kinds, as SSTBlocks names them.
const (
	BlockData       = "data"
	BlockIndex      = "index"
	BlockTopIndex   = "top-index"
	BlockFilter     = "filter"
	BlockRangeDel   = "range-del"
	BlockRangeKey   = "range-key"
	BlockValue      = "value"
	BlockValueIndex = "value-index"
	BlockProperties = "properties"
	BlockMetaIndex  = "metaindex"
	BlockBlobRefs   = "blob-refs"
	BlockFooter     = "footer"
)

// SSTBlocks returns the blocks of the SST at path (a store's, with the keys
// package's comparer), in file order. The footer has no trailer.
func SSTBlocks(path string) ([]Block, error) {
	f, err := vfs.Default.Open(path)
	if err != nil {
		return nil, err
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	o := &pebble.Options{Comparer: keys.Comparer}
	o.EnsureDefaults()
	r, err := sstable.NewReader(context.Background(), readable, o.MakeReaderOptions())
	if err != nil {
		_ = readable.Close()
		return nil, errors.Wrapf(err, "faultfs: open %s", path)
	}
	defer r.Close()
	l, err := r.Layout()
	if err != nil {
		return nil, errors.Wrapf(err, "faultfs: layout of %s", path)
	}
	var out []Block
	add := func(kind string, h block.Handle, trailer bool) {
		if h.Length == 0 && h.Offset == 0 {
			return // absent
		}
		n := int64(h.Length)
		if trailer {
			n += block.TrailerLen
		}
		out = append(out, Block{Kind: kind, Offset: int64(h.Offset), Len: n})
	}
	for _, h := range l.Data {
		add(BlockData, h.Handle, true)
	}
	for _, h := range l.Index {
		add(BlockIndex, h, true)
	}
	add(BlockTopIndex, l.TopIndex, true)
	for _, h := range l.Filter {
		add(BlockFilter, h.Handle, true)
	}
	add(BlockRangeDel, l.RangeDel, true)
	add(BlockRangeKey, l.RangeKey, true)
	for _, h := range l.ValueBlock {
		add(BlockValue, h, true)
	}
	add(BlockValueIndex, l.ValueIndex, true)
	add(BlockProperties, l.Properties, true)
	add(BlockMetaIndex, l.MetaIndex, true)
	add(BlockBlobRefs, l.BlobReferenceIndex, true)
	add(BlockFooter, l.Footer, false)
	// A single-level index has no top index: Layout then names the index
	// block as both.
	dedup := out[:0]
	seen := map[[2]int64]bool{}
	for _, b := range out {
		k := [2]int64{b.Offset, b.Len}
		if !seen[k] {
			seen[k] = true
			dedup = append(dedup, b)
		}
	}
	return dedup, nil
}

// Injection is one way to damage a byte range of a file.
type Injection string

// The injections: flip every bit of some bytes, zero a range, cut the file
// at an offset.
const (
	Flip     Injection = "flip"
	Zero     Injection = "zero"
	Truncate Injection = "truncate"
)

// Injections lists every injection.
var Injections = []Injection{Flip, Zero, Truncate}

// Damage applies inj to the byte range [off, off+n) of the file at path
// (clamped to its size): Flip inverts the bytes, Zero zeroes them
// (changing nothing where they were zero already: the caller picks a range
// that is not), Truncate cuts the file at off. It returns what it did, for
// the test log.
func Damage(path string, inj Injection, off, n int64) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	size := int64(len(b))
	off = min(max(off, 0), size)
	n = min(max(n, 1), size-off)
	switch inj {
	case Flip:
		for i := off; i < off+n; i++ {
			b[i] ^= 0xff
		}
	case Zero:
		clear(b[off : off+n])
	case Truncate:
		b, n = b[:off], size-off
	default:
		return "", errors.Newf("faultfs: unknown injection %q", inj)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s %d bytes at %d of %d", inj, n, off, size), nil
}

// RandomRange picks a byte range within [off, off+size): 1 to 16 bytes for
// Flip and Zero, from a random offset to the end for Truncate. Zero avoids
// ranges that are already zero where it can.
func RandomRange(r *rand.Rand, path string, inj Injection, off, size int64) (int64, int64, error) {
	if size <= 0 {
		return 0, 0, errors.Newf("faultfs: empty range in %s", path)
	}
	if inj == Truncate {
		return off + r.Int64N(size), 0, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	pick := func() (int64, int64) {
		at := off + r.Int64N(size)
		return at, min(1+r.Int64N(16), off+size-at)
	}
	at, n := pick()
	if inj == Zero {
		for range 32 {
			if nonZero(b, at, n) {
				break
			}
			at, n = pick()
		}
	}
	return at, n, nil
}

func nonZero(b []byte, off, n int64) bool {
	for i := off; i < off+n && i < int64(len(b)); i++ {
		if b[i] != 0 {
			return true
		}
	}
	return false
}
