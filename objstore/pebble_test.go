package objstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats/objstore"
	"github.com/stretchr/testify/require"
)

const locator = remote.Locator("bucket")

// testLogger keeps Pebble's log lines for the test to look at.
type testLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *testLogger) Infof(format string, args ...any) { l.add("I " + fmt.Sprintf(format, args...)) }
func (l *testLogger) Errorf(format string, args ...any) {
	l.add("E " + fmt.Sprintf(format, args...))
}
func (l *testLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble fatal: "+format, args...))
}
func (l *testLogger) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
}
func (l *testLogger) grep(sub string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			out = append(out, s)
		}
	}
	return out
}

// sharedOptions returns Pebble options that create every SST on b.
func sharedOptions(b *objstore.Bucket, log *testLogger, bgErrors *atomic.Int64) *pebble.Options {
	o := &pebble.Options{
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             log,
		EventListener: &pebble.EventListener{
			BackgroundError: func(err error) {
				bgErrors.Add(1)
				log.add("BG " + err.Error())
			},
			// Pebble's default for this event is the logger's Fatalf.
			DataCorruption: func(info pebble.DataCorruptionInfo) {
				log.add(fmt.Sprintf("CORRUPT path=%s remote=%v locator=%s", info.Path, info.IsRemote, info.Locator))
			},
		},
	}
	o.Experimental.RemoteStorage = remote.MakeSimpleFactory(map[remote.Locator]remote.Storage{locator: b})
	o.Experimental.CreateOnShared = remote.CreateOnSharedAll
	o.Experimental.CreateOnSharedLocator = locator
	return o
}

func key(i int) []byte   { return []byte(fmt.Sprintf("key-%06d", i)) }
func value(i int) []byte { return []byte(fmt.Sprintf("value-%06d-%s", i, strings.Repeat("v", 100))) }

// objectNames lists b's objects: SSTs and their reference markers.
func objectNames(t *testing.T, b *objstore.Bucket) (ssts, refs []string) {
	names, err := b.List("", "")
	require.NoError(t, err)
	for _, n := range names {
		if strings.Contains(n, ".ref.") {
			refs = append(refs, n)
		} else {
			ssts = append(ssts, n)
		}
	}
	return ssts, refs
}

var (
	sstName = regexp.MustCompile(`^([0-9a-f]{4})-(\d+)-(\d{6})\.sst$`)
	refName = regexp.MustCompile(`^([0-9a-f]{4})-(\d+)-(\d{6})\.sst\.ref\.(\d+)\.(\d{6})$`)
)

// checkNames checks that every object is named as Pebble names shared
// objects (objstorageprovider/remote_obj_name.go): "HASH-CREATOR-FILENUM.sst",
// HASH = uint16(creator*7459 + filenum*17539) in 4 hex digits, and one
// reference marker "NAME.ref.CREATOR.FILENUM" per SST, made by its creator
// under its own file number.
func checkNames(t *testing.T, ssts, refs []string, creator int) {
	require.NotEmpty(t, ssts)
	require.Len(t, refs, len(ssts))
	for _, n := range ssts {
		m := sstName.FindStringSubmatch(n)
		require.NotNil(t, m, "object %q is not named as an SST", n)
		c, _ := strconv.Atoi(m[2])
		f, _ := strconv.Atoi(m[3])
		require.Equal(t, creator, c, n)
		require.Equal(t, fmt.Sprintf("%04x", uint16(uint64(c)*7459+uint64(f)*17539)), m[1], n)
		require.Contains(t, refs, fmt.Sprintf("%s.ref.%d.%s", n, creator, m[3]))
		// The package's names are Pebble's.
		require.Equal(t, n, objstore.SSTName(uint64(c), uint64(f)))
		parsed, ok := objstore.ParseName(n)
		require.True(t, ok, n)
		require.Equal(t, objstore.ObjectName{Creator: uint64(c), FileNum: uint64(f)}, parsed)
	}
	for _, r := range refs {
		require.Regexp(t, refName, r)
		parsed, ok := objstore.ParseName(r)
		require.True(t, ok, r)
		require.True(t, parsed.Ref, r)
		require.Equal(t, uint64(creator), parsed.RefCreator, r)
	}
}

