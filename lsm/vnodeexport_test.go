package lsm

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/lsmstats/lsmstats"
	"github.com/lsmstats/lsmstats/internal/livebuckets"
	"github.com/lsmstats/lsmstats/internal/statsinternal"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/stretchr/testify/require"
)

// The child of TestMoveVnodesAcrossProcesses: it opens the store of
// directory importChildEnv on the object store of importURLEnv, imports the
// export in file importFileEnv, prints the MoveStats as a JSON line, and
// closes the store.
const (
	importChildEnv = "LSMSTATS_LSM_IMPORT_CHILD"
	importFileEnv  = "LSMSTATS_LSM_IMPORT_FILE"
	importURLEnv   = "LSMSTATS_LSM_IMPORT_URL"
)

// importChild is the child's work (TestMain).
func importChild(dir string) error {
	b, err := os.ReadFile(os.Getenv(importFileEnv))
	if err != nil {
		return err
	}
	exp, err := DecodeVnodeExport(b)
	if err != nil {
		return err
	}
	defer exp.Release()
	s, err := Open(dir, moveOptions(os.Getenv(importURLEnv)))
	if err != nil {
		return err
	}
	st, err := s.ImportVnodes(context.Background(), exp)
	if err != nil {
		_ = s.Close()
		return err
	}
	line, err := json.Marshal(st)
	if err != nil {
		_ = s.Close()
		return err
	}
	fmt.Printf("stats %s\n", line)
	return s.Close()
}

