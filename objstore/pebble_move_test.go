package objstore_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/sstable/block"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats/objstore"
	"github.com/stretchr/testify/require"
)

// What Pebble's shared storage gives for moving a key span from one DB to
// another on the same bucket without copying the SSTs of the shared levels
// (the primitive under lsm's vnode moves): ScanInternal on the source in
// skip-shared mode, IngestAndExcise on the destination, Excise on the
// source. Each assumption the store builds on is checked here, on the real
// S3 server.

// moveKey is key i of span s ("s1/key-000042"): spans are prefixes, so the
// span [s1/, s2/) holds exactly span s1's keys.
func moveKey(span, i int) []byte { return []byte(fmt.Sprintf("s%d/key-%06d", span, i)) }

// openShared opens a DB in dir on b with creator id creator (set at once,
// as a store does).
func openShared(t *testing.T, dir string, b *objstore.Bucket, creator uint64, log *testLogger, bg *atomic.Int64) *pebble.DB {
	t.Helper()
	opts := sharedOptions(b, log, bg)
	db, err := pebble.Open(dir, opts)
	require.NoError(t, err)
	require.NoError(t, db.SetCreatorID(creator))
	return db
}

// writeSST writes kvs (sorted) into a new SST at path, as a store writes
// the SSTs it ingests.
func writeSST(t *testing.T, db *pebble.DB, b *objstore.Bucket, path string, kvs [][2][]byte) {
	t.Helper()
	f, err := vfs.Default.Create(path, vfs.WriteCategoryUnspecified)
	require.NoError(t, err)
	o := sharedOptions(b, &testLogger{}, new(atomic.Int64))
	o.EnsureDefaults()
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), o.MakeWriterOptions(0, db.TableFormat()))
	for _, kv := range kvs {
		require.NoError(t, w.Set(kv[0], kv[1]))
	}
	require.NoError(t, w.Close())
}

// readSpan returns every key and value of [lo, hi).
func readSpan(t *testing.T, db *pebble.DB, lo, hi []byte) [][2][]byte {
	t.Helper()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	require.NoError(t, err)
	var out [][2][]byte
	for it.First(); it.Valid(); it.Next() {
		out = append(out, [2][]byte{bytes.Clone(it.Key()), bytes.Clone(it.Value())})
	}
	require.NoError(t, it.Close())
	return out
}

// exported is what ScanInternal gave for a span.
type exported struct {
	shared []pebble.SharedSSTMeta
	points [][2][]byte
	levels map[string]int // points by where they were
}

func (e *exported) close() {
	for _, s := range e.shared {
		s.Backing.Close()
	}
}

func scanShared(t *testing.T, db *pebble.DB, lo, hi []byte) (*exported, error) {
	t.Helper()
	e := &exported{levels: map[string]int{}}
	err := db.ScanInternal(context.Background(), block.CategoryUnknown, lo, hi,
		func(key *pebble.InternalKey, value pebble.LazyValue, info pebble.IteratorLevel) error {
			require.Equal(t, pebble.InternalKeyKindSet, key.Kind(), "%s", key)
			v, _, err := value.Value(nil)
			require.NoError(t, err)
			e.points = append(e.points, [2][]byte{bytes.Clone(key.UserKey), bytes.Clone(v)})
			where := "memtable"
			if info.Kind == pebble.IteratorLevelLSM {
				where = fmt.Sprintf("L%d", info.Level)
			}
			e.levels[where]++
			return nil
		},
		func(start, end []byte, seqNum pebble.SeqNum) error {
			return fmt.Errorf("range deletion [%q, %q)", start, end)
		},
		nil,
		func(sst *pebble.SharedSSTMeta) error {
			e.shared = append(e.shared, *sst)
			return nil
		},
		nil)
	return e, err
}