func localFiles(t *testing.T, dir string) []string {
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func hasFile(names []string, re string) bool {
	return slices.ContainsFunc(names, regexp.MustCompile(re).MatchString)
}

// Pebble itself on a Bucket: every SST goes to the bucket under Pebble's
// shared-object names, the local directory keeps the WAL, the MANIFEST and
// the remote-object catalog, and a reopen (with and without a WAL to
// replay) reads everything back from the bucket.
func TestPebbleOnBucket(t *testing.T) {
	b, _ := newBucket(t, func(c *objstore.Config) { c.Prefix = "node-1/" })
	dir := t.TempDir()
	log := &testLogger{}
	var bgErrors atomic.Int64
	const creator = 7
	opts := sharedOptions(b, log, &bgErrors)
	// Only the test's own compaction: an automatic one after the second
	// flush would race with the listing below (its output appearing
	// beside its inputs).
	opts.DisableAutomaticCompactions = true
	db, err := pebble.Open(dir, opts)
	require.NoError(t, err)
	// Shared objects need a creator id before the first SST is made.
	require.NoError(t, db.SetCreatorID(creator))

	const n = 20000
	write := func(db *pebble.DB, from, to, step int) {
		batch := db.NewBatch()
		for i := from; i < to; i += step {
			require.NoError(t, batch.Set(key(i), value(i), nil))
		}
		require.NoError(t, batch.Commit(pebble.Sync))
	}
	// Two flushes whose key ranges overlap, so that compacting them
	// rewrites them (SSTs that overlap nothing are moved down the LSM as
	// they are, the object unchanged).
	write(db, 0, n, 2)
	require.NoError(t, db.Flush())
	write(db, 1, n, 2)
	require.NoError(t, db.Flush())

	ssts, refs := objectNames(t, b)
	checkNames(t, ssts, refs, creator)
	t.Logf("after two flushes: %v", ssts)
	require.Len(t, ssts, 2, "one SST per flush")
	m := db.Metrics()
	remoteCount, remoteSize := m.RemoteTablesTotal()
	require.Equal(t, uint64(2), remoteCount)
	require.Positive(t, remoteSize)
	require.Equal(t, int64(2), m.Levels[0].TablesCount, "flushes go to L0, on the bucket too")

	files := localFiles(t, dir)
	t.Logf("local directory: %v", files)
	require.False(t, hasFile(files, `\.sst$`), "an SST stayed local: %v", files)
	require.True(t, hasFile(files, `^REMOTE-OBJ-CATALOG-\d{6}$`), "%v", files)
	require.True(t, hasFile(files, `^marker\.remote-obj-catalog\.`), "%v", files)
	require.True(t, hasFile(files, `^MANIFEST-\d{6}$`), "%v", files)
	require.True(t, hasFile(files, `^\d{6}\.log$`), "%v", files)

	// A compaction reads the L0 SSTs from the bucket, writes its output
	// there, and deletes its inputs (marker first, then the object).
	require.NoError(t, db.Compact(context.Background(), key(0), key(n), true))
	deadline := time.Now().Add(30 * time.Second)
	for {
		after, _ := objectNames(t, b)
		if !slices.ContainsFunc(after, func(s string) bool { return slices.Contains(ssts, s) }) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	compacted, refs := objectNames(t, b)
	checkNames(t, compacted, refs, creator)
	for _, s := range ssts {
		require.NotContains(t, compacted, s, "a compacted SST was not deleted from the bucket")
	}
	m = db.Metrics()
	require.Zero(t, m.Levels[0].TablesCount)
	require.Equal(t, int64(len(compacted)), m.Levels[6].TablesCount)
	t.Logf("after the compaction: %v", compacted)

	// An ingested SST is copied into the bucket (whatever level it lands
	// in) before the ingestion's MANIFEST edit, and the local file is
	// removed, as Ingest does on local disk.
	ingestPath := filepath.Join(t.TempDir(), "ingest.sst")
	f, err := vfs.Default.Create(ingestPath, vfs.WriteCategoryUnspecified)
	require.NoError(t, err)
	wopts := sharedOptions(b, log, &bgErrors)
	wopts.EnsureDefaults()
	sw := sstable.NewWriter(objstorageprovider.NewFileWritable(f), wopts.MakeWriterOptions(0, db.TableFormat()))
	require.NoError(t, sw.Set([]byte("ingested"), []byte("yes")))
	require.NoError(t, sw.Close())
	before := b.Stats()
	require.NoError(t, db.Ingest(context.Background(), []string{ingestPath}))
	ingested := b.Stats().Sub(before)
	require.Equal(t, int64(2), ingested.Of(objstore.KindPut).Requests, "the SST and its marker")
	withIngested, refs := objectNames(t, b)
	checkNames(t, withIngested, refs, creator)
	require.Len(t, withIngested, len(compacted)+1)
	_, err = os.Stat(ingestPath)
	require.True(t, os.IsNotExist(err), "%v", err)
	v, closer, err := db.Get([]byte("ingested"))
	require.NoError(t, err)
	require.Equal(t, "yes", string(v))
	require.NoError(t, closer.Close())
	compacted = withIngested

	// Unflushed writes stay in the WAL only.
	write(db, n, n+100, 1)
	require.NoError(t, db.Close())
	stillThere, _ := objectNames(t, b)
	require.Equal(t, compacted, stillThere, "Close wrote to the bucket")

	// Reopen: the catalog knows the creator id and the objects; the WAL's
	// records are flushed to a new SST in the bucket.
	before = b.Stats()
	db, err = pebble.Open(dir, sharedOptions(b, log, &bgErrors))
	require.NoError(t, err)
	opened := b.Stats().Sub(before)
	t.Logf("Open: %d requests (%d HEAD, %d GET, %d PUT)", opened.Total().Requests,
		opened.Of(objstore.KindHead).Requests, opened.Of(objstore.KindGet).Requests, opened.Of(objstore.KindPut).Requests)
	require.NoError(t, db.SetCreatorID(creator), "the same creator id again")
	// Another creator id: an error, or a panic in Pebble's invariants
	// builds (-race), so a store must check the id before it asks.
	if raceEnabled {
		require.Panics(t, func() { _ = db.SetCreatorID(creator + 1) })
	} else {
		require.ErrorContains(t, db.SetCreatorID(creator+1), "attempt to change CreatorID")
	}
	for i := 0; i < n+100; i += 97 {
		v, closer, err := db.Get(key(i))
		require.NoError(t, err, "key %d", i)
		require.Equal(t, value(i), v)
		require.NoError(t, closer.Close())
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte("key-"), UpperBound: []byte("key.")})
	require.NoError(t, err)
	count := 0
	for it.First(); it.Valid(); it.Next() {
		require.Equal(t, value(count), it.Value())
		count++
	}
	require.NoError(t, it.Close())
	require.Equal(t, n+100, count)
	require.NoError(t, db.Flush())
	reopened, refs := objectNames(t, b)
	checkNames(t, reopened, refs, creator)
	t.Logf("after reopen and replay: %v", reopened)
	require.GreaterOrEqual(t, len(reopened), len(compacted)+1, "the replayed WAL went to the bucket")
	require.NoError(t, db.Close())
	require.Zero(t, bgErrors.Load(), "background errors: %v", log.grep("BG "))

	// An SST deleted from the bucket behind Pebble's back: Open does not
	// notice, a read of its keys fails with Pebble's corruption error,
	// which names the object.
	require.NoError(t, b.Delete(compacted[0]))
	db, err = pebble.Open(dir, sharedOptions(b, log, &bgErrors))
	require.NoError(t, err)
	_, _, err = db.Get(key(0))
	require.Error(t, err)
	require.True(t, pebble.IsCorruptionError(err), "%v", err)
	require.ErrorContains(t, err, compacted[0])
	t.Logf("read of a deleted SST: %v", err)
	events := log.grep("CORRUPT ")
	require.NotEmpty(t, events)
	t.Logf("its DataCorruption event: %s", events[0])
	require.Contains(t, events[0], "remote=true locator="+string(locator))
	require.NoError(t, db.Close())

	// A second store in the same bucket, under another prefix and creator
	// id, does not see the first one's objects.
	b2, err := objstore.New(func() objstore.Config { c := b.Config(); c.Prefix = "node-2/"; return c }())
	require.NoError(t, err)
	defer b2.Close()
	db2, err := pebble.Open(t.TempDir(), sharedOptions(b2, log, &bgErrors))
	require.NoError(t, err)
	require.NoError(t, db2.SetCreatorID(8))
	write(db2, 0, 10, 1)
	require.NoError(t, db2.Flush())
	ssts2, refs2 := objectNames(t, b2)
	checkNames(t, ssts2, refs2, 8)
	require.NoError(t, db2.Close())
	again, _ := objectNames(t, b)
	require.Equal(t, slices.DeleteFunc(reopened, func(s string) bool { return s == compacted[0] }), again)
}

// What Pebble does when the server is down during a flush: the flush's
// upload fails after the Bucket's retries, Pebble reports a background
// error and tries the flush again, and DB.Flush waits; once the server is
// back, the flush succeeds and nothing is lost.
func TestPebbleServerDownDuringFlush(t *testing.T) {
	t.Parallel() // a server of its own, mostly waited for
	b, srv := startOwn(t, objstore.RetryPolicy{
		MaxAttempts: 1000, InitialBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		AttemptTimeout: 2 * time.Second, MaxElapsed: 3 * time.Second,
	})
	dir := t.TempDir()
	log := &testLogger{}
	var bgErrors atomic.Int64
	db, err := pebble.Open(dir, sharedOptions(b, log, &bgErrors))
	require.NoError(t, err)
	require.NoError(t, db.SetCreatorID(1))
	for i := range 1000 {
		require.NoError(t, db.Set(key(i), value(i), pebble.Sync))
	}

	srv.Stop(t)
	flushed := make(chan error, 1)
	start := time.Now()
	go func() { flushed <- db.Flush() }()
	deadline := time.Now().Add(60 * time.Second)
	for bgErrors.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	require.GreaterOrEqual(t, bgErrors.Load(), int64(2), "no background errors while the server is down")
	select {
	case err := <-flushed:
		t.Fatalf("DB.Flush returned while the server was down: %v", err)
	default:
	}
	errs := log.grep("BG ")
	t.Logf("%d background errors in %s while the server is down; first: %s", len(errs), time.Since(start), errs[0])
	require.Contains(t, errs[0], srv.Endpoint)
	// Writes still go to the WAL and the memtable.
	require.NoError(t, db.Set(key(5000), value(5000), pebble.Sync))

	srv.Start(t)
	select {
	case err := <-flushed:
		require.NoError(t, err)
	case <-time.After(2 * time.Minute):
		t.Fatal("DB.Flush did not return after the server came back")
	}
	t.Logf("flush done %s after the server went down", time.Since(start))
	for _, i := range []int{0, 999, 5000} {
		v, closer, err := db.Get(key(i))
		require.NoError(t, err)
		require.Equal(t, value(i), v)
		require.NoError(t, closer.Close())
	}
	require.NoError(t, db.Close())

	// Reopen: all there.
	db, err = pebble.Open(dir, sharedOptions(b, log, &bgErrors))
	require.NoError(t, err)
	for _, i := range []int{0, 500, 999, 5000} {
		v, closer, err := db.Get(key(i))
		require.NoError(t, err)
		require.Equal(t, value(i), v)
		require.NoError(t, closer.Close())
	}
	require.NoError(t, db.Close())

	// The SSTs of the flushes that failed after their upload (the PUT of
	// the reference marker failed, or Pebble gave up) stay in the bucket
	// without a marker: orphans, which Pebble never deletes.
	ssts, refs := objectNames(t, b)
	var orphans []string
	for _, s := range ssts {
		if !slices.ContainsFunc(refs, func(r string) bool { return strings.HasPrefix(r, s+".ref.") }) {
			orphans = append(orphans, s)
		}
	}
	db, err = pebble.Open(dir, sharedOptions(b, log, &bgErrors))
	require.NoError(t, err)
	live, _ := db.Metrics().RemoteTablesTotal()
	require.NoError(t, db.Close())
	require.Equal(t, int(live), len(refs), "one marker per live SST")
	require.Equal(t, len(ssts), len(refs)+len(orphans))
	t.Logf("objects after the outage: %d SSTs, %d live, orphans %v", len(ssts), live, orphans)
}

// With CreateOnSharedLower only L5 and L6 are in the bucket: flushes stay
// local, and an SST that a compaction moves down into L6 as it is gets
// copied into the bucket.
func TestPebbleSharedLower(t *testing.T) {
	b, _ := newBucket(t)
	dir := t.TempDir()
	log := &testLogger{}
	var bgErrors atomic.Int64
	opts := sharedOptions(b, log, &bgErrors)
	opts.Experimental.CreateOnShared = remote.CreateOnSharedLower
	db, err := pebble.Open(dir, opts)
	require.NoError(t, err)
	require.NoError(t, db.SetCreatorID(3))
	for i := range 1000 {
		require.NoError(t, db.Set(key(i), value(i), nil))
	}
	require.NoError(t, db.Flush())
	ssts, _ := objectNames(t, b)
	require.Empty(t, ssts, "a flush went to the bucket")
	require.True(t, hasFile(localFiles(t, dir), `\.sst$`))

	require.NoError(t, db.Compact(context.Background(), key(0), key(1000), true))
	m := db.Metrics()
	require.Equal(t, int64(1), m.Levels[6].TablesCount)
	ssts, refs := objectNames(t, b)
	checkNames(t, ssts, refs, 3)
	require.Len(t, ssts, 1)
	count, _ := m.RemoteTablesTotal()
	require.Equal(t, uint64(1), count)
	t.Logf("L6 after the compaction: %v; local: %v", ssts, localFiles(t, dir))
	v, closer, err := db.Get(key(500))
	require.NoError(t, err)
	require.Equal(t, value(500), v)
	require.NoError(t, closer.Close())
	require.NoError(t, db.Close())
}
