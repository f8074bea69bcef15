package lsmstats

import (
	stderrors "errors"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/require"
)

func TestCorruptionSentinel(t *testing.T) {
	a := NewCorruptionSentinel("lsmstats/test: corrupt a")
	b := NewCorruptionSentinel("lsmstats/test: corrupt b")
	plain := errors.New("lsmstats/test: not corrupt")

	wa := errors.Wrapf(a, "key %x", []byte{1})
	require.ErrorIs(t, wa, a)
	require.ErrorIs(t, wa, ErrCorruption)
	require.True(t, IsCorruption(wa))
	require.NotErrorIs(t, wa, b, "two sentinels stay distinct")
	require.True(t, stderrors.Is(wa, ErrCorruption), "the standard library agrees")
	require.Equal(t, "key 01: lsmstats/test: corrupt a", wa.Error())

	// Deeper wrapping, secondary errors and combinations keep both.
	deep := errors.Wrap(errors.WithSecondaryError(errors.Wrap(wa, "open"), plain), "lsmstats")
	require.ErrorIs(t, deep, a)
	require.True(t, IsCorruption(deep))
	require.True(t, IsCorruption(errors.CombineErrors(wa, plain)))
	// A secondary error is not a cause (cockroachdb/errors): combine with
	// the corruption first.
	require.False(t, IsCorruption(errors.CombineErrors(plain, wa)))

	// Used as a mark, a sentinel records its identity only: MarkCorruption
	// adds the class.
	m := errors.Mark(plain, a)
	require.True(t, errors.Is(m, a))
	require.False(t, IsCorruption(m))
	mm := errors.Mark(MarkCorruption(plain), a)
	require.True(t, errors.Is(mm, a))
	require.True(t, IsCorruption(mm))

	require.False(t, IsCorruption(plain))
	require.False(t, IsCorruption(nil))
	require.Nil(t, MarkCorruption(nil))
	require.True(t, IsCorruption(MarkCorruption(plain)))
	require.Equal(t, plain.Error(), MarkCorruption(plain).Error(), "marking keeps the message")

	c := Corruptionf("sst %06d: block %d", 12, 3)
	require.True(t, IsCorruption(c))
	require.Equal(t, "sst 000012: block 3", c.Error())
}

// TestPebbleCorruption: Pebble's marker is recognised, and marking one of
// Pebble's errors keeps it Pebble's.
func TestPebbleCorruption(t *testing.T) {
	perr := errors.Mark(errors.New("pebble: file 000012: block 1/2: checksum mismatch"), pebble.ErrCorruption)
	require.True(t, IsCorruption(perr))
	require.True(t, IsCorruption(errors.Wrap(perr, "lsmstats: read")))
	require.False(t, errors.Is(perr, ErrCorruption))
	marked := MarkCorruption(perr)
	require.True(t, errors.Is(marked, ErrCorruption))
	require.True(t, pebble.IsCorruptionError(marked), "Pebble's marker stays")
	require.Equal(t, perr.Error(), marked.Error())
	require.Same(t, marked, MarkCorruption(marked), "marking twice changes nothing")
	require.False(t, IsCorruption(pebble.ErrNotFound))
}