// TestPebbleSharedMove checks, on two Pebble DBs with their own creator ids
// under one prefix of one bucket:
//
//   - ScanInternal with a shared-file visitor hands the SSTs of L5 and L6
//     that overlap the span as SharedSSTMetas, truncated to the span, and
//     every other key of the span (memtables, L0-L4, also SSTs on the
//     bucket) as points;
//   - IngestAndExcise on the other DB takes those metas as virtual SSTs of
//     the same levels (creating a reference marker beside each object),
//     together with local SSTs: one of the copied points, inside the span,
//     and one outside it (the store's metadata), in one atomic edit;
//   - the source's Excise removes the span, and the objects stay as long
//     as the destination references them, across compactions, deletions
//     and reopens of both;
//   - the virtual SSTs' properties, as DB.SSTables reports them, are the
//     backing file's scaled by size (GetScaledProperties): estimates.
func TestPebbleSharedMove(t *testing.T) {
	b, _ := newBucket(t, func(c *objstore.Config) { c.Prefix = "cluster/" })
	log := &testLogger{}
	var bg atomic.Int64
	dirA, dirB := t.TempDir(), t.TempDir()
	a := openShared(t, dirA, b, 11, log, &bg)
	dst := openShared(t, dirB, b, 12, log, &bg)
	ctx := context.Background()

	// Spans 0..3 of 3000 keys each; compacted to L6, then updates of every
	// third key flushed into L0, then every fifth key in the memtable.
	const n = 3000
	write := func(db *pebble.DB, spans []int, step int, tag string) {
		batch := db.NewBatch()
		for _, s := range spans {
			for i := 0; i < n; i += step {
				require.NoError(t, batch.Set(moveKey(s, i), []byte(fmt.Sprintf("%s-%d-%d-%s", tag, s, i, strings.Repeat("v", 50))), nil))
			}
		}
		require.NoError(t, batch.Commit(pebble.Sync))
	}
	all := []int{0, 1, 2, 3}
	write(a, all, 1, "base")
	require.NoError(t, a.Flush())
	require.NoError(t, a.Compact(ctx, []byte("s"), []byte("t"), false))
	write(a, all, 3, "flushed")
	require.NoError(t, a.Flush())
	write(a, all, 5, "unflushed")
	lo, hi := []byte("s1/"), []byte("s3/") // spans 1 and 2
	before := readSpan(t, a, lo, hi)
	require.Len(t, before, 2*n)

	exp, err := scanShared(t, a, lo, hi)
	require.NoError(t, err)
	defer exp.close()
	require.NotEmpty(t, exp.shared)
	for _, s := range exp.shared {
		require.GreaterOrEqual(t, s.Level, uint8(5))
		require.True(t, bytes.Compare(s.Smallest.UserKey, lo) >= 0 && bytes.Compare(s.Largest.UserKey, hi) < 0,
			"a shared SST's bounds are cut to the span: %s-%s", s.Smallest, s.Largest)
		t.Logf("shared: L%d %s - %s, %d bytes", s.Level, s.Smallest, s.Largest, s.Size)
	}
	// Points: the flushed (L0) and unflushed keys of spans 1 and 2, one per
	// user key, the newest: the memtable's shadow the L0's.
	wantPoints := 0
	for i := 0; i < n; i++ {
		if i%3 == 0 || i%5 == 0 {
			wantPoints++
		}
	}
	require.Len(t, exp.points, 2*wantPoints)
	t.Logf("points by level: %v", exp.levels)
	require.Positive(t, exp.levels["memtable"])
	require.Positive(t, exp.levels["L0"])

	// The destination: the points in a local SST within the span, a
	// metadata SST outside it, the shared SSTs by reference, one edit.
	dst.Set([]byte("s0/mine"), []byte("dst's own"), nil)
	dst.Set([]byte("s1/stale"), []byte("excised"), nil)
	require.NoError(t, dst.Flush())
	pointsPath := filepath.Join(t.TempDir(), "points.sst")
	metaPath := filepath.Join(t.TempDir(), "meta.sst")
	writeSST(t, dst, b, pointsPath, exp.points)
	writeSST(t, dst, b, metaPath, [][2][]byte{{[]byte("zz-meta"), []byte("moved")}})
	st, err := dst.IngestAndExcise(ctx, []string{pointsPath, metaPath}, exp.shared, nil, pebble.KeyRange{Start: lo, End: hi})
	require.NoError(t, err)
	t.Logf("ingested: %+v", st)
	require.Equal(t, before, readSpan(t, dst, lo, hi), "the destination reads what the source held")
	v, closer, err := dst.Get([]byte("zz-meta"))
	require.NoError(t, err)
	require.Equal(t, "moved", string(v))
	require.NoError(t, closer.Close())
	v, closer, err = dst.Get([]byte("s0/mine"))
	require.NoError(t, err)
	require.Equal(t, "dst's own", string(v))
	require.NoError(t, closer.Close())

	levels, err := dst.SSTables(pebble.WithProperties(), pebble.WithKeyRangeFilter(lo, hi))
	require.NoError(t, err)
	virtual := 0
	for l, tables := range levels {
		for _, ti := range tables {
			t.Logf("destination L%d: %s virtual=%v backing=%v size=%d/%d scaled entries=%d",
				l, ti.FileNum, ti.Virtual, ti.BackingType, ti.Size, ti.Properties.DataSize, ti.Properties.NumEntries)
			if ti.BackingType == pebble.BackingTypeSharedForeign {
				require.True(t, ti.Virtual, "a foreign shared SST is virtual")
				require.GreaterOrEqual(t, l, 5, "and keeps its level")
				virtual++
			}
		}
	}
	require.Equal(t, len(exp.shared), virtual)
	// One reference marker per foreign SST, made by the destination.
	_, refs := objectNames(t, b)
	dstRefs := 0
	for _, r := range refs {
		if strings.Contains(r, ".ref.12.") {
			dstRefs++
		}
	}
	require.GreaterOrEqual(t, dstRefs, len(exp.shared))
	exp.close()

	// The source excises the span; compactions then rewrite and delete its
	// own SSTs, the objects the destination uses stay.
	require.NoError(t, a.Excise(ctx, pebble.KeyRange{Start: lo, End: hi}))
	require.Empty(t, readSpan(t, a, lo, hi))
	require.NoError(t, a.Compact(ctx, []byte("s"), []byte("t"), false))
	require.Len(t, readSpan(t, a, []byte("s"), []byte("t")), 2*n)
	require.Equal(t, before, readSpan(t, dst, lo, hi))
	require.NoError(t, dst.Compact(ctx, []byte("s"), []byte("t"), false))
	require.Equal(t, before, readSpan(t, dst, lo, hi))

	require.NoError(t, a.Close())
	require.NoError(t, dst.Close())
	a = openShared(t, dirA, b, 11, log, &bg)
	dst = openShared(t, dirB, b, 12, log, &bg)
	require.Equal(t, before, readSpan(t, dst, lo, hi))
	require.Empty(t, readSpan(t, a, lo, hi))
	require.NoError(t, a.Close())
	require.NoError(t, dst.Close())
	require.Zero(t, bg.Load(), "background errors: %v", log.grep("BG "))
}

