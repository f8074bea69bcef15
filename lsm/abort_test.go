package lsm

import (
	"io"
	"testing"

	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// TestWriterAbort: the sealed epochs of a closed writer commit with the
// next Commit; those of an aborted writer are gone, and a new writer can
// take the same epoch over the same rows.
func TestWriterAbort(t *testing.T) {
	s, err := Open(t.TempDir(), &Options{Logger: QuietLogger(io.Discard)})
	require.NoError(t, err)
	defer s.Close()
	def := TableDef{ID: 1, VnodeCount: 1, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	pk := keys.AppendUint64(nil, 1)
	write := func(epoch uint64, row string) *Writer {
		w, err := s.NewWriter(1, nil, nil)
		require.NoError(t, err)
		require.NoError(t, w.Insert(epoch, 0, pk, []byte(row)))
		require.NoError(t, w.Seal(epoch))
		return w
	}
	require.NoError(t, write(1, "aborted").Abort())
	require.Zero(t, s.Metrics().BufferedBytes, "the aborted epoch's buffer is released")
	w := write(1, "kept") // the same epoch and row again: no collision
	require.NoError(t, w.Close())
	require.NoError(t, s.Commit(1))
	row, ok, err := s.Get(1, 0, pk)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "kept", string(row), "the closed writer's sealed epoch committed")
	require.EqualValues(t, 1, s.Stats().Live.Table(1).Rows)
}
