package lsmstats_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/livebuckets"
	"github.com/lsmstats/lsmstats/internal/sstsummary"
	"github.com/lsmstats/lsmstats/internal/statsinternal"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

var (
	updateFixture = flag.Bool("update-fixture", false,
		"rewrite testdata/format (the store fixture, its dump and the encoding vectors) with this version")
	sameFormat = flag.Bool("same-format", false,
		"with -update-fixture: the encodings did not change, only what the fixture writes, so the vectors may change within one format_version")
)

const (
	fixtureDir     = "testdata/format/store"
	fixtureDump    = "testdata/format/store.txt"
	fixtureVectors = "testdata/format/vectors.txt"
)

// TestFormatFixture pins the on-disk format (docs/format.md), as Pebble's
// format fixtures pin theirs:
//
//   - the encoding vectors: a small store built the same way every run,
//     every metadata row and every SST's statistics payload, byte for byte.
//     A change to any encoding fails here unless lsm.FormatVersion moved
//     with it (and the fixture was regenerated with -update-fixture);
//   - the fixture: a store written by the version that recorded the
//     vectors, checked in. This version must open it, read every row and
//     statistic as the recorded dump says, and Verify it clean.
func TestFormatFixture(t *testing.T) {
	if *updateFixture {
		writeFixture(t)
	}
	golden, err := os.ReadFile(fixtureVectors)
	require.NoError(t, err)
	version, vectors, ok := strings.Cut(string(golden), "\n")
	require.True(t, ok, "%s: no vectors", fixtureVectors)
	require.Equal(t, fmt.Sprintf("format_version %d", lsm.FormatVersion), version,
		"the fixture is of another format_version: after a format change, run go test -run TestFormatFixture -update-fixture . and check the diff in")
	got := encodingVectors(t, buildFixtureStore(t, t.TempDir()))
	require.Equal(t, vectors, got,
		"the bytes a store of this version writes changed: if an encoding changed, bump lsm.FormatVersion, document the change in "+
			"docs/format.md and regenerate with -update-fixture; if only what is written changed (the same encodings), check that the "+
			"checked-in fixture still reads and verifies as recorded (the rest of this test), then regenerate with -update-fixture -same-format")

	// The fixture as this version reads it, read-only (on a copy: Pebble
	// takes a lock file).
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(dir, os.DirFS(fixtureDir)))
	s, err := lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger(nil), ReadOnly: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	want, err := os.ReadFile(fixtureDump)
	require.NoError(t, err)
	require.Equal(t, string(want), dumpStore(t, s), "the fixture store reads differently from when it was written")
	rep, err := s.Verify()
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep)
	require.Positive(t, rep.Rows)
}

// buildFixtureStore writes a small store into dir, the same bytes every
// time: two tables (a composite (bytes, u64) pk distributed by its first
// column, and a u64 pk), three checkpoints of inserts, updates and
// deletes and one of updates only, no compaction, each checkpoint ingested as its own SSTs (the
// payloads of one flushed SST would encode the same way). It returns the
// store's directory.
func buildFixtureStore(t *testing.T, dir string) string {
	s, err := lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger(nil), CommitBatchBytes: -1, Pebble: func(o *pebble.Options) {
		o.DisableAutomaticCompactions = true
	}})
	require.NoError(t, err)
	orders := lsm.TableDef{ID: 1, Name: "orders", VnodeCount: 8, PK: keys.Schema{keys.Bytes, keys.Uint64}, DistKeyColumns: 1}
	events := lsm.TableDef{ID: 2, Name: "events", VnodeCount: 4, PK: keys.Schema{keys.Uint64}}
	for _, d := range []lsm.TableDef{orders, events} {
		require.NoError(t, s.CreateTable(d))
	}
	wo, err := s.NewWriter(orders.ID, nil, nil)
	require.NoError(t, err)
	we, err := s.NewWriter(events.ID, nil, nil)
	require.NoError(t, err)
	orderPK := func(i int) []byte {
		return keys.AppendUint64(keys.AppendBytes(nil, fmt.Appendf(nil, "customer-%02d", i%13)), uint64(i))
	}
	row := func(i, epoch int) []byte { return fmt.Appendf(nil, "row %d at epoch %d", i, epoch) }
	stored := map[int][]byte{} // the orders' live rows
	for epoch := 1; epoch <= 3; epoch++ {
		e := uint64(epoch)
		for i := 0; i < 120; i++ {
			pk := orderPK(i)
			v := keys.Vnode(pk[:len(pk)-8], orders.VnodeCount)
			old, live := stored[i]
			switch {
			case epoch == 1:
				stored[i] = row(i, epoch)
				require.NoError(t, wo.Insert(e, v, pk, stored[i]))
			case live && i%5 == epoch:
				delete(stored, i)
				require.NoError(t, wo.Delete(e, v, pk, old))
			case live && i%7 == 0:
				stored[i] = row(i, epoch)
				require.NoError(t, wo.Update(e, v, pk, old, stored[i]))
			}
		}
		for i := 0; i < 40; i++ {
			pk := keys.AppendUint64(nil, uint64(40*(epoch-1)+i))
			require.NoError(t, we.Insert(e, keys.Vnode(pk, events.VnodeCount), pk, row(i, epoch)))
		}
		require.NoError(t, wo.Seal(e))
		require.NoError(t, we.Seal(e))
		require.NoError(t, s.Commit(e))
	}
	// A fourth checkpoint updates rows and nothing else: it changes counts
	// of buckets, not their bounds, and writes the live statistics' log
	// row.
	for i := 0; i < 120; i += 11 {
		if old, live := stored[i]; live {
			pk := orderPK(i)
			stored[i] = append(row(i, 4), " and longer"...)
			require.NoError(t, wo.Update(4, keys.Vnode(pk[:len(pk)-8], orders.VnodeCount), pk, old, stored[i]))
		}
	}
	require.NoError(t, wo.Seal(4))
	require.NoError(t, we.Seal(4))
	require.NoError(t, s.Commit(4))
	require.NoError(t, wo.Close())
	require.NoError(t, we.Close())
	require.NoError(t, s.Close())
	return dir
}

