package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestClusterCommand runs backfill --nodes 3 on a bucket of the shared S3
// server (the nodes are this test binary run as lsmstats node): one move,
// one node SIGKILLed, whose vnodes go to the two others; the report says
// the moves (compacted into the bucket first) copied nothing, the kill was
// recovered and reassigned, the displayed figures never went down, the
// stats figure kept to the truth, and every node's MV equals its upstream
// with Verify clean.
func TestClusterCommand(t *testing.T) {
	_, _, url := cliBucket(t, "cluster")
	jsonPath := filepath.Join(t.TempDir(), "out", "cluster.json")
	out, errOut, code := runCmd(t, "backfill", "--nodes", "3", "--workload", "mixed", "--rows", "12000", "--vnodes", "32",
		"--actors", "1", "--chunk-size", "64", "--barrier-rows", "128", "--checkpoint-every", "2",
		"--move-at", "3", "--kill-node-at", "6", "--lose-disk", "--object-store", url, "--json", jsonPath, "--metrics-addr", "127.0.0.1:0")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	var rep clusterReport
	b, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rep))
	require.True(t, rep.MVMatches, "stdout:\n%s", out)
	require.True(t, rep.Monotone)
	// The --move-at move, then the killed node's ranges to the two others:
	// each compacted into the bucket first, so nothing copied.
	require.Greater(t, len(rep.Moves), 2)
	for _, m := range rep.Moves {
		require.Positive(t, m.Stats.SharedSSTs, "move %+v", m)
		require.Zero(t, m.Stats.CopiedBytes, "move %+v", m)
	}
	require.Len(t, rep.Kills, 1)
	require.Len(t, rep.Losses, 1)
	require.Equal(t, rep.Kills[0].Node, rep.Losses[0].Node)
	require.True(t, rep.Kills[0].DiskLost)
	require.Contains(t, errOut, "store restored from its backup", "the killed node, its directory deleted, came back from its backup")
	require.True(t, rep.Losses[0].Reassigned)
	require.Len(t, rep.Vnodes, 2, "the killed node's vnodes went to the two others")
	require.LessOrEqual(t, rep.ErrorMeanPP, 0.2)
	require.LessOrEqual(t, rep.ErrorMaxPP, 1.0)
	require.Len(t, rep.Checks, 2)
	last := rep.Checkpoints[len(rep.Checkpoints)-1]
	require.True(t, last.Finished)
	require.Equal(t, 100.0, last.Figures["stats"].Shown)
	t.Logf("%d checkpoints, stats error mean %.3f max %.3f pp; move: %+v; loss: %+v", len(rep.Checkpoints), rep.ErrorMeanPP, rep.ErrorMaxPP, rep.Moves[0].Stats, rep.Losses[0])
}

// TestClusterCommandBadInput: --nodes without an object store, a node
// without its directory, a node kill without --nodes and --lose-disk
// without a kill are usage errors naming what is missing; a node's bad
// backup name is an error naming it.
func TestClusterCommandBadInput(t *testing.T) {
	_, errOut, code := runCmd(t, "backfill", "--nodes", "2", "--rows", "100")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--nodes needs --object-store")
	_, errOut, code = runCmd(t, "node", "--object-store", "s3://b/p?endpoint=127.0.0.1:1")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--dir and --object-store are required")
	_, errOut, code = runCmd(t, "backfill", "--rows", "100", "--kill-node-at", "3")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "need --nodes")
	_, errOut, code = runCmd(t, "backfill", "--nodes", "2", "--rows", "100", "--object-store", "s3://b/p", "--lose-disk")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--lose-disk needs --kill-node-at")
	_, errOut, code = runCmd(t, "node", "--dir", t.TempDir(), "--object-store", "s3://b/p?endpoint=127.0.0.1:1", "--backup", "../x")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, `backup name "../x"`)
}
