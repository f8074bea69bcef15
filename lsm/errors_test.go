package lsm

import (
	"testing"

	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// TestEpochSealedIsEpochOrder: an op on an epoch its writer sealed keeps
// its own message and is an ErrEpochOrder, which callers test for.
func TestEpochSealedIsEpochOrder(t *testing.T) {
	s, err := Open(t.TempDir(), &Options{Logger: QuietLogger(nil)})
	require.NoError(t, err)
	defer s.Close()
	def := TableDef{ID: 1, VnodeCount: 4, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	w, err := s.NewWriter(1, nil, nil)
	require.NoError(t, err)
	defer w.Close()
	k := keys.AppendUint64(nil, 1)
	require.NoError(t, w.Insert(1, def.VnodeOf(k), k, []byte("a")))
	require.NoError(t, w.Seal(1))
	k2 := keys.AppendUint64(nil, 2)
	err = w.Insert(1, def.VnodeOf(k2), k2, []byte("b"))
	require.ErrorIs(t, err, ErrEpochOrder)
	require.ErrorContains(t, err, "lsmstats: epoch is sealed")
}
