package keys

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/cockroachdb/errors"
)

const (
	// MetaTable is the table id reserved for the store's metadata keys.
	MetaTable uint32 = math.MaxUint32

	// KindDelete marks an MVCC tombstone (empty value).
	KindDelete byte = 0x00
	// KindPut marks a row version (the value is the row).
	KindPut byte = 0x01

	// SuffixLen is the length of a versioned key's suffix:
	// ^version u64 | kind u8 | 0x0A.
	SuffixLen = 10

	// MaxEpoch is the largest epoch: versions keep 16 bits for the spill
	// offset.
	MaxEpoch = 1<<48 - 1

	// DefaultVnodeCount and MaxVnodeCount bound a table's vnode count, as in
	// RisingWave.
	DefaultVnodeCount = 256
	MaxVnodeCount     = 32768

	// tableLen and vnodeLen are the byte widths of the leading fields.
	tableLen  = 4
	headerLen = 6

	terminator byte = 0x0A
	prefixEnd  byte = 0x00

	// minTableKeyLen is the shortest versioned table key: an empty pk.
	minTableKeyLen = headerLen + 1 + SuffixLen
)

// ErrMalformedKey marks keys in the store that have none of the key shapes.
var ErrMalformedKey = errors.New("lsmstats: malformed key")

// Version is epoch<<16 | spill offset.
type Version uint64

// MakeVersion returns the version of the given spill of epoch.
func MakeVersion(epoch uint64, spill uint16) Version {
	return Version(epoch<<16 | uint64(spill))
}

// Epoch returns the epoch part of v.
func (v Version) Epoch() uint64 { return uint64(v) >> 16 }

// Spill returns the spill offset part of v.
func (v Version) Spill() uint16 { return uint16(v) }

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Epoch(), v.Spill()) }

// AppendTableBound appends the range bound of a whole table.
func AppendTableBound(dst []byte, table uint32) []byte {
	return binary.BigEndian.AppendUint32(dst, table)
}

// AppendVnodeBound appends the range bound of one vnode of a table.
func AppendVnodeBound(dst []byte, table uint32, vnode uint16) []byte {
	dst = binary.BigEndian.AppendUint32(dst, table)
	return binary.BigEndian.AppendUint16(dst, vnode)
}

// TableSpan returns the [start, end) bounds of a table's keys. The end of the
// last user table is the start of the metadata table; the metadata table's
// end is nil (unbounded).
func TableSpan(table uint32) (start, end []byte) {
	start = AppendTableBound(nil, table)
	if table != MetaTable {
		end = AppendTableBound(nil, table+1)
	}
	return start, end
}

// VnodeSpan returns the [start, end) bounds of one vnode of a table.
func VnodeSpan(table uint32, vnode uint16) (start, end []byte) {
	start = AppendVnodeBound(nil, table, vnode)
	if vnode == math.MaxUint16 {
		_, end = TableSpan(table)
	} else {
		end = AppendVnodeBound(nil, table, vnode+1)
	}
	return start, end
}

// AppendPrefix appends the bare prefix table | vnode | pk | 0x00.
func AppendPrefix(dst []byte, table uint32, vnode uint16, pk []byte) []byte {
	dst = AppendVnodeBound(dst, table, vnode)
	dst = append(dst, pk...)
	return append(dst, prefixEnd)
}

// AppendSuffix appends ^version | kind | 0x0A to a bare prefix.
func AppendSuffix(dst []byte, v Version, kind byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, math.MaxUint64-uint64(v))
	return append(dst, kind, terminator)
}

// AppendVersioned appends a whole versioned key.
func AppendVersioned(dst []byte, table uint32, vnode uint16, pk []byte, v Version, kind byte) []byte {
	return AppendSuffix(AppendPrefix(dst, table, vnode, pk), v, kind)
}

// AppendSeekKey appends the key that positions an iterator at the newest
// version of prefix that is visible at epoch: the largest version of epoch
// with kind 0x00, so that a delete at exactly that version is not skipped.
func AppendSeekKey(dst, prefix []byte, epoch uint64) []byte {
	dst = append(dst, prefix...)
	return AppendSuffix(dst, MakeVersion(epoch, math.MaxUint16), KindDelete)
}

// Split is the Pebble Split function: the length of the MVCC prefix of key.
// It never fails; unversioned keys are their own prefix.
func Split(key []byte) int {
	n := len(key)
	if n > SuffixLen && key[n-1] == terminator && key[n-SuffixLen-1] == prefixEnd && key[n-2] <= KindPut {
		return n - SuffixLen
	}
	return n
}

// IsVersioned reports whether key has an MVCC suffix.
func IsVersioned(key []byte) bool { return Split(key) < len(key) }

