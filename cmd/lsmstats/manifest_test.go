package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// TestManifestDamage is issue 41's reproduction, on a smaller store: the
// main job with update churn, then bytes flipped in the MANIFEST. Pebble
// alone opens such a MANIFEST at an older version, its later edits and
// the committed rows they held gone, without an error. At offsets spread
// over the whole MANIFEST, `stats` and `verify` exit 7 with a message that
// names the MANIFEST and the way back, or (nowhere here, as it happens)
// answer exactly as the undamaged store; they must exit 7 wherever Pebble
// alone would open another version. The backfill run again on the damaged
// store exits 7 too, and commits nothing; `repair` restores the MANIFEST
// from the store's copy and verifies the store, after which `stats`
// answers as before the damage and the backfill resumes to its end.
func TestManifestDamage(t *testing.T) {
	base := filepath.Join(t.TempDir(), "store")
	job := []string{"backfill", "--rows", "40000", "--vnodes", "64", "--workload", "update-churn", "--bars", "off", "--dir"}
	out, errOut, code := runCmd(t, append(job, base)...)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	want, _, code := runCmd(t, "stats", "--dir", base, "--json")
	require.Equal(t, exitOK, code)
	manifests, err := filepath.Glob(filepath.Join(base, "db", "MANIFEST-*"))
	require.NoError(t, err)
	require.Len(t, manifests, 1)
	manifest := filepath.Base(manifests[0])
	orig, err := os.ReadFile(manifests[0])
	require.NoError(t, err)
	clean := pebbleSSTs(filepath.Join(base, "db"))
	require.NotEmpty(t, clean)

	damaged := func(off int) string {
		dir := filepath.Join(t.TempDir(), "store")
		require.NoError(t, os.CopyFS(dir, os.DirFS(base)))
		b := append([]byte(nil), orig...)
		for i := off; i < min(off+3, len(b)); i++ {
			b[i] ^= 0xff
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, "db", manifest), b, 0o644))
		return dir
	}
	const injections = 16
	rollbacks, refused := 0, 0
	for i := range injections {
		off := len(orig) * i / injections
		dir := damaged(off)
		desc := fmt.Sprintf("3 bytes flipped at %d of %d", off, len(orig))
		rolledBack := pebbleSSTs(filepath.Join(dir, "db"))
		silent := rolledBack != "" && rolledBack != clean
		if silent {
			rollbacks++
		}
		for _, cmd := range [][]string{{"stats", "--dir", dir, "--json"}, {"verify", "--dir", dir}} {
			got, stderr, code := runCmd(t, cmd...)
			switch code {
			case exitOK:
				require.False(t, silent, "%s: %s exits 0 where Pebble opens an older version", desc, cmd[0])
				if cmd[0] == "stats" {
					require.Equal(t, want, got, "%s: stats exits 0 with other statistics", desc)
				}
			case exitCorrupt:
				require.Contains(t, stderr, "MANIFEST "+filepath.Join(dir, "db", manifest), "%s: %s", desc, cmd[0])
				require.Contains(t, stderr, "lsmstats repair --dir "+dir, "%s: %s", desc, cmd[0])
				refused++
			default:
				t.Fatalf("%s: %s exits %d:\n%s\n%s", desc, cmd[0], code, got, stderr)
			}
		}
	}
	t.Logf("%d injections: Pebble alone opens another version after %d of them; stats and verify refused %d times of %d",
		injections, rollbacks, refused, 2*injections)
	require.Positive(t, rollbacks, "no injection made Pebble open another version: the test shows nothing")

	// The injection, at 10% of the MANIFEST.
	dir := damaged(len(orig) / 10)
	before, err := os.ReadFile(filepath.Join(dir, "db", manifest))
	require.NoError(t, err)
	_, stderr, code := runCmd(t, append(job, dir)...)
	require.Equal(t, exitCorrupt, code, "%s", stderr)
	require.Contains(t, stderr, "Pebble's MANIFEST "+filepath.Join(dir, "db", manifest)+" is damaged at byte")
	after, err := os.ReadFile(filepath.Join(dir, "db", manifest))
	require.NoError(t, err)
	require.Equal(t, before, after, "the refused backfill changed the MANIFEST")

	got, stderr, code := runCmd(t, "repair", "--dir", dir)
	require.Equal(t, exitOK, code, "%s\n%s", got, stderr)
	require.Contains(t, got, "restored the MANIFEST of "+dir)
	require.Contains(t, got, ": ok\n")
	got, _, code = runCmd(t, "stats", "--dir", dir, "--json")
	require.Equal(t, exitOK, code)
	require.Equal(t, want, got, "stats after the repair")
	got, stderr, code = runCmd(t, append(job, dir)...)
	require.Equal(t, exitOK, code, "%s\n%s", got, stderr)
	require.Contains(t, got, "MV equals upstream: yes")
	got, _, code = runCmd(t, "repair", "--dir", dir)
	require.Equal(t, exitOK, code)
	require.Contains(t, got, "is not damaged: nothing to restore")
}

// pebbleSSTs lists the SSTs of the version that Pebble alone opens in
// dbDir, read-only ("" if it refuses).
func pebbleSSTs(dbDir string) string {
	db, err := pebble.Open(dbDir, &pebble.Options{Comparer: keys.Comparer, ReadOnly: true, Logger: lsm.QuietLogger(io.Discard)})
	if err != nil {
		return ""
	}
	defer db.Close()
	levels, err := db.SSTables()
	if err != nil {
		return ""
	}
	return fmt.Sprint(levels)
}
