package lsm

import (
	"context"
	"flag"
	"fmt"
	"io"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/lsmstats/lsmstats/internal/livebuckets"
	"github.com/lsmstats/lsmstats/internal/s3server"
	"github.com/lsmstats/lsmstats/internal/ssttracker"
	"github.com/lsmstats/lsmstats/internal/statsinternal"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/objstore"
	"github.com/stretchr/testify/require"
)

var moveSeed = flag.Uint64("move-seed", 0, "seed of the vnode move tests (0: testutil's default)")

// moveTable is the table the move tests load into store A and move.
var moveTable = TableDef{ID: 1, VnodeCount: 8, PK: keys.Schema{keys.Uint64}}

// moveEnv is two stores on one bucket and prefix of the shared S3 server,
// A loaded by a churn.
type moveEnv struct {
	t          *testing.T
	srv        *s3server.Server
	bucket     string
	url        string
	dirA, dirB string
	a, b       *Store
	c          *churn
	// partitioned cuts the table's SSTs at its vnodes (Options.PartitionBytes).
	partitioned bool
}

// options are the options of A and B.
func (e *moveEnv) options() *Options {
	o := moveOptions(e.url)
	if e.partitioned {
		o.PartitionBytes = 1
	}
	return o
}

func moveOptions(url string) *Options {
	return &Options{Logger: QuietLogger(io.Discard), ObjectStore: &objstore.StoreOptions{URL: url}}
}

// newMoveEnv opens A and B on a new bucket, each under prefix "cluster",
// and creates the churn of moveTable on A. Partitioned stores cut the
// table's SSTs at every vnode, once it has rows.
func newMoveEnv(t *testing.T, partitioned bool) *moveEnv {
	srv := s3server.Shared(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	e := &moveEnv{t: t, srv: srv, bucket: srv.NewBucket(t), dirA: t.TempDir(), dirB: t.TempDir(), partitioned: partitioned}
	e.url = objURL(srv, e.bucket, "cluster", "30s")
	var err error
	e.a, err = Open(e.dirA, e.options())
	require.NoError(t, err)
	e.b, err = Open(e.dirB, e.options())
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, s := range []*Store{e.a, e.b} {
			if s != nil && !s.closed.Load() {
				_ = s.Close()
			}
		}
	})
	e.c = newChurn(t, e.a, moveTable, testutil.Seed(t, "move-seed", *moveSeed))
	return e
}

// load gives A's table versions at every level: checkpoints, a GC that
// leaves versions of several epochs, a compaction of everything into L6
// (in the bucket), checkpoints flushed into L0, and checkpoints left in
// Pebble's memtable (committed as batches). A's writer is closed at the
// end: no writer may own a vnode that moves.
func (e *moveEnv) load() {
	t, c := e.t, e.c
	for range 6 {
		c.step(600, 20, 10)
	}
	_, err := e.a.GC(context.Background(), GCRequest{Table: moveTable.ID, SafeEpoch: c.epoch - 3})
	require.NoError(t, err)
	require.NoError(t, e.a.CompactRange(context.Background(), moveTable.ID, 0, 0))
	for range 3 {
		c.step(300, 30, 10)
	}
	require.NoError(t, e.a.flushMemtable())
	for range 2 {
		c.step(200, 30, 10)
	}
	require.NoError(t, c.w.Close())
	require.Positive(t, ssttracker.NumUnflushed(e.a.tracker.Current()), "checkpoints left in the memtable")
}

// commitOn commits an epoch on s at or above epoch, with a row of table 9
// (created if need be): what the store's own work does meanwhile.
func commitOn(t *testing.T, s *Store, epoch uint64) {
	def := TableDef{ID: 9, VnodeCount: 1, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	w, err := s.NewWriter(def.ID, nil, nil)
	require.NoError(t, err)
	e := max(epoch, s.EpochFloor()+1)
	pk := keys.AppendUint64(nil, e)
	require.NoError(t, w.Insert(e, 0, pk, []byte("own row")))
	require.NoError(t, w.Seal(e))
	require.NoError(t, s.Commit(e))
	require.NoError(t, w.Close())
}

// inRange reports whether a key is of vnodes [lo, hi) of table.
func inRange(key []byte, table uint32, lo, hi int) bool {
	tb, vn, ok := keys.Header(key)
	return ok && tb == table && int(vn) >= lo && int(vn) < hi
}

// rangeVersions returns every version of vnodes [lo, hi) of table with its
// value, as Pebble reads them.
func rangeVersions(t *testing.T, s *Store, table uint32, lo, hi int) map[string]string {
	lower, upper := moveSpan(table, lo, hi)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	require.NoError(t, err)
	out := map[string]string{}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		require.NoError(t, err)
		out[string(it.Key())] = string(v)
	}
	require.NoError(t, it.Close())
	return out
}