// encodingVectors lists a store's metadata rows and its SSTs' statistics
// payloads, in hex, in key order.
func encodingVectors(t *testing.T, dir string) string {
	db, err := pebble.Open(filepath.Join(dir, "db"), &pebble.Options{Comparer: keys.Comparer, ReadOnly: true,
		Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	var b strings.Builder
	lo, hi := keys.TableSpan(keys.MetaTable)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	require.NoError(t, err)
	for ok := it.First(); ok; ok = it.Next() {
		name, _ := keys.MetaName(it.Key())
		fmt.Fprintf(&b, "meta %q %x = %x\n", name, it.Key(), it.Value())
	}
	require.NoError(t, it.Close())
	tables, err := db.SSTables(pebble.WithProperties())
	require.NoError(t, err)
	var payloads []string
	for _, level := range tables {
		for _, f := range level {
			p := f.Properties.UserProperties[sstsummary.CollectorName]
			payloads = append(payloads, fmt.Sprintf("payload %x..%x %s\n", f.Smallest.UserKey, f.Largest.UserKey, hex.EncodeToString([]byte(p))))
		}
	}
	sort.Strings(payloads)
	for _, p := range payloads {
		b.WriteString(p)
	}
	return b.String()
}

// dumpStore describes everything a store reads back: its tables, every
// vnode's rows (a count and a hash of the rows), physical and live
// statistics, and live buckets.
func dumpStore(t *testing.T, s *lsm.Store) string {
	var b strings.Builder
	st := s.Stats()
	fmt.Fprintf(&b, "committed epoch %d\n", st.CommittedEpoch)
	for _, d := range s.Tables() {
		fmt.Fprintf(&b, "table %d %s: %d vnodes, pk %v, dist key %d\n", d.ID, d.Name, d.VnodeCount, d.PK, d.DistKeyColumns)
		for v := range uint16(d.VnodeCount) {
			it, err := s.NewIter(d.ID, v, nil, nil)
			require.NoError(t, err)
			h := fnv.New64a()
			n, err := testutil.DigestRows(h, it)
			require.NoError(t, err)
			vs := st.Vnode(d.ID, v)
			fmt.Fprintf(&b, "  v%d: %d rows (fnv %016x); physical %+v; live %+v\n", v, n, h.Sum64(), vs.Physical, vs.Live)
			det := livebuckets.Detail(statsinternal.LiveOf(st.Live), d.ID, v)
			fmt.Fprintf(&b, "    anchors %x (live %t) %x (live %t)\n", det.MinPK, det.MinLive, det.MaxPK, det.MaxLive)
			for _, bk := range det.Buckets {
				fmt.Fprintf(&b, "    bucket %x: %d rows %d bytes lower live %t\n", bk.Lower, bk.Rows, bk.Bytes, bk.LowerLive)
			}
		}
	}
	return b.String()
}

// writeFixture rewrites testdata/format from a fresh build.
func writeFixture(t *testing.T) {
	built := buildFixtureStore(t, t.TempDir())
	vec := fmt.Sprintf("format_version %d\n", lsm.FormatVersion) + encodingVectors(t, built)
	// Within one format_version the bytes must not change: a change of an
	// encoding moves lsm.FormatVersion. Only a change of what the fixture
	// writes (its rows, the statistics' layout decisions) may keep it, and
	// says so with -same-format.
	if old, err := os.ReadFile(fixtureVectors); err == nil && !*sameFormat {
		oldVersion, _, _ := strings.Cut(string(old), "\n")
		if oldVersion == fmt.Sprintf("format_version %d", lsm.FormatVersion) && string(old) != vec {
			t.Fatalf("the bytes of format_version %d changed: if an encoding changed, bump lsm.FormatVersion and document the change "+
				"in docs/format.md; if only what the fixture writes changed, rerun with -update-fixture -same-format", lsm.FormatVersion)
		}
	}
	require.NoError(t, os.RemoveAll(fixtureDir))
	require.NoError(t, os.MkdirAll(filepath.Dir(fixtureDir), 0o755))
	// Everything but Pebble's lock file (the staging directory is empty
	// after Close).
	require.NoError(t, filepath.WalkDir(built, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "LOCK" {
			return err
		}
		rel, _ := filepath.Rel(built, path)
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dst := filepath.Join(fixtureDir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.WriteFile(dst, data, 0o644)
	}))
	require.NoError(t, os.WriteFile(fixtureVectors, []byte(vec), 0o644))
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(dir, os.DirFS(fixtureDir)))
	s, err := lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger(nil), ReadOnly: true})
	require.NoError(t, err)
	dump := dumpStore(t, s)
	require.NoError(t, s.Close())
	require.NoError(t, os.WriteFile(fixtureDump, []byte(dump), 0o644))
	require.False(t, bytes.Contains([]byte(dump), []byte("%!")), "dump formatting")
}

