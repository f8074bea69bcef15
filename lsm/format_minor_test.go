package lsm

import (
	"encoding/binary"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// TestMetadataOfNewerMinor: a metadata row of a name this version does not
// know is corruption in a store of its own minor format, and kept and
// ignored in a store of a newer minor format, which opens read-only only.
func TestMetadataOfNewerMinor(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{Logger: QuietLogger(nil)}
	s, err := Open(dir, opts)
	require.NoError(t, err)
	def := TableDef{ID: 1, Name: "t", VnodeCount: 4, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	w, err := s.NewWriter(1, nil, nil)
	require.NoError(t, err)
	pk := keys.AppendUint64(nil, 7)
	v := keys.Vnode(pk, 4)
	require.NoError(t, w.Insert(1, v, pk, []byte("row")))
	require.NoError(t, w.Seal(1))
	require.NoError(t, s.Commit(1))
	require.NoError(t, w.Close())
	pebbleDir := s.pebbleDirPath()
	require.NoError(t, s.Close())

	// Rows written as a later version would: a new name, and maybe its
	// minor version.
	setMeta := func(name string, value []byte) {
		db, err := pebble.Open(pebbleDir, opts.PebbleOptions())
		require.NoError(t, err)
		require.NoError(t, db.Set(keys.MetaKey([]byte(name)), value, pebble.Sync))
		require.NoError(t, db.Close())
	}
	setMeta("zz_future_feature", []byte{1})

	// Its own minor format: the row is corruption, named.
	_, err = Open(dir, opts)
	require.ErrorIs(t, err, errCorruptMetadata)
	require.True(t, lsmstats.IsCorruption(err))
	require.ErrorContains(t, err, `"zz_future_feature"`)
	// Read-only, it is left out and reported by Verify.
	ro, err := Open(dir, &Options{Logger: QuietLogger(nil), ReadOnly: true})
	require.NoError(t, err)
	rep, err := ro.Verify()
	require.NoError(t, err)
	require.NotEmpty(t, rep.Corrupt, "verify reports the unknown row")
	require.Contains(t, rep.Corrupt[0], "zz_future_feature")
	require.NoError(t, ro.Close())

	// A newer minor format: refused for writing, read-only it reads.
	setMeta(keys.FormatMinorName, binary.BigEndian.AppendUint64(nil, formatMinor+1))
	_, err = Open(dir, opts)
	require.True(t, errors.Is(err, ErrFormatTooNew), "%v", err)
	require.ErrorContains(t, err, "read-only")
	ro, err = Open(dir, &Options{Logger: QuietLogger(nil), ReadOnly: true})
	require.NoError(t, err)
	row, ok, err := ro.Get(1, v, pk)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "row", string(row))
	rep, err = ro.Verify()
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep)
	require.NoError(t, ro.Close())
}