// sharedKeys returns the keys of vnodes [lo, hi) of table that s's SSTs
// in Pebble's shared levels hold, read from each SST's object within its
// bounds (virtual SSTs are cut): what a move takes by reference.
func sharedKeys(t *testing.T, s *Store, table uint32, lo, hi int) map[string]bool {
	lower, upper := moveSpan(table, lo, hi)
	levels, err := s.db.SSTables(pebble.WithKeyRangeFilter(lower, upper))
	require.NoError(t, err)
	out := map[string]bool{}
	for level, tables := range levels {
		if level < remote.SharedLevelsStart {
			continue
		}
		for _, ti := range tables {
			require.NotEqual(t, pebble.BackingTypeLocal, ti.BackingType)
			readable, err := s.openSST(uint64(ti.BackingSSTNum))
			require.NoError(t, err)
			r, err := sstable.NewReader(context.Background(), readable, s.popts.MakeReaderOptions())
			require.NoError(t, err)
			it, err := r.NewIter(sstable.NoTransforms, nil, nil, sstable.AssertNoBlobHandles)
			require.NoError(t, err)
			for kv := it.First(); kv != nil; kv = it.Next() {
				k := kv.K.UserKey
				if !afterOrAt(k, ti.Smallest) || !beforeOrAt(k, ti.Largest) || !inRange(k, table, lo, hi) {
					continue
				}
				require.Equal(t, pebble.InternalKeyKindSet, kv.K.Kind(), "%s", kv.K)
				out[string(k)] = true
			}
			require.NoError(t, it.Close())
			require.NoError(t, r.Close())
		}
	}
	return out
}

func afterOrAt(k []byte, lower pebble.InternalKey) bool { return keys.Compare(k, lower.UserKey) >= 0 }
func beforeOrAt(k []byte, upper pebble.InternalKey) bool {
	c := keys.Compare(k, upper.UserKey)
	return c < 0 || c == 0 && !upper.IsExclusiveSentinel()
}

// rowsAt returns the rows of vnodes [lo, hi) of table at epoch, read
// through a pin.
func rowsAt(t *testing.T, s *Store, def TableDef, lo, hi int, epoch uint64) map[uint64]string {
	sn, err := s.Pin(epoch)
	require.NoError(t, err, "pin epoch %d", epoch)
	defer sn.Close()
	return readSnapVnodes(t, sn, def, lo, hi)
}

// modelIn returns the model's rows of vnodes [lo, hi) at epoch.
func (c *churn) modelIn(lo, hi int, epoch uint64) map[uint64]string {
	out := map[uint64]string{}
	for pk, row := range c.at(epoch) {
		if v := int(c.def.VnodeOf(keys.AppendUint64(nil, pk))); v >= lo && v < hi {
			out[pk] = row
		}
	}
	return out
}

// checkStats holds both kinds of statistics of every vnode of the table
// to a scan: the physical counts (entries by kind and their key bytes; GC's
// SINGLEDELs shadow one entry each) to the versions Pebble reads, the live
// counts to the rows at the committed epoch; and runs Verify.
func checkStats(t *testing.T, s *Store, def TableDef, what string) {
	require.NoError(t, s.RefreshStats(), what)
	st := s.Stats()
	require.NoError(t, st.PhysicalErr, what)
	rows := rowsAt(t, s, def, 0, def.VnodeCount, s.CommittedEpoch())
	for v := range def.VnodeCount {
		var entries, puts, dels, keyBytes uint64
		for k := range rangeVersions(t, s, def.ID, v, v+1) {
			entries++
			keyBytes += uint64(len(k))
			if k[len(k)-2] == keys.KindPut {
				puts++
			} else {
				dels++
			}
		}
		p := st.Physical.Vnode(def.ID, uint16(v))
		require.Equal(t, entries, p.Entries-p.PebbleTombstones, "%s: vnode %d: physical entries against a scan", what, v)
		if p.PebbleTombstones == 0 {
			require.Equal(t, [3]uint64{puts, dels, keyBytes}, [3]uint64{p.Puts, p.Deletes, p.KeyBytes}, "%s: vnode %d: puts, deletes, key bytes", what, v)
		}
		var live LiveCountsForTest
		for pk, row := range rows {
			if int(def.VnodeOf(keys.AppendUint64(nil, pk))) == v {
				live.Rows++
				live.Bytes += int64(8 + len(row))
			}
		}
		l := st.Live.Vnode(def.ID, uint16(v))
		require.Equal(t, live, LiveCountsForTest{l.Rows, l.Bytes}, "%s: vnode %d: live counts against a scan", what, v)
	}
	rep, err := s.Verify()
	require.NoError(t, err, what)
	require.True(t, rep.OK(), "%s: %+v", what, rep)
}

// LiveCountsForTest are live counts, as the test compares them.
type LiveCountsForTest struct{ Rows, Bytes int64 }

// TestMoveVnodes moves vnodes [2, 5) of a table from store A to store B on
// the same bucket and prefix: B takes A's SSTs of the shared levels by
// reference and copies exactly the versions that are in no shared SST;
// B's rows of the range equal A's before the move at every epoch A kept,
// and A has none left; both stores' per-vnode statistics, physical and
// live, equal a scan, and Verify passes; all of it again after both
// reopen, after compactions of both, and after B writes the range.
func TestMoveVnodes(t *testing.T) {
	for _, partitioned := range []bool{false, true} {
		t.Run(fmt.Sprintf("partitioned=%t", partitioned), func(t *testing.T) { testMoveVnodes(t, partitioned) })
	}
}