// TestFormatOldStores opens the fixture stores that older format versions
// wrote, each checked in when the next replaced it: format 1 (before the
// live statistics' delta log) and format 2 (before the log rows' codec
// byte, docs/format.md). Read-only, each reads as it did then and writes
// nothing; opened for writing, it is rewritten in this format (its
// live-statistics rows and format_version, in one ingestion), reads the
// same, verifies clean, and takes commits.
func TestFormatOldStores(t *testing.T) {
	for _, version := range []uint64{1, 2} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) { testFormatOldStore(t, version) })
	}
}

func testFormatOldStore(t *testing.T, version uint64) {
	fixture := fmt.Sprintf("testdata/format/v%d", version)
	want, err := os.ReadFile(filepath.Join(fixture, "store.txt"))
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(dir, os.DirFS(filepath.Join(fixture, "store"))))
	formatVersion := func() uint64 {
		db, err := pebble.Open(filepath.Join(dir, "db"), &pebble.Options{Comparer: keys.Comparer, ReadOnly: true, Logger: lsm.QuietLogger(nil)})
		require.NoError(t, err)
		defer func() { require.NoError(t, db.Close()) }()
		v, closer, err := db.Get(keys.MetaKey([]byte(keys.FormatVersionName)))
		require.NoError(t, err)
		defer closer.Close()
		require.Len(t, v, 8)
		return binary.BigEndian.Uint64(v)
	}
	require.Equal(t, version, formatVersion())

	ro, err := lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger(nil), ReadOnly: true})
	require.NoError(t, err)
	require.Equal(t, string(want), dumpStore(t, ro), "read-only")
	rep, err := ro.Verify()
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep)
	require.NoError(t, ro.Close())
	require.Equal(t, version, formatVersion(), "a read-only open writes nothing")

	s, err := lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	require.Equal(t, string(want), dumpStore(t, s), "migrated")
	require.NoError(t, s.Close())
	require.Equal(t, uint64(lsm.FormatVersion), formatVersion())

	// This format now: it reads the same, verifies, and takes a commit.
	s, err = lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	require.Equal(t, string(want), dumpStore(t, s), "reopened in this format")
	rep, err = s.Verify()
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep)
	w, err := s.NewWriter(2, nil, nil)
	require.NoError(t, err)
	pk := keys.AppendUint64(nil, 1000)
	epoch := s.Stats().CommittedEpoch + 1
	require.NoError(t, w.Insert(epoch, keys.Vnode(pk, 4), pk, []byte("after the migration")))
	require.NoError(t, w.Seal(epoch))
	require.NoError(t, s.Commit(epoch))
	require.NoError(t, w.Close())
	before := s.Stats().Live.Table(2)
	require.NoError(t, s.Close())
	s, err = lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	require.Equal(t, before, s.Stats().Live.Table(2))
	rep, err = s.Verify()
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep)
}