// Key is a decoded versioned table key. PK aliases the key's bytes.
type Key struct {
	Table   uint32
	Vnode   uint16
	PK      []byte
	Version Version
	Kind    byte
}

// Prefix returns the bare prefix of k.
func (k Key) Prefix() []byte { return AppendPrefix(nil, k.Table, k.Vnode, k.PK) }

func (k Key) String() string {
	kind := "put"
	if k.Kind == KindDelete {
		kind = "del"
	}
	return fmt.Sprintf("t%d/v%d/%x@%s:%s", k.Table, k.Vnode, k.PK, k.Version, kind)
}

// Decode decodes a versioned table key. It returns an error marked
// ErrMalformedKey for anything else, metadata keys included.
func Decode(key []byte) (Key, error) {
	p := Split(key)
	if p == len(key) || p < headerLen+1 {
		return Key{}, errors.Wrapf(ErrMalformedKey, "key %x is not a versioned table key", key)
	}
	k := Key{
		Table: binary.BigEndian.Uint32(key),
		Vnode: binary.BigEndian.Uint16(key[tableLen:]),
		PK:    key[headerLen : p-1],
		Kind:  key[len(key)-2],
	}
	if k.Table == MetaTable {
		return Key{}, errors.Wrapf(ErrMalformedKey, "metadata key %x has a version suffix", key)
	}
	k.Version = Version(math.MaxUint64 - binary.BigEndian.Uint64(key[p:]))
	return k, nil
}

// Header decodes the table and vnode of any key of at least 6 bytes.
func Header(key []byte) (table uint32, vnode uint16, ok bool) {
	if len(key) < headerLen {
		if len(key) >= tableLen {
			return binary.BigEndian.Uint32(key), 0, false
		}
		return 0, 0, false
	}
	return binary.BigEndian.Uint32(key), binary.BigEndian.Uint16(key[tableLen:]), true
}

// TableOf returns the table id of a key of at least 4 bytes.
func TableOf(key []byte) (uint32, bool) {
	if len(key) < tableLen {
		return 0, false
	}
	return binary.BigEndian.Uint32(key), true
}

// Vnode returns the vnode of a row whose encoded distribution key is distKey.
func Vnode(distKey []byte, vnodeCount int) uint16 {
	return uint16(crc32IEEE(distKey) % uint32(vnodeCount))
}

// CheckVnodeCount returns an error unless 1 <= n <= MaxVnodeCount.
func CheckVnodeCount(n int) error {
	if n < 1 || n > MaxVnodeCount {
		return errors.Newf("lsmstats: vnode count %d out of range [1, %d]", n, MaxVnodeCount)
	}
	return nil
}

// MetaKey returns the metadata key for name: 0xFFFFFFFF | name | 0x00.
func MetaKey(name []byte) []byte {
	k := AppendTableBound(make([]byte, 0, tableLen+len(name)+1), MetaTable)
	k = append(k, name...)
	return append(k, prefixEnd)
}

// AppendMetaKey appends to dst the metadata key of the name made of parts
// (MetaKey of their concatenation).
func AppendMetaKey(dst []byte, parts ...[]byte) []byte {
	dst = AppendTableBound(dst, MetaTable)
	for _, p := range parts {
		dst = append(dst, p...)
	}
	return append(dst, prefixEnd)
}

// MetaName returns the name of a metadata key, or false if key is not one.
func MetaName(key []byte) ([]byte, bool) {
	if len(key) < tableLen+1 || binary.BigEndian.Uint32(key) != MetaTable || key[len(key)-1] != prefixEnd {
		return nil, false
	}
	return key[tableLen : len(key)-1], true
}

// MetaSpan returns the bounds of every metadata key whose name starts with
// namePrefix.
func MetaSpan(namePrefix string) (start, end []byte) {
	start = AppendTableBound(nil, MetaTable)
	start = append(start, namePrefix...)
	end = append([]byte(nil), start...)
	// namePrefix is never all 0xFF: bump its last byte.
	for i := len(end) - 1; i >= tableLen; i-- {
		if end[i] != 0xFF {
			end[i]++
			return start, end[:i+1]
		}
	}
	return start, nil
}

// CatalogKey returns the catalog key of a table: table/<id u32 BE>.
func CatalogKey(table uint32) []byte {
	return MetaKey(binary.BigEndian.AppendUint32([]byte(CatalogPrefix), table))
}

// ParseCatalogKey returns the table id of a catalog key.
func ParseCatalogKey(key []byte) (uint32, bool) {
	name, ok := MetaName(key)
	if !ok || len(name) != len(CatalogPrefix)+4 || !bytes.HasPrefix(name, []byte(CatalogPrefix)) {
		return 0, false
	}
	return binary.BigEndian.Uint32(name[len(CatalogPrefix):]), true
}