// testMoveVnodes is TestMoveVnodes on stores whose SSTs of the table span
// all its vnodes (the SST of L6 across the range's ends becomes virtual on
// both stores) or one vnode each (those in the range move whole).
func testMoveVnodes(t *testing.T, partitioned bool) {
	e := newMoveEnv(t, partitioned)
	e.load()
	a, b, c := e.a, e.b, e.c
	const lo, hi = 2, 5
	ctx := context.Background()

	// What A holds of the range, before.
	versions := rangeVersions(t, a, moveTable.ID, lo, hi)
	shared := sharedKeys(t, a, moveTable.ID, lo, hi)
	require.NotEmpty(t, shared, "A has SSTs of the range in L6")
	var wantCopied, wantCopiedBytes int64
	for k, v := range versions {
		if !shared[k] {
			wantCopied++
			wantCopiedBytes += int64(len(k) + len(v))
		}
	}
	require.Positive(t, wantCopied, "A has versions of the range above L5 and in its memtable")
	for k := range shared {
		require.Contains(t, versions, k)
	}
	gcA, epochA := a.GCEpoch(), a.CommittedEpoch()
	require.Positive(t, gcA)
	atEpoch := map[uint64]map[uint64]string{}
	for ep := gcA; ep <= epochA; ep++ {
		atEpoch[ep] = rowsAt(t, a, moveTable, lo, hi, ep)
		require.Equal(t, c.modelIn(lo, hi, ep), atEpoch[ep], "A at epoch %d", ep)
	}
	liveA := map[uint16]livebuckets.VnodeDetail{}
	for v := lo; v < hi; v++ {
		liveA[uint16(v)] = livebuckets.Detail(statsinternal.LiveOf(a.Stats().Live), moveTable.ID, uint16(v))
	}
	checkStats(t, a, moveTable, "A before")

	// B must have committed A's epoch.
	_, err := a.MoveVnodes(ctx, b, moveTable.ID, lo, hi)
	require.ErrorIs(t, err, ErrEpochOrder)
	require.ErrorContains(t, err, fmt.Sprintf("commit epoch %d on it first", epochA))
	require.Equal(t, versions, rangeVersions(t, a, moveTable.ID, lo, hi), "a refused move changes nothing")
	commitOn(t, b, epochA)

	st, err := a.MoveVnodes(ctx, b, moveTable.ID, lo, hi)
	require.NoError(t, err)
	t.Logf("moved: %+v", st)
	t.Logf("referenced: %d SSTs, %d bytes; copied: %d versions, %d bytes, in %d bytes of SSTs", st.SharedSSTs, st.SharedBytes,
		st.CopiedVersions, st.CopiedBytes, st.CopiedSSTBytes)
	require.Positive(t, st.SharedSSTs)
	require.Positive(t, st.SharedBytes)
	require.Equal(t, wantCopied, st.CopiedVersions, "copied: the versions in no shared SST")
	require.Equal(t, wantCopiedBytes, st.CopiedBytes)
	require.Positive(t, st.CopiedSSTBytes)
	require.False(t, st.Compacted)
	var wantLive LiveCountsForTest
	for _, row := range atEpoch[epochA] {
		wantLive.Rows++
		wantLive.Bytes += int64(8 + len(row))
	}
	require.Equal(t, wantLive, LiveCountsForTest{st.LiveRows, st.LiveBytes})
	require.Equal(t, max(gcA, 0), b.GCEpoch(), "B's GC watermark rose to A's")

	check := func(what string) {
		t.Helper()
		require.Equal(t, versions, rangeVersions(t, b, moveTable.ID, lo, hi), "%s: B holds A's versions", what)
		require.Empty(t, rangeVersions(t, a, moveTable.ID, lo, hi), "%s: A holds none", what)
		for ep := gcA; ep <= epochA; ep++ {
			require.Equal(t, atEpoch[ep], rowsAt(t, b, moveTable, lo, hi, ep), "%s: B at epoch %d", what, ep)
		}
		require.Empty(t, rowsAt(t, a, moveTable, lo, hi, a.CommittedEpoch()), what)
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
	// B's physical statistics of the range come from virtual SSTs of A's
	// objects, rebuilt by a scan, and its own SSTs' payloads.
	var virtual int
	for _, fi := range ssttracker.Files(statsinternal.VersionOf(b.Stats().Physical)) {
		if fi.Virtual && fi.Summary.Table(moveTable.ID) != nil {
			virtual++
			require.Equal(t, ssttracker.FromVirtualScan, fi.Source)
		}
	}
	require.Equal(t, st.SharedSSTs, virtual)

	// Reopen both.
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	a, err = Open(e.dirA, e.options())
	require.NoError(t, err)
	e.a = a
	b, err = Open(e.dirB, e.options())
	require.NoError(t, err)
	e.b = b
	check("after reopening both")

	// A read-only open of B reads A's objects too.
	require.NoError(t, b.Close())
	ro := e.options()
	ro.ReadOnly = true
	b, err = Open(e.dirB, ro)
	require.NoError(t, err)
	require.Equal(t, versions, rangeVersions(t, b, moveTable.ID, lo, hi))
	rep, err := b.Verify()
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep)
	require.NoError(t, b.Close())
	b, err = Open(e.dirB, e.options())
	require.NoError(t, err)
	e.b = b

	// Compactions rewrite A's SSTs (dropping its own references to the
	// objects B reads) and B's.
	require.NoError(t, a.CompactRange(ctx, moveTable.ID, 0, 0))
	require.NoError(t, b.CompactRange(ctx, moveTable.ID, 0, 0))
	check("after compactions")

	// B writes the range from its committed epoch on.
	vn := roaring.New()
	vn.AddRange(lo, hi)
	w, err := b.NewWriter(moveTable.ID, vn, nil)
	require.NoError(t, err)
	ep := b.EpochFloor() + 1
	want := c.modelIn(lo, hi, epochA)
	n := 0
	for pk, row := range want {
		k := keys.AppendUint64(nil, pk)
		if n%3 == 0 {
			require.NoError(t, w.Delete(ep, moveTable.VnodeOf(k), k, []byte(row)))
			delete(want, pk)
		} else {
			require.NoError(t, w.Update(ep, moveTable.VnodeOf(k), k, []byte(row), []byte(row+"+")))
			want[pk] = row + "+"
		}
		n++
	}
	require.NoError(t, w.Seal(ep))
	require.NoError(t, b.Commit(ep))
	require.NoError(t, w.Close())
	require.Equal(t, want, rowsAt(t, b, moveTable, lo, hi, ep))
	checkStats(t, b, moveTable, "B after writing the range")
	require.NoError(t, b.Close())
	b, err = Open(e.dirB, e.options())
	require.NoError(t, err)
	e.b = b
	require.Equal(t, want, rowsAt(t, b, moveTable, lo, hi, ep))
	checkStats(t, b, moveTable, "B reopened after writing the range")

	// B collects the moved versions it no longer needs, and compacts.
	res, err := b.GC(ctx, GCRequest{Table: moveTable.ID, VnodeLo: lo, VnodeHi: hi})
	require.NoError(t, err)
	require.Positive(t, res.Deleted)
	checkStats(t, b, moveTable, "B after GC")
	require.NoError(t, b.CompactRange(ctx, moveTable.ID, lo, hi))
	require.Equal(t, want, rowsAt(t, b, moveTable, lo, hi, ep))
	checkStats(t, b, moveTable, "B after GC and a compaction")
}