// TestMoveVnodesAcrossProcesses moves vnodes [2, 5) from store A, in this
// process, to store B, opened by a child process: A exports the range
// and writes its bytes to a file, the child decodes and imports them, and
// A, which held its export meanwhile, drops the range under it once the
// child exited successfully, then releases it. B then holds A's versions
// of the range, with the shared SSTs taken by reference (only the
// versions in no shared SST copied), reads A's rows at every epoch A kept,
// has A's live buckets; both stores' per-vnode statistics equal a scan
// and Verify passes, also after both reopen and compact.
func TestMoveVnodesAcrossProcesses(t *testing.T) {
	e := newMoveEnv(t, false)
	e.load()
	a, b, c := e.a, e.b, e.c
	const lo, hi = 2, 5
	ctx := context.Background()

	versions := rangeVersions(t, a, moveTable.ID, lo, hi)
	shared := sharedKeys(t, a, moveTable.ID, lo, hi)
	require.NotEmpty(t, shared)
	var wantCopied, wantCopiedBytes int64
	for k, v := range versions {
		if !shared[k] {
			wantCopied++
			wantCopiedBytes += int64(len(k) + len(v))
		}
	}
	require.Positive(t, wantCopied)
	gcA, epochA := a.GCEpoch(), a.CommittedEpoch()
	atEpoch := map[uint64]map[uint64]string{}
	for ep := gcA; ep <= epochA; ep++ {
		atEpoch[ep] = rowsAt(t, a, moveTable, lo, hi, ep)
	}
	liveA := map[uint16]livebuckets.VnodeDetail{}
	for v := lo; v < hi; v++ {
		liveA[uint16(v)] = livebuckets.Detail(statsinternal.LiveOf(a.Stats().Live), moveTable.ID, uint16(v))
	}
	commitOn(t, b, epochA)
	require.NoError(t, b.Close())
	e.b = nil

	exp, err := a.ExportVnodes(ctx, moveTable.ID, lo, hi)
	require.NoError(t, err)
	defer exp.Release()
	lo2, hi2 := exp.Vnodes()
	require.Equal(t, [3]any{moveTable.ID, lo, hi}, [3]any{exp.Table().ID, lo2, hi2})
	require.Equal(t, epochA, exp.Epoch())
	// The range is frozen on A while the export is held.
	vn := roaring.New()
	vn.Add(3)
	_, err = a.NewWriter(moveTable.ID, vn, nil)
	require.ErrorIs(t, err, ErrInvalidVnode)
	_, err = a.ExportVnodes(ctx, moveTable.ID, 4, 6)
	require.ErrorIs(t, err, ErrInvalidVnode, "a second export of vnode 4")

	wire, err := exp.MarshalBinary()
	require.NoError(t, err)
	t.Logf("export: %d bytes on the wire, %+v", len(wire), exp.Stats())
	path := filepath.Join(t.TempDir(), "export")
	require.NoError(t, os.WriteFile(path, wire, 0o600))

	var stderr strings.Builder
	child := testutil.StartChild(t, &stderr, importChildEnv+"="+e.dirB, importFileEnv+"="+path, importURLEnv+"="+e.url)
	var lines []string
	for l := range child.Lines() {
		lines = append(lines, l)
	}
	end := child.Wait()
	require.NoError(t, end.WaitErr())
	require.Equal(t, 0, end.Code, "child: output %q, stderr:\n%s", lines, tail(stderr.String(), 2000))
	require.Len(t, lines, 1)
	var st MoveStats
	require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(lines[0], "stats ")), &st))
	t.Logf("imported by the child: %+v", st)

	// The child exited: A drops the range under its export, then releases it.
	require.NoError(t, a.DropVnodes(ctx, moveTable.ID, lo, hi))
	exp.Release()
	_, err = a.ImportVnodes(ctx, exp)
	require.ErrorContains(t, err, "the export was released")
	_, err = exp.MarshalBinary()
	require.ErrorContains(t, err, "the export was released")
	_, err = a.ImportVnodes(ctx, &VnodeExport{})
	require.ErrorContains(t, err, "no vnode export")
	_, err = (&VnodeExport{}).MarshalBinary()
	require.ErrorContains(t, err, "no vnode export")

	want := exp.Stats()
	require.Zero(t, want.CopiedSSTBytes)
	want.CopiedSSTBytes = st.CopiedSSTBytes
	require.Equal(t, want, st, "the child's statistics are the export's")
	require.Positive(t, st.SharedSSTs, "shared SSTs taken by reference")
	require.Positive(t, st.SharedBytes)
	require.Equal(t, wantCopied, st.CopiedVersions, "copied: exactly the versions in no shared SST")
	require.Equal(t, wantCopiedBytes, st.CopiedBytes, "no byte of a shared SST copied")
	require.Positive(t, st.CopiedSSTBytes)
	var wantLive LiveCountsForTest
	for _, row := range atEpoch[epochA] {
		wantLive.Rows++
		wantLive.Bytes += int64(8 + len(row))
	}
	require.Equal(t, wantLive, LiveCountsForTest{st.LiveRows, st.LiveBytes})

	b, err = Open(e.dirB, e.options())
	require.NoError(t, err)
	e.b = b
	require.Equal(t, max(gcA, 0), b.GCEpoch(), "B's GC watermark rose to A's")
	check := func(what string) {
		t.Helper()
		require.Equal(t, versions, rangeVersions(t, b, moveTable.ID, lo, hi), "%s: B holds A's versions", what)
		require.Empty(t, rangeVersions(t, a, moveTable.ID, lo, hi), "%s: A holds none", what)
		for ep := gcA; ep <= epochA; ep++ {
			require.Equal(t, atEpoch[ep], rowsAt(t, b, moveTable, lo, hi, ep), "%s: B at epoch %d", what, ep)
		}
		require.Equal(t, c.modelIn(0, lo, epochA), rowsAt(t, a, moveTable, 0, lo, a.CommittedEpoch()), "%s: A keeps the rest", what)
		require.Equal(t, c.modelIn(hi, moveTable.VnodeCount, epochA), rowsAt(t, a, moveTable, hi, moveTable.VnodeCount, a.CommittedEpoch()), what)
		checkStats(t, a, moveTable, what+": A")
		checkStats(t, b, moveTable, what+": B")
	}
	check("after the move")
	for v := lo; v < hi; v++ {
		require.Equal(t, liveA[uint16(v)], livebuckets.Detail(statsinternal.LiveOf(b.Stats().Live), moveTable.ID, uint16(v)),
			"vnode %d: B's live buckets are A's", v)
	}
	// A writer of A takes the range again (it is empty there now).
	w, err := a.NewWriter(moveTable.ID, vn, nil)
	require.NoError(t, err)
	require.NoError(t, w.Close())

	// Compactions drop A's own references to the objects B reads.
	require.NoError(t, a.CompactRange(ctx, moveTable.ID, 0, 0))
	require.NoError(t, b.CompactRange(ctx, moveTable.ID, 0, 0))
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	a, err = Open(e.dirA, e.options())
	require.NoError(t, err)
	e.a = a
	b, err = Open(e.dirB, e.options())
	require.NoError(t, err)
	e.b = b
	check("after compactions and reopening both")
}

