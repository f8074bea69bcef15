package stats

import (
	"testing"

	"github.com/lsmstats/lsmstats/internal/livebuckets"
	"github.com/stretchr/testify/require"
)

// TestTwinConstants: the bucket sizes documented here are the ones the
// live statistics use. (The twin types need no test: a conversion between
// them, which this package makes, compiles only while their fields agree.)
func TestTwinConstants(t *testing.T) {
	require.Equal(t, livebuckets.SplitDivisor, SplitDivisor)
	require.Equal(t, livebuckets.TableBucketBudget, TableBucketBudget)
}

// TestZeroValues: the zero Snapshot, Version and Live answer as empty.
func TestZeroValues(t *testing.T) {
	var s Snapshot
	require.Zero(t, s.Vnode(1, 0))
	require.Zero(t, s.Physical.Table(1))
	require.Zero(t, s.Physical.NumFiles())
	require.Empty(t, s.Physical.Tables())
	require.Empty(t, s.Live.Tables())
	require.False(t, s.Live.ContainsEstimates(1))
	require.Equal(t, RowEstimate{}, s.EstimateRows(1, 0, nil, nil))
	require.Equal(t, []RowEstimate{{}}, s.AppendEstimates(nil, 1, []RangeQuery{{Vnode: 3, Hi: []byte{1}, HiInclusive: true}}))
	require.Nil(t, s.Live.Partition(1, nil, 4))
}