// TestMoveVnodesScaledProperties shows, for a moved range, what Pebble's
// properties of the SSTs that hold it say (a virtual SST's are its backing
// file's scaled by size, GetScaledProperties; on the destination, a
// foreign SST's backing size is the virtual SST's own, so they are the
// whole backing file's) against lsmstats' exact counts, per SST and per
// vnode: lsmstats' equal a scan, Pebble's do not, but where each SST holds
// one vnode (the stores cut SSTs at every vnode) and moves whole.
func TestMoveVnodesScaledProperties(t *testing.T) {
	for _, partitioned := range []bool{false, true} {
		t.Run(fmt.Sprintf("partitioned=%t", partitioned), func(t *testing.T) { testMoveVnodesScaledProperties(t, partitioned) })
	}
}

func testMoveVnodesScaledProperties(t *testing.T, partitioned bool) {
	e := newMoveEnv(t, partitioned)
	e.load()
	a, b := e.a, e.b
	const lo, hi = 3, 6
	commitOn(t, b, a.CommittedEpoch())
	_, err := a.MoveVnodes(context.Background(), b, moveTable.ID, lo, hi)
	require.NoError(t, err)
	require.NoError(t, b.RefreshStats())
	lower, upper := moveSpan(moveTable.ID, lo, hi)
	levels, err := b.db.SSTables(pebble.WithProperties(), pebble.WithKeyRangeFilter(lower, upper))
	require.NoError(t, err)
	v := statsinternal.VersionOf(b.Stats().Physical)
	var pebbleEntries, exactEntries uint64
	for level, tables := range levels {
		for _, ti := range tables {
			fi, ok := ssttracker.File(v, uint64(ti.FileNum))
			require.True(t, ok)
			var exact uint64
			perVnode := ""
			for vn := lo; vn < hi; vn++ {
				if vs := fi.Summary.Vnode(moveTable.ID, uint16(vn)); vs != nil {
					exact += vs.Counts.Entries
					perVnode += fmt.Sprintf(" v%d:%d", vn, vs.Counts.Entries)
				}
			}
			// A scan of the SST within its bounds.
			scanned, backing := scanFile(t, b, ti, moveTable.ID, lo, hi)
			require.Equal(t, scanned, exact, "sst %s: lsmstats' entries of the range against a scan", ti.FileNum)
			t.Logf("L%d %s virtual=%-5v backing=%-14v Pebble NumEntries=%5d (its backing file's: %5d)  lsmstats' entries in the range=%5d (%s)",
				level, ti.FileNum, ti.Virtual, ti.BackingType, ti.Properties.NumEntries, backing, exact, perVnode[1:])
			pebbleEntries += ti.Properties.NumEntries
			exactEntries += exact
		}
	}
	var scanned uint64
	for range rangeVersions(t, b, moveTable.ID, lo, hi) {
		scanned++
	}
	var tracked uint64
	for vn := lo; vn < hi; vn++ {
		tracked += b.Stats().Physical.Vnode(moveTable.ID, uint16(vn)).Entries
	}
	t.Logf("range [%d, %d): Pebble's properties say %d entries, lsmstats %d, a scan %d (Pebble %+.1f%%)",
		lo, hi, pebbleEntries, tracked, scanned, 100*(float64(pebbleEntries)-float64(scanned))/float64(scanned))
	require.Equal(t, scanned, tracked)
	require.Equal(t, scanned, exactEntries)
	if !partitioned {
		// An SST across the range's ends: Pebble counts all of it.
		require.NotEqual(t, scanned, pebbleEntries, "Pebble's scaled properties are estimates here")
	}

	// On the source, the SSTs across the range's ends are virtual SSTs of
	// the rest: Pebble scales their backing files' properties by size.
	require.NoError(t, a.RefreshStats())
	levels, err = a.db.SSTables(pebble.WithProperties(), pebble.WithKeyRangeFilter(keys.TableSpan(moveTable.ID)))
	require.NoError(t, err)
	v = statsinternal.VersionOf(a.Stats().Physical)
	virtual := 0
	for level, tables := range levels {
		for _, ti := range tables {
			if !ti.Virtual {
				continue
			}
			virtual++
			fi, ok := ssttracker.File(v, uint64(ti.FileNum))
			require.True(t, ok)
			exact := fi.Summary.Table(moveTable.ID)
			var entries uint64
			perVnode := ""
			for _, vs := range exact.Vnodes {
				entries += vs.Counts.Entries
				perVnode += fmt.Sprintf(" v%d:%d", vs.Vnode, vs.Counts.Entries)
			}
			scanned, backing := scanFile(t, a, ti, moveTable.ID, 0, moveTable.VnodeCount)
			require.Equal(t, scanned, entries, "source sst %s: lsmstats' entries against a scan", ti.FileNum)
			t.Logf("source L%d %s virtual, Pebble NumEntries=%5d (its backing file's %5d scaled by size)  lsmstats=%5d (%s)  Pebble %+.1f%%",
				level, ti.FileNum, ti.Properties.NumEntries, backing, entries, perVnode[1:],
				100*(float64(ti.Properties.NumEntries)-float64(entries))/float64(entries))
		}
	}
	if !partitioned {
		require.Positive(t, virtual, "the source's SST across the range's ends became virtual SSTs")
	}
}

