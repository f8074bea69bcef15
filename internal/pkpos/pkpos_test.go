package pkpos

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSharedPrefixAndWord(t *testing.T) {
	require.Equal(t, 0, SharedPrefix(nil, []byte("a")))
	require.Equal(t, 3, SharedPrefix([]byte("abcd"), []byte("abcx")))
	require.Equal(t, 2, SharedPrefix([]byte("ab"), []byte("abc")))
	require.Equal(t, uint64(0x0102000000000000), Word([]byte{1, 2}))
	require.Equal(t, uint64(0x0102030405060708), Word([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9}))
}

// TestInterpolate: 0 and 1 at and beyond the ends, the position of the
// bytes past the shared prefix in between, and 0.5 where those bytes do
// not grow from a to b.
func TestInterpolate(t *testing.T) {
	a, b := []byte("key-\x00\x00"), []byte("key-\x00\x10")
	for _, c := range []struct {
		x    []byte
		want float64
	}{
		{[]byte("key-"), 0},
		{a, 0},
		{[]byte("key-\x00\x04"), 0.25},
		{[]byte("key-\x00\x08\xff"), 0.5 + 0xff/float64(0x10<<8)},
		{b, 1},
		{[]byte("kez"), 1},
	} {
		require.InDelta(t, c.want, Interpolate(a, c.x, b), 1e-12, "%q", c.x)
	}
	// a and b differ only past the 8 bytes after their shared prefix.
	a, b = []byte("k"), []byte("k\x00\x00\x00\x00\x00\x00\x00\x00\x01")
	require.Equal(t, 0.5, Interpolate(a, []byte("k\x00\x00"), b))
}
