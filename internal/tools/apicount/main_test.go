package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestContractBudget holds the exported API of packages stats and lsm, the
// contract a storage engineer reads, to the budget of issue 14: at most 42
// top-level names, at most 196 counting the exported methods and fields of
// their types (through aliases). A name added past it needs a name taken
// out, or a reason to raise the budget here.
func TestContractBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list -export")
	}
	counts, err := run([]string{"github.com/lsmstats/lsmstats/stats", "github.com/lsmstats/lsmstats/lsm"})
	require.NoError(t, err)
	require.Len(t, counts, 2)
	top, all := 0, 0
	for _, c := range counts {
		t.Logf("%s: %d top-level, %d with methods and fields", c.path, len(c.names), len(c.names)+len(c.members))
		top += len(c.names)
		all += len(c.names) + len(c.members)
	}
	require.LessOrEqual(t, top, 42, "exported top-level names of stats and lsm")
	require.LessOrEqual(t, all, 196, "exported names, methods and fields of stats and lsm")
}

// TestMembersFollowAliases: an alias counts the methods and fields of the
// type it stands for, and a type's pointer method set counts.
func TestMembersFollowAliases(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list -export")
	}
	counts, err := run([]string{"github.com/lsmstats/lsmstats/stats"})
	require.NoError(t, err)
	require.Len(t, counts, 1)
	require.Contains(t, counts[0].members, "Live.EstimateRows (method)")
	require.Contains(t, counts[0].members, "RowEstimate.Rows (field)")
	require.Contains(t, counts[0].members, "Metrics.Collect (method)") // on *Metrics
}