// TestPebbleSharedMoveLimits checks what the move cannot do in Pebble
// v2.1.7:
//
//   - ScanInternal panics on a SINGLEDEL it meets as the newest key of a
//     user key outside the shared levels (its point-collapsing iterator
//     does not support them), and a store's GC writes SINGLEDELs: the span
//     must be compacted below them first;
//   - IngestAndExcise of shared SSTs into a DB whose storage has another
//     prefix fails: the backing names the object by locator, creator and
//     file number only, so the destination looks for it, and for the
//     source's reference marker, under its own prefix.
func TestPebbleSharedMoveLimits(t *testing.T) {
	b, _ := newBucket(t, func(c *objstore.Config) { c.Prefix = "cluster/" })
	log := &testLogger{}
	var bg atomic.Int64
	ctx := context.Background()
	a := openShared(t, t.TempDir(), b, 21, log, &bg)
	for i := range 100 {
		require.NoError(t, a.Set(moveKey(1, i), []byte("v"), nil))
	}
	require.NoError(t, a.Flush())
	require.NoError(t, a.Compact(ctx, []byte("s"), []byte("t"), false))
	lo, hi := []byte("s1/"), []byte("s2/")

	// Another prefix of the same bucket.
	other, err := objstore.New(func() objstore.Config { c := b.Config(); c.Prefix = "other/"; return c }())
	require.NoError(t, err)
	defer other.Close()
	c := openShared(t, t.TempDir(), other, 22, log, &bg)
	exp, err := scanShared(t, a, lo, hi)
	require.NoError(t, err)
	require.NotEmpty(t, exp.shared)
	_, err = c.IngestAndExcise(ctx, nil, exp.shared, nil, pebble.KeyRange{Start: lo, End: hi})
	require.Error(t, err)
	t.Logf("IngestAndExcise under another prefix: %v", err)
	exp.close()
	require.Empty(t, readSpan(t, c, lo, hi))
	require.NoError(t, c.Close())

	// A SINGLEDEL in L0 over a SET in L6.
	f := filepath.Join(t.TempDir(), "singledel.sst")
	fw, err := vfs.Default.Create(f, vfs.WriteCategoryUnspecified)
	require.NoError(t, err)
	o := sharedOptions(b, log, &bg)
	o.EnsureDefaults()
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(fw), o.MakeWriterOptions(0, a.TableFormat()))
	require.NoError(t, w.Raw().Add(pebble.MakeInternalKey(moveKey(1, 7), 0, pebble.InternalKeyKindSingleDelete), nil, false))
	require.NoError(t, w.Close())
	require.NoError(t, a.Ingest(ctx, []string{f}))
	var panicked any
	func() {
		defer func() { panicked = recover() }()
		_, _ = scanShared(t, a, lo, hi)
	}()
	require.NotNil(t, panicked, "ScanInternal met a SINGLEDEL above the shared levels")
	t.Logf("ScanInternal's panic: %v", panicked)
	require.Contains(t, fmt.Sprint(panicked), "singledel")
	// Once compacted below, the span moves.
	require.NoError(t, a.Compact(ctx, []byte("s"), []byte("t"), false))
	exp, err = scanShared(t, a, lo, hi)
	require.NoError(t, err)
	require.Empty(t, exp.points)
	exp.close()
	deadline := time.Now().Add(10 * time.Second)
	for bg.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, a.Close())
	require.Zero(t, bg.Load(), "background errors: %v", log.grep("BG "))
}