// smallExport loads a few checkpoints into A (some compacted into the
// bucket, some above it) and exports vnodes [1, 3): an export of a few
// kilobytes, which the corruption tests cut at every length.
func smallExport(t *testing.T) (*moveEnv, *VnodeExport, []byte) {
	e := newMoveEnv(t, false)
	a, c := e.a, e.c
	for range 2 {
		c.step(60, 10, 10)
	}
	require.NoError(t, a.CompactRange(context.Background(), moveTable.ID, 0, 0))
	c.step(30, 10, 10)
	require.NoError(t, c.w.Close())
	commitOn(t, e.b, a.CommittedEpoch())
	exp, err := a.ExportVnodes(context.Background(), moveTable.ID, 1, 3)
	require.NoError(t, err)
	t.Cleanup(exp.Release)
	require.Positive(t, exp.Stats().SharedSSTs)
	require.Positive(t, exp.Stats().CopiedVersions)
	wire, err := exp.MarshalBinary()
	require.NoError(t, err)
	return e, exp, wire
}

// resum returns b with its checksum recomputed: damage past the checksum,
// for the decoder's own checks.
func resum(b []byte) []byte {
	b = append([]byte(nil), b...)
	binary.BigEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], exportCRC))
	return b
}

// TestVnodeExportCorrupt decodes a real export cut at every length and
// with a byte flipped at every offset: each is refused as corruption
// (lsmstats.ErrCorruption), none panics. With the checksum recomputed, a
// flip anywhere still either decodes or is refused as corruption; damage
// the decoder checks for (a shared SST outside the shared levels or the
// range, live statistics that do not add up, a version, trailing bytes)
// is refused naming what is wrong; and copied versions that do not add
// up fail the import, which changes nothing.
func TestVnodeExportCorrupt(t *testing.T) {
	e, exp, wire := smallExport(t)
	t.Logf("export: %d bytes", len(wire))
	d, err := DecodeVnodeExport(wire)
	require.NoError(t, err)
	require.Equal(t, exp.Stats(), d.Stats())
	again, err := d.MarshalBinary()
	require.NoError(t, err)
	require.Equal(t, wire, again, "a decoded export marshals to the same bytes")

	corrupt := func(b []byte, what string) error {
		t.Helper()
		var err error
		require.NotPanics(t, func() { _, err = DecodeVnodeExport(b) }, what)
		require.Error(t, err, what)
		require.True(t, errors.Is(err, lsmstats.ErrCorruption), "%s: %v", what, err)
		return err
	}
	for n := range len(wire) {
		corrupt(wire[:n], fmt.Sprintf("cut at %d", n))
	}
	corrupt(append(append([]byte(nil), wire...), 0), "a byte appended")
	flipped := append([]byte(nil), wire...)
	decoded := 0
	for i := range wire {
		flipped[i] ^= 0x5a
		corrupt(flipped, fmt.Sprintf("byte %d flipped", i))
		// Past the checksum: decoded or refused as corruption, never a panic.
		var err error
		require.NotPanics(t, func() { _, err = DecodeVnodeExport(resum(flipped)) }, "byte %d flipped, checksum recomputed", i)
		if err == nil {
			decoded++
		} else {
			require.True(t, errors.Is(err, lsmstats.ErrCorruption), "byte %d flipped, checksum recomputed: %v", i, err)
		}
		flipped[i] = wire[i]
	}
	t.Logf("%d of %d flips, checksum recomputed, still decode (bytes of SSTs and keys)", decoded, len(wire))

	// Damage the decoder names, checksum recomputed.
	marshal := func(mutate func(x *VnodeExport)) []byte {
		x, err := DecodeVnodeExport(wire)
		require.NoError(t, err)
		mutate(x)
		b, err := x.MarshalBinary()
		require.NoError(t, err)
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
		says string
	}{
		{"version", resum(append(append([]byte(nil), wire[:4]...), append([]byte{2}, wire[5:]...)...)), "version 2"},
		{"magic", resum(append([]byte("XXXX"), wire[4:]...)), "magic"},
		{"trailing", resum(append(append([]byte(nil), wire[:len(wire)-4]...), 0, 0, 0, 0, 0)), "bytes after the live statistics"},
		{"level", marshal(func(x *VnodeExport) { x.shared[0].Level = 4 }), "level 4, not a shared level"},
		{"bound", marshal(func(x *VnodeExport) { x.shared[0].Largest.UserKey, _ = moveSpan(moveTable.ID, 6, 7) }), "outside the range"},
		{"size", marshal(func(x *VnodeExport) { x.shared[0].Size = 0 }), "size 0"},
		{"live counts", marshal(func(x *VnodeExport) { x.live.Counts.Rows++ }), "the export says"},
		{"live row", marshal(func(x *VnodeExport) { x.live.Rows = x.live.Rows[1:] }), "live statistics"},
		{"vnodes", marshal(func(x *VnodeExport) { x.hi = 9 }), "vnode range [1, 9)"},
		{"copied", marshal(func(x *VnodeExport) { x.copiedSSTs = nil }), "0 copied SSTs for"},
	} {
		err := corrupt(tc.b, tc.name)
		require.ErrorContains(t, err, tc.says, tc.name)
		t.Logf("%s: %v", tc.name, err)
	}

	// Copied versions that do not add up: the import fails as corruption
	// and changes nothing on B.
	b := e.b
	before := rangeVersions(t, b, moveTable.ID, 0, moveTable.VnodeCount)
	x, err := DecodeVnodeExport(marshal(func(x *VnodeExport) { x.stats.CopiedVersions++ }))
	require.NoError(t, err)
	_, err = b.ImportVnodes(context.Background(), x)
	require.True(t, lsmstats.IsCorruption(err), "%v", err)
	require.ErrorContains(t, err, "the export says")
	t.Logf("import of miscounted copies: %v", err)
	// A copied SST damaged past the checksum.
	x, err = DecodeVnodeExport(marshal(func(x *VnodeExport) {
		sst := append([]byte(nil), x.copiedSSTs[0]...)
		sst[len(sst)/3] ^= 0xff
		x.copiedSSTs[0] = sst
	}))
	require.NoError(t, err)
	_, err = b.ImportVnodes(context.Background(), x)
	require.True(t, lsmstats.IsCorruption(err), "%v", err)
	t.Logf("import of a damaged copied SST: %v", err)
	require.Equal(t, before, rangeVersions(t, b, moveTable.ID, 0, moveTable.VnodeCount), "B unchanged")
	checkStats(t, b, moveTable, "B after the refused imports")

	// The intact export imports.
	st, err := b.ImportVnodes(context.Background(), d)
	require.NoError(t, err)
	require.Positive(t, st.SharedSSTs)
	checkStats(t, b, moveTable, "B after the import")
}

