package backfill

import (
	"encoding/binary"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

func TestStateRoundTrip(t *testing.T) {
	pk := keys.AppendUint64(keys.AppendUint64(nil, 7), 9)
	for _, s := range []VnodeState{
		{Vnode: 3},
		{Vnode: 3, Cursor: pk, RowCount: 12},
		{Vnode: 3, Cursor: pk, Finished: true, RowCount: 1 << 40},
		{Vnode: 3, Cursor: make([]byte, 200), RowCount: 127},
		{Vnode: 3, Cursor: make([]byte, 127), RowCount: 128},
		{Vnode: 3, Cursor: pk, RowCount: 1<<64 - 1},
	} {
		for _, rc := range []bool{false, true} {
			b := EncodeState(s, rc)
			if rc {
				// What the executor subtracts to count stats-only bytes.
				require.Len(t, b, len(EncodeState(s, false))+uvarintLen(s.RowCount))
			}
			got, has, err := DecodeState(3, b)
			require.NoError(t, err)
			require.Equal(t, rc, has)
			want := s
			if !rc {
				want.RowCount = 0
			}
			require.Equal(t, want, got)
			for i := range b {
				_, _, err := DecodeState(3, b[:i])
				require.True(t, errors.Is(err, ErrCorruptState), "truncated at %d: %v", i, err)
			}
		}
	}
	for _, b := range [][]byte{{2, 0, 0}, {1, 0x80, 0}, {1, 0, 5, 1}, {1, 0, 0, 9}} {
		_, _, err := DecodeState(1, b)
		require.ErrorIs(t, err, ErrCorruptState, "%x", b)
	}
}

func TestMetaRoundTrip(t *testing.T) {
	m := jobMeta{step: 12, barrier: 7, started: true, hwm: []Figure{{Approach: "stats", Pct: 12.5, Consumed: 10, Total: 80}},
		version: metaVersion, limit: 25000,
		resume: ETAResume{Origin: time.Unix(0, 1700000000123456789), Run: 3, Actors: 4, RateLimit: 50000, Rate: 12345.5, Interval: 0.25, Intervals: 40,
			BackgroundBusy: 1.5, BackgroundWritten: 3e8, Slowdown: 0.25, SlowdownBusy: 2.5},
		mode: ModeSnapshot, phase: PhaseLogStore, snapEpoch: 9, snapTotals: []int64{300, 0, 7}, logConsumed: 41, logCursor: []byte{0, 1, 2},
		upstreams: []uint32{1, 11, 1 << 20}}
	b := encodeMeta(m)
	got, err := decodeMeta(b)
	require.NoError(t, err)
	require.Equal(t, m, got)
	for i := range b {
		_, err := decodeMeta(b[:i])
		require.ErrorIs(t, err, ErrCorruptMeta, "truncated at %d", i)
	}
	// A version 1 row (before the rate limit and the ETA) still decodes.
	v1 := []byte{1, 12, 7, 1, 0}
	got, err = decodeMeta(v1)
	require.NoError(t, err)
	require.Equal(t, jobMeta{step: 12, barrier: 7, started: true, version: 1}, got)
	// A version 4 row (before the ETA's background figures) still decodes.
	v4 := slices.Clone(b[:len(b)-32])
	v4[0] = 4
	got, err = decodeMeta(v4)
	require.NoError(t, err)
	old := m
	old.version = 4
	old.resume.BackgroundBusy, old.resume.BackgroundWritten, old.resume.Slowdown, old.resume.SlowdownBusy = 0, 0, 0, 0
	require.Equal(t, old, got)
	// A negative background figure is corruption.
	neg := slices.Clone(b)
	binary.BigEndian.PutUint64(neg[len(neg)-8:], math.Float64bits(-1))
	_, err = decodeMeta(neg)
	require.ErrorIs(t, err, ErrCorruptMeta)
	// A version 2 row (an arrangement backfill, before the mode) still
	// decodes.
	arr := old
	arr.mode, arr.phase, arr.snapEpoch, arr.snapTotals, arr.logConsumed, arr.logCursor, arr.upstreams = 0, 0, 0, nil, 0, nil, nil
	v3 := encodeMeta(arr)
	v3 = v3[:len(v3)-32]
	v3[0] = 4 // the layout of 3
	_, err = decodeMeta(v3)
	require.NoError(t, err)
	v2 := slices.Clone(v3[:len(v3)-7]) // mode, phase, epoch, no totals, consumed, cursor length, no upstreams: a byte each
	v2[0] = 2
	got, err = decodeMeta(v2)
	require.NoError(t, err)
	arr.version = 2
	require.Equal(t, arr, got)
	// An unknown mode or phase is corruption.
	for _, i := range []int{len(v3) - 7, len(v3) - 6} {
		bad := slices.Clone(v3)
		bad[i] = 7
		_, err = decodeMeta(bad)
		require.ErrorIs(t, err, ErrCorruptMeta)
	}
	// A negative rate is corruption.
	bad := slices.Clone(v2)
	binary.BigEndian.PutUint64(bad[len(bad)-8:], math.Float64bits(-1))
	_, err = decodeMeta(bad)
	require.ErrorIs(t, err, ErrCorruptMeta)
}

// FuzzDecodeState: no input may panic, and whatever decodes survives a
// re-encoding unchanged (bytes may differ: varints have overlong forms).
func FuzzDecodeState(f *testing.F) {
	f.Add(EncodeState(VnodeState{Cursor: []byte{1, 2}, RowCount: 5}, true))
	f.Add(EncodeState(VnodeState{Finished: true}, false))
	f.Add(encodeMeta(jobMeta{step: 1, hwm: []Figure{{Approach: "rowcount"}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, rc, err := DecodeState(0, b)
		if err == nil {
			s2, rc2, err := DecodeState(0, EncodeState(s, rc))
			require.NoError(t, err)
			require.Equal(t, s, s2)
			require.Equal(t, rc, rc2)
		}
		if m, err := decodeMeta(b); err == nil {
			m2, err := decodeMeta(encodeMeta(m))
			require.NoError(t, err)
			m.version = metaVersion // encodeMeta writes the current version
			require.Equal(t, m, m2)
		}
	})
}
