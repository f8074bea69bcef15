package objstore_test

import (
	"testing"

	"github.com/lsmstats/lsmstats/objstore"
	"github.com/stretchr/testify/require"
)

// SSTName names objects as Pebble does (pebble_test.go checks the names
// Pebble itself gave), and ParseName reads them and their reference
// markers back, refusing every other name.
func TestNames(t *testing.T) {
	require.Equal(t, "7913-7-000010.sst", objstore.SSTName(7, 10))
	require.Equal(t, "7f54-12345678901-1234567.sst", objstore.SSTName(12345678901, 1234567))
	for _, c := range []struct{ creator, file uint64 }{{7, 10}, {1, 1}, {1 << 62, 999999}, {42, 1234567}} {
		n, ok := objstore.ParseName(objstore.SSTName(c.creator, c.file))
		require.True(t, ok)
		require.Equal(t, objstore.ObjectName{Creator: c.creator, FileNum: c.file}, n)
	}
	n, ok := objstore.ParseName("7913-7-000010.sst.ref.9.000012")
	require.True(t, ok)
	require.Equal(t, objstore.ObjectName{Creator: 7, FileNum: 10, Ref: true, RefCreator: 9, RefFileNum: 12}, n)
	for _, bad := range []string{
		"", "7913-7-000010", "7914-7-000010.sst", "7913-7-00010.sst", "7913-+7-000010.sst", "7913-7-000010.sstx",
		"7913-7-000010.sst.ref.9", "7913-7-000010.sst.ref.9.12", "7913-7-000010.sst.ref.x.000012", "791-7-000010.sst",
		"7913-7-000010-1.sst", "lsmstats-store-7", "7913-7-000010.blob",
	} {
		_, ok := objstore.ParseName(bad)
		require.False(t, ok, bad)
	}
}
