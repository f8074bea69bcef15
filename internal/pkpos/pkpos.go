// Package pkpos places a pk between two others by its bytes: the position
// that the physical statistics interpolate between an SST's samples
// (ssttracker.CountRange) and that the live statistics interpolate between
// a bucket's anchors (livebuckets). The functions are pure and safe for
// concurrent use; nil and empty pks are the smallest pk.
package pkpos

import (
	"bytes"
	"encoding/binary"
)

// SharedPrefix returns the length of the longest common prefix of a and b.
func SharedPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// Word returns the first 8 bytes of b as a big-endian number, zero-padded
// when b is shorter.
func Word(b []byte) uint64 {
	var w [8]byte
	copy(w[:], b)
	return binary.BigEndian.Uint64(w[:])
}

// Interpolate returns the position of x in [a, b] as a fraction: 0 at or
// below a, 1 at or above b, and in between the eight bytes after a and b's
// common prefix (which x shares) read as a big-endian number; 0.5 when that
// number does not grow from a to b.
func Interpolate(a, x, b []byte) float64 {
	if bytes.Compare(x, b) >= 0 {
		return 1
	}
	if bytes.Compare(x, a) <= 0 {
		return 0
	}
	n := SharedPrefix(a, b)
	fa, fx, fb := Word(a[n:]), Word(x[n:]), Word(b[n:])
	if fb <= fa {
		return 0.5
	}
	return min(float64(fx-fa)/float64(fb-fa), 1)
}