// scanFile counts the versions of vnodes [lo, hi) of table in an SST of
// s within its bounds, and returns its backing file's entries (Pebble's
// property).
func scanFile(t *testing.T, s *Store, ti pebble.SSTableInfo, table uint32, lo, hi int) (n, backing uint64) {
	readable, err := s.openSST(uint64(ti.BackingSSTNum))
	require.NoError(t, err)
	r, err := sstable.NewReader(context.Background(), readable, s.popts.MakeReaderOptions())
	require.NoError(t, err)
	defer r.Close()
	it, err := r.NewIter(sstable.NoTransforms, nil, nil, sstable.AssertNoBlobHandles)
	require.NoError(t, err)
	defer it.Close()
	for kv := it.First(); kv != nil; kv = it.Next() {
		if k := kv.K.UserKey; afterOrAt(k, ti.Smallest) && beforeOrAt(k, ti.Largest) && inRange(k, table, lo, hi) {
			n++
		}
	}
	props, err := r.ReadPropertiesBlock(context.Background(), nil)
	require.NoError(t, err)
	return n, props.NumEntries
}

// TestMoveVnodesCompactsSingleDels: GC's SINGLEDELs of the range above
// the shared levels, which Pebble's ScanInternal cannot read, make the
// source compact the range first; the move is then as exact.
func TestMoveVnodesCompactsSingleDels(t *testing.T) {
	e := newMoveEnv(t, false)
	a, b, c := e.a, e.b, e.c
	ctx := context.Background()
	for range 4 {
		c.step(500, 40, 10)
	}
	require.NoError(t, a.CompactRange(ctx, moveTable.ID, 0, 0))
	for range 3 {
		c.step(300, 40, 10)
	}
	require.NoError(t, a.flushMemtable())
	_, err := a.GC(ctx, GCRequest{Table: moveTable.ID, SafeEpoch: c.epoch - 1})
	require.NoError(t, err)
	require.NoError(t, c.w.Close())
	const lo, hi = 0, 4
	lower, upper := moveSpan(moveTable.ID, lo, hi)
	above, err := a.singleDelsAbove(moveTable.ID, lo, hi, lower, upper)
	require.NoError(t, err)
	require.True(t, above, "GC's SINGLEDELs landed above L5")
	epochA, gcA := a.CommittedEpoch(), a.GCEpoch()
	rows := rowsAt(t, a, moveTable, lo, hi, epochA)
	require.Equal(t, c.modelIn(lo, hi, epochA), rows)
	commitOn(t, b, epochA)
	st, err := a.MoveVnodes(ctx, b, moveTable.ID, lo, hi)
	require.NoError(t, err)
	t.Logf("moved: %+v", st)
	require.True(t, st.Compacted)
	for ep := gcA; ep <= epochA; ep++ {
		require.Equal(t, c.modelIn(lo, hi, ep), rowsAt(t, b, moveTable, lo, hi, ep), "B at epoch %d", ep)
	}
	checkStats(t, a, moveTable, "A")
	checkStats(t, b, moveTable, "B")
}