// TestImportVnodesRefused: an export imported into a store on another
// bucket or prefix of the same server, or into its own source, or into a
// store behind the export's epoch, is refused with an error that says
// why, and changes nothing on either store.
func TestImportVnodesRefused(t *testing.T) {
	e, exp, wire := smallExport(t)
	srv, a := e.srv, e.a
	ctx := context.Background()
	open := func(url string) *Store {
		s, err := Open(t.TempDir(), moveOptions(url))
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		commitOn(t, s, a.CommittedEpoch())
		return s
	}
	otherBucket := open(objURL(srv, srv.NewBucket(t), "cluster", "30s"))
	otherPrefix := open(objURL(srv, e.bucket, "elsewhere", "30s"))
	beforeA := rangeVersions(t, a, moveTable.ID, 0, moveTable.VnodeCount)
	d, err := DecodeVnodeExport(wire)
	require.NoError(t, err)
	defer d.Release()
	for _, tc := range []struct {
		name string
		dst  *Store
		exp  *VnodeExport
		says string
	}{
		{"decoded, to another bucket", otherBucket, d, "on the same bucket and prefix only"},
		{"decoded, to another prefix", otherPrefix, d, "on the same bucket and prefix only"},
		{"local, to another bucket", otherBucket, exp, "on the same bucket and prefix only"},
		{"local, to another prefix", otherPrefix, exp, "on the same bucket and prefix only"},
		{"decoded, to its source", a, d, "have the same creator id"},
		{"local, to its source", a, exp, "to itself"},
	} {
		_, err := tc.dst.ImportVnodes(ctx, tc.exp)
		require.ErrorContains(t, err, tc.says, tc.name)
		t.Logf("%s: %v", tc.name, err)
		require.Empty(t, rangeVersions(t, otherBucket, moveTable.ID, 0, moveTable.VnodeCount), tc.name)
		require.Empty(t, rangeVersions(t, otherPrefix, moveTable.ID, 0, moveTable.VnodeCount), tc.name)
		require.Equal(t, beforeA, rangeVersions(t, a, moveTable.ID, 0, moveTable.VnodeCount), tc.name)
	}
	// A source whose identity marker is not in the object store (its
	// creator id changed past the checksum).
	x, err := d.MarshalBinary()
	require.NoError(t, err)
	binary.BigEndian.PutUint64(x[5:], 12345)
	wrong, err := DecodeVnodeExport(resum(x))
	require.NoError(t, err)
	_, err = otherPrefix.ImportVnodes(ctx, wrong)
	require.ErrorContains(t, err, "on the same bucket and prefix only")
	_, err = e.b.ImportVnodes(ctx, wrong)
	require.ErrorContains(t, err, "no identity marker lsmstats-store-12345 of the source's creator 12345")
	t.Logf("a source without its marker: %v", err)
	require.Empty(t, rangeVersions(t, e.b, moveTable.ID, 0, moveTable.VnodeCount))

	// A store behind the export's epoch.
	fresh, err := Open(t.TempDir(), moveOptions(e.url))
	require.NoError(t, err)
	defer fresh.Close()
	_, err = fresh.ImportVnodes(ctx, d)
	require.ErrorIs(t, err, ErrEpochOrder)
	require.ErrorContains(t, err, fmt.Sprintf("commit epoch %d on it first", d.Epoch()))
	require.Empty(t, rangeVersions(t, fresh, moveTable.ID, 0, moveTable.VnodeCount))

	// On the same bucket and prefix, the decoded export imports.
	same := open(e.url)
	st, err := same.ImportVnodes(ctx, d)
	require.NoError(t, err)
	require.Positive(t, st.SharedSSTs)
	checkStats(t, same, moveTable, "the destination")
	checkStats(t, a, moveTable, "the source, still holding the range")
}

