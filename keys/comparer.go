package keys

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
)

// ComparerName is persisted by Pebble; a store written with another comparer
// refuses to open.
const ComparerName = "lsmstats.mvcc.v1"

// Comparer is the Pebble comparer of every lsmstats store. Compare orders by
// prefix, then suffix, which on well-formed keys is exactly bytes.Compare (see
// the package doc) and on arbitrary bytes is still a total order that agrees
// with Split, so a foreign key in the store cannot corrupt Pebble's ordering.
// Separator, Successor and ImmediateSuccessor return keys of valid shapes.
var Comparer = &pebble.Comparer{
	Compare:              Compare,
	Equal:                bytes.Equal,
	AbbreviatedKey:       abbreviatedKey,
	Separator:            separator,
	Successor:            successor,
	ImmediateSuccessor:   immediateSuccessor,
	Split:                Split,
	ComparePointSuffixes: bytes.Compare,
	CompareRangeSuffixes: bytes.Compare,
	FormatKey:            formatKey,
	// Pebble's ValidateKey stays nil: CheckComparer validates the tails of
	// prefixes (for synthetic prefixes), which are not keys of ours. The
	// store checks shapes itself with Validate.
	Name: ComparerName,
}

// Compare orders keys by prefix, then suffix. On keys of the valid shapes it
// equals bytes.Compare; the explicit split only matters for foreign bytes.
func Compare(a, b []byte) int {
	an, bn := Split(a), Split(b)
	if c := bytes.Compare(a[:an], b[:bn]); c != 0 {
		return c
	}
	return bytes.Compare(a[an:], b[bn:])
}

// abbreviatedKey is the first 8 bytes of the prefix, zero padded: monotone in
// Compare's order.
func abbreviatedKey(key []byte) uint64 {
	var buf [8]byte
	copy(buf[:], key[:Split(key)])
	return binary.BigEndian.Uint64(buf[:])
}

// separator returns a short valid key k with a <= k < b: the bound of b's
// table or vnode, or b's bare prefix, whichever is shortest and still above a.
func separator(dst, a, b []byte) []byte {
	for _, cand := range candidates(b) {
		if len(cand) < len(a) && Compare(a, cand) <= 0 && Compare(cand, b) < 0 {
			return append(dst, cand...)
		}
	}
	return append(dst, a...)
}

// candidates lists valid keys that sort at or below b, shortest first.
func candidates(b []byte) [][]byte {
	table, ok := TableOf(b)
	if !ok || table == MetaTable {
		return nil
	}
	out := [][]byte{b[:tableLen]}
	if len(b) >= headerLen {
		out = append(out, b[:headerLen])
	}
	if p := Split(b); p < len(b) {
		out = append(out, b[:p])
	}
	return out
}

// successor returns a short valid key k >= a: the bound of the next table.
func successor(dst, a []byte) []byte {
	if len(a) == 0 {
		return AppendTableBound(dst, 0)
	}
	table, ok := TableOf(a)
	if !ok || table >= MetaTable-1 {
		return append(dst, a...)
	}
	return AppendTableBound(dst, table+1)
}

// immediateSuccessor returns the smallest prefix key above prefix a. For the
// prefix of a table row that must sort after every version of the row, so it
// is a followed by nine 0xFF bytes (one more than the suffix's version field):
// a "prefix fence" that is never stored. For other keys it is a | 0x00.
func immediateSuccessor(dst, a []byte) []byte {
	dst = append(dst, a...)
	if isRowPrefix(a) {
		for range 9 {
			dst = append(dst, 0xFF)
		}
		return dst
	}
	return append(dst, 0x00)
}

func isRowPrefix(a []byte) bool {
	table, ok := TableOf(a)
	return ok && table != MetaTable && len(a) >= headerLen+1 && a[len(a)-1] == prefixEnd
}

func isPrefixFence(k []byte) bool {
	n := len(k)
	if n < headerLen+1+9 {
		return false
	}
	for _, c := range k[n-9:] {
		if c != 0xFF {
			return false
		}
	}
	return isRowPrefix(k[:n-9])
}

// Validate accepts the three key shapes, metadata keys and their bounds, and
// the prefix fences of immediateSuccessor: every key the store or Pebble (via
// Separator, Successor, ImmediateSuccessor) may hand to the comparer.
func Validate(k []byte) error {
	table, ok := TableOf(k)
	switch {
	case !ok:
		return errors.Wrapf(ErrMalformedKey, "key %x is shorter than a table id", k)
	case table == MetaTable:
		if IsVersioned(k) {
			return errors.Wrapf(ErrMalformedKey, "metadata key %x has a version suffix", k)
		}
		return nil
	case len(k) == tableLen || len(k) == headerLen:
		return nil // range bound
	case IsVersioned(k):
		if len(k) < minTableKeyLen {
			return errors.Wrapf(ErrMalformedKey, "versioned key %x is shorter than table|vnode", k)
		}
		return nil
	case isRowPrefix(k), isPrefixFence(k):
		return nil
	default:
		return errors.Wrapf(ErrMalformedKey, "key %x has none of the key shapes", k)
	}
}

type keyFormatter []byte

func formatKey(k []byte) fmt.Formatter { return keyFormatter(k) }

// Format renders a key as t<table>/v<vnode>/<pk hex>[@epoch.spill:kind], or
// meta/<name> for metadata keys.
func (k keyFormatter) Format(s fmt.State, _ rune) {
	key := []byte(k)
	if name, ok := MetaName(key); ok {
		fmt.Fprintf(s, "meta/%q", name)
		return
	}
	if dk, err := Decode(key); err == nil {
		fmt.Fprint(s, dk.String())
		return
	}
	table, vnode, ok := Header(key)
	switch {
	case ok && len(key) > headerLen:
		fmt.Fprintf(s, "t%d/v%d/%x", table, vnode, key[headerLen:])
	case ok:
		fmt.Fprintf(s, "t%d/v%d", table, vnode)
	case len(key) == tableLen:
		fmt.Fprintf(s, "t%d", table)
	default:
		fmt.Fprintf(s, "%x", key)
	}
}
