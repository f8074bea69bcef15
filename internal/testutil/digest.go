package testutil

import "hash"

// RowIter is what DigestRows reads: an lsm.Iter, or a snapshot's.
type RowIter interface {
	First() bool
	Next() bool
	PK() []byte
	Row() []byte
	Close() error
}

// DigestRows writes every row of it into h, each pk and row delimited so
// that no two row sequences digest alike by concatenation, closes it, and
// returns the rows read.
func DigestRows(h hash.Hash, it RowIter) (int, error) {
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		h.Write(it.PK())
		h.Write([]byte{0})
		h.Write(it.Row())
		h.Write([]byte{1})
		n++
	}
	return n, it.Close()
}