// TestMoveVnodesRefused: a move that cannot be made is refused with an
// error that says why, and changes nothing on either store.
func TestMoveVnodesRefused(t *testing.T) {
	e := newMoveEnv(t, false)
	a, b, c := e.a, e.b, e.c
	ctx := context.Background()
	for range 3 {
		c.step(300, 20, 10)
	}
	srv := e.srv
	open := func(dir string, o *Options) *Store {
		s, err := Open(dir, o)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	local := open(t.TempDir(), &Options{Logger: QuietLogger(io.Discard)})
	otherBucket := open(t.TempDir(), moveOptions(objURL(srv, srv.NewBucket(t), "cluster", "30s")))
	otherPrefix := open(t.TempDir(), moveOptions(objURL(srv, e.bucket, "elsewhere", "30s")))
	for _, s := range []*Store{b, local, otherBucket, otherPrefix} {
		commitOn(t, s, a.CommittedEpoch())
	}
	before := rangeVersions(t, a, moveTable.ID, 0, moveTable.VnodeCount)
	dstB := b // B, as it is open now

	refuse := func(name string, src, dst *Store, table uint32, lo, hi int, mark error, says string) {
		t.Helper()
		_, err := src.MoveVnodes(ctx, dst, table, lo, hi)
		require.Error(t, err, name)
		if mark != nil {
			require.ErrorIs(t, err, mark, name)
		}
		require.ErrorContains(t, err, says, name)
		t.Logf("%s: %v", name, err)
		require.Equal(t, before, rangeVersions(t, a, moveTable.ID, 0, moveTable.VnodeCount), "%s changed A", name)
		require.Empty(t, rangeVersions(t, dstB, moveTable.ID, 0, moveTable.VnodeCount), "%s changed B", name)
	}
	refuse("a writer owns the range", a, b, moveTable.ID, 2, 4, ErrInvalidVnode, "is owned by writer(table 1, vnodes 0-7)")
	require.NoError(t, c.w.Close())
	refuse("unknown table", a, b, 42, 0, 1, ErrUnknownTable, "table 42")
	refuse("empty range", a, b, moveTable.ID, 3, 3, ErrInvalidVnode, "vnode range [3, 3) of table 1 (vnode count 8)")
	refuse("range past the vnodes", a, b, moveTable.ID, 6, 9, ErrInvalidVnode, "vnode range [6, 9)")
	refuse("negative vnode", a, b, moveTable.ID, -1, 2, ErrInvalidVnode, "vnode range [-1, 2)")
	refuse("to itself", a, a, moveTable.ID, 0, 2, nil, "to itself")
	refuse("to nil", a, nil, moveTable.ID, 0, 2, nil, "nil store")
	refuse("to local disk", a, local, moveTable.ID, 0, 2, nil, "keeps its SSTs on local disk")
	refuse("to another bucket", a, otherBucket, moveTable.ID, 0, 2, nil, "on the same bucket and prefix only")
	refuse("to another prefix", a, otherPrefix, moveTable.ID, 0, 2, nil, "on the same bucket and prefix only")

	// A destination with a table 1 of another definition.
	other := open(t.TempDir(), moveOptions(e.url))
	require.NoError(t, other.CreateTable(TableDef{ID: 1, VnodeCount: 8, PK: keys.Schema{keys.Bytes}}))
	commitOn(t, other, a.CommittedEpoch())
	refuse("another table 1", a, other, moveTable.ID, 0, 2, nil, "has a table 1 of another definition")

	// The destination's writer owns a vnode of the range.
	require.NoError(t, b.CreateTable(moveTable))
	vn := roaring.New()
	vn.Add(3)
	w, err := b.NewWriter(moveTable.ID, vn, nil)
	require.NoError(t, err)
	refuse("a writer of the destination owns the range", a, b, moveTable.ID, 2, 4, ErrInvalidVnode, "vnode 3 of table 1 of store "+e.dirB+" is owned by")
	require.NoError(t, w.Close())

	// A reader of the destination pins an epoch below A's GC watermark.
	_, err = a.GC(ctx, GCRequest{Table: moveTable.ID, SafeEpoch: a.CommittedEpoch() - 1})
	require.NoError(t, err)
	before = rangeVersions(t, a, moveTable.ID, 0, moveTable.VnodeCount)
	pin, err := b.Pin(b.GCEpoch())
	require.NoError(t, err)
	refuse("a pin below the source's watermark", a, b, moveTable.ID, 0, 2, ErrEpochUnavailable, "pins epoch 0, below the source's GC watermark")
	pin.Close()

	// A read-only store, either way.
	require.NoError(t, b.Close())
	ro, err := Open(e.dirB, &Options{Logger: QuietLogger(io.Discard), ObjectStore: &objstore.StoreOptions{URL: e.url}, ReadOnly: true})
	require.NoError(t, err)
	dstB = ro
	refuse("to a read-only store", a, ro, moveTable.ID, 0, 2, ErrReadOnly, "store "+e.dirB)
	refuse("from a read-only store", ro, a, moveTable.ID, 0, 2, ErrReadOnly, "")
	require.NoError(t, ro.Close())
	e.b = nil

	// DropVnodes refuses what MoveVnodes does.
	w, err = a.NewWriter(moveTable.ID, vn, nil)
	require.NoError(t, err)
	require.ErrorIs(t, a.DropVnodes(ctx, moveTable.ID, 2, 4), ErrInvalidVnode)
	require.NoError(t, w.Close())
	require.ErrorIs(t, a.DropVnodes(ctx, moveTable.ID, 4, 9), ErrInvalidVnode)
	require.ErrorIs(t, a.DropVnodes(ctx, 42, 0, 1), ErrUnknownTable)
	require.Equal(t, before, rangeVersions(t, a, moveTable.ID, 0, moveTable.VnodeCount))
}

// TestMoveVnodesBack moves a range from A to B and part of it back: A then
// reads its own objects again, under new file numbers (Pebble's
// "boomerang"), and keeps them when B stops referencing them, across a
// reopen (whose sweep of orphaned objects leaves them).
func TestMoveVnodesBack(t *testing.T) {
	e := newMoveEnv(t, false)
	e.load()
	a, b, c := e.a, e.b, e.c
	ctx := context.Background()
	commitOn(t, b, a.CommittedEpoch())
	epochA := a.CommittedEpoch()
	want := c.modelIn(3, 4, epochA)
	versions := rangeVersions(t, a, moveTable.ID, 3, 4)
	_, err := a.MoveVnodes(ctx, b, moveTable.ID, 2, 5)
	require.NoError(t, err)
	// A rewrites what it kept: its own references to the objects B reads
	// go, the objects stay.
	require.NoError(t, a.CompactRange(ctx, moveTable.ID, 0, 0))
	commitOn(t, a, b.CommittedEpoch())
	st, err := b.MoveVnodes(ctx, a, moveTable.ID, 3, 4)
	require.NoError(t, err)
	t.Logf("moved back: %+v", st)
	require.Positive(t, st.SharedSSTs, "A's own objects come back by reference")
	require.Equal(t, versions, rangeVersions(t, a, moveTable.ID, 3, 4))
	require.Empty(t, rangeVersions(t, b, moveTable.ID, 3, 4))
	checkStats(t, a, moveTable, "A after the move back")
	checkStats(t, b, moveTable, "B after the move back")

	// B rewrites what it holds: its references to A's objects go, and A's
	// new ones are the last.
	require.NoError(t, b.CompactRange(ctx, moveTable.ID, 0, 0))
	require.NoError(t, b.Close())
	e.b = nil
	require.NoError(t, a.Close())
	a, err = Open(e.dirA, e.options())
	require.NoError(t, err)
	e.a = a
	require.Equal(t, versions, rangeVersions(t, a, moveTable.ID, 3, 4), "A reads its objects after its sweep")
	require.Equal(t, want, rowsAt(t, a, moveTable, 3, 4, a.CommittedEpoch()))
	checkStats(t, a, moveTable, "A reopened")
	b, err = Open(e.dirB, e.options())
	require.NoError(t, err)
	e.b = b
	checkStats(t, b, moveTable, "B reopened")
}

// TestDropVnodes drops a vnode range of a store on local disk (a move's
// last step, alone): its rows at every epoch and its live statistics go,
// the other vnodes stay, and the statistics equal a scan, also after a
// reopen; commits go on.
func TestDropVnodes(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{Logger: QuietLogger(io.Discard)}
	s, err := Open(dir, opts)
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	c := newChurn(t, s, moveTable, testutil.Seed(t, "move-seed", *moveSeed))
	ctx := context.Background()
	for range 4 {
		c.step(500, 20, 10)
	}
	require.NoError(t, s.CompactRange(ctx, moveTable.ID, 0, 0))
	for range 2 {
		c.step(300, 20, 10)
	}
	require.ErrorIs(t, s.DropVnodes(ctx, moveTable.ID, 2, 4), ErrInvalidVnode, "the churn's writer owns the range")
	require.NoError(t, c.w.Close())
	require.NoError(t, s.DropVnodes(ctx, moveTable.ID, 2, 4))
	check := func(what string) {
		t.Helper()
		require.Empty(t, rangeVersions(t, s, moveTable.ID, 2, 4), what)
		for ep := s.GCEpoch(); ep <= s.CommittedEpoch(); ep++ {
			require.Empty(t, rowsAt(t, s, moveTable, 2, 4, ep), "%s: epoch %d", what, ep)
			require.Equal(t, c.modelIn(0, 2, ep), rowsAt(t, s, moveTable, 0, 2, ep), "%s: epoch %d", what, ep)
			require.Equal(t, c.modelIn(4, 8, ep), rowsAt(t, s, moveTable, 4, 8, ep), "%s: epoch %d", what, ep)
		}
		checkStats(t, s, moveTable, what)
	}
	check("after the drop")
	require.NoError(t, s.Close())
	s, err = Open(dir, opts)
	require.NoError(t, err)
	check("reopened")
	// The vnodes take rows again.
	vn := roaring.New()
	vn.AddRange(2, 4)
	w, err := s.NewWriter(moveTable.ID, vn, nil)
	require.NoError(t, err)
	ep := s.EpochFloor() + 1
	for pk := uint64(1 << 40); pk < 1<<40+100; pk++ {
		k := keys.AppendUint64(nil, pk)
		if v := int(moveTable.VnodeOf(k)); v >= 2 && v < 4 {
			require.NoError(t, w.Insert(ep, uint16(v), k, []byte("again")))
		}
	}
	require.NoError(t, w.Seal(ep))
	require.NoError(t, s.Commit(ep))
	require.NoError(t, w.Close())
	require.NotEmpty(t, rowsAt(t, s, moveTable, 2, 4, ep))
	checkStats(t, s, moveTable, "written again")
}

// TestMoveVnodesCompositePK moves vnodes of a table whose pk is (tenant,
// order): three tenants, so the first column repeats across thousands of
// rows and every key shares a long prefix with its neighbours — a shape
// the churn of the other move tests never makes. Rows are inserted,
// updated and deleted over several checkpoints, compacted into the bucket,
// then more are committed above it. After the move, each store's
// per-vnode physical statistics equal the versions Pebble reads and its
// live ones the rows a scan finds, B's rows of the range are A's from
// before, A has none left, and Verify passes on both.
func TestMoveVnodesCompositePK(t *testing.T) {
	e := newMoveEnv(t, false)
	require.NoError(t, e.c.w.Close())
	a, b := e.a, e.b
	def := TableDef{ID: 2, VnodeCount: 16, PK: keys.Schema{keys.Bytes, keys.Uint64}}
	require.NoError(t, a.CreateTable(def))
	w, err := a.NewWriter(def.ID, nil, nil)
	require.NoError(t, err)
	pk := func(i uint64) []byte {
		return keys.AppendUint64(keys.AppendBytes(nil, []byte(fmt.Sprintf("tenant-%d", i%3))), i)
	}
	row := func(i, version uint64) []byte { return []byte(fmt.Sprintf("order %d v%d", i, version)) }
	epoch := a.EpochFloor()
	commit := func(fn func(epoch uint64)) {
		epoch++
		fn(epoch)
		require.NoError(t, w.Seal(epoch))
		require.NoError(t, a.Commit(epoch))
	}
	const n = 3000
	for c := range uint64(3) {
		commit(func(ep uint64) {
			for i := c * n / 3; i < (c+1)*n/3; i++ {
				require.NoError(t, w.Insert(ep, def.VnodeOf(pk(i)), pk(i), row(i, 0)))
			}
		})
	}
	commit(func(ep uint64) {
		for i := uint64(0); i < n; i += 7 {
			require.NoError(t, w.Update(ep, def.VnodeOf(pk(i)), pk(i), row(i, 0), row(i, 1)))
		}
		for i := uint64(3); i < n; i += 11 {
			if i%7 != 0 {
				require.NoError(t, w.Delete(ep, def.VnodeOf(pk(i)), pk(i), row(i, 0)))
			}
		}
	})
	require.NoError(t, a.CompactRange(context.Background(), def.ID, 0, 0))
	commit(func(ep uint64) {
		for i := uint64(n); i < n+500; i++ {
			require.NoError(t, w.Insert(ep, def.VnodeOf(pk(i)), pk(i), row(i, 0)))
		}
	})
	require.NoError(t, w.Close())

	// rows reads vnodes [lo, hi) at the committed epoch, by pk.
	rows := func(s *Store, lo, hi int) map[string]string {
		out := map[string]string{}
		for v := lo; v < hi; v++ {
			it, err := s.NewIter(def.ID, uint16(v), nil, nil)
			require.NoError(t, err)
			for ok := it.First(); ok; ok = it.Next() {
				out[string(it.PK())] = string(it.Row())
			}
			require.NoError(t, it.Close())
		}
		return out
	}
	check := func(s *Store, what string) {
		require.NoError(t, s.RefreshStats(), what)
		st := s.Stats()
		require.NoError(t, st.PhysicalErr, what)
		for v := range def.VnodeCount {
			p := st.Physical.Vnode(def.ID, uint16(v))
			require.EqualValues(t, len(rangeVersions(t, s, def.ID, v, v+1)), p.Entries-p.PebbleTombstones,
				"%s: vnode %d: physical entries against the versions Pebble reads", what, v)
			var live LiveCountsForTest
			for k, r := range rows(s, v, v+1) {
				live.Rows++
				live.Bytes += int64(len(k) + len(r))
			}
			l := st.Live.Vnode(def.ID, uint16(v))
			require.Equal(t, live, LiveCountsForTest{l.Rows, l.Bytes}, "%s: vnode %d: live counts against a scan", what, v)
		}
		rep, err := s.Verify()
		require.NoError(t, err, what)
		require.True(t, rep.OK(), "%s: %+v", what, rep)
	}
	const lo, hi = 4, 11
	before := rows(a, lo, hi)
	require.NotEmpty(t, before)
	commitOn(t, b, a.CommittedEpoch())
	ms, err := a.MoveVnodes(context.Background(), b, def.ID, lo, hi)
	require.NoError(t, err)
	t.Logf("moved %d live rows: %d SSTs (%d bytes) by reference, %d versions (%d bytes) copied",
		ms.LiveRows, ms.SharedSSTs, ms.SharedBytes, ms.CopiedVersions, ms.CopiedBytes)
	require.Positive(t, ms.SharedSSTs, "SSTs taken by reference")
	require.Positive(t, ms.CopiedVersions, "the versions above the shared levels")
	require.EqualValues(t, len(before), ms.LiveRows)
	require.Equal(t, before, rows(b, lo, hi))
	require.Empty(t, rows(a, lo, hi))
	check(a, "A")
	check(b, "B")
}