// TestImportVnodesAfterEarlyRelease shows why the source holds its export
// until the destination imported it: once released, the source's
// compactions remove the shared SSTs' objects it no longer uses, with its
// reference markers, and Pebble's attach on the destination, which checks
// the source's marker, refuses the import as corruption, changing
// nothing.
func TestImportVnodesAfterEarlyRelease(t *testing.T) {
	e, exp, wire := smallExport(t)
	a, b := e.a, e.b
	ctx := context.Background()
	d, err := DecodeVnodeExport(wire)
	require.NoError(t, err)
	defer d.Release()
	lower, upper := moveSpan(moveTable.ID, 1, 3)
	levels, err := a.db.SSTables(pebble.WithKeyRangeFilter(lower, upper))
	require.NoError(t, err)
	var objects []string
	for level, tables := range levels {
		for _, ti := range tables {
			if level >= remote.SharedLevelsStart {
				objects = append(objects, a.obj.sstObject(uint64(ti.BackingSSTNum)))
			}
		}
	}
	require.NotEmpty(t, objects)

	exp.Release()
	require.NoError(t, a.CompactRange(ctx, moveTable.ID, 0, 0))
	require.Eventually(t, func() bool {
		for _, name := range objects {
			if _, err := a.obj.storage.Size(name); err == nil || !a.obj.storage.IsNotExistError(err) {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "A removes the objects it no longer uses: %q", objects)

	_, err = b.ImportVnodes(ctx, d)
	require.Error(t, err)
	t.Logf("import after the source released its export: %v", err)
	require.True(t, lsmstats.IsCorruption(err), "%v", err)
	require.ErrorContains(t, err, "origin marker object")
	require.Empty(t, rangeVersions(t, b, moveTable.ID, 0, moveTable.VnodeCount))
	checkStats(t, b, moveTable, "B after the refused import")
}
