package lsm

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats"
	"github.com/lsmstats/lsmstats/internal/s3server"
	"github.com/lsmstats/lsmstats/internal/ssttracker"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/objstore"
	"github.com/lsmstats/lsmstats/stats"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// objTable is the table of the object-store tests.
var objTable = TableDef{ID: 1, VnodeCount: 4, PK: keys.Schema{keys.Uint64}}

// objURL returns the URL of prefix in bucket on srv, whose requests give up
// after retryFor of retries.
func objURL(srv *s3server.Server, bucket, prefix, retryFor string) string {
	return fmt.Sprintf("s3://%s/%s?endpoint=%s&retry-for=%s", bucket, prefix, srv.Endpoint, retryFor)
}

// fillObjStore creates objTable in s and commits rows pks [0, n) at epoch 1,
// ingested, so that the store has SSTs.
func fillObjStore(t *testing.T, s *Store, n int) {
	t.Helper()
	require.NoError(t, s.CreateTable(objTable))
	w, err := s.NewWriter(objTable.ID, nil, nil)
	require.NoError(t, err)
	def, err := s.Table(objTable.ID)
	require.NoError(t, err)
	for pk := range uint64(n) {
		k := keys.AppendUint64(nil, pk)
		require.NoError(t, w.Insert(1, def.VnodeOf(k), k, []byte(fmt.Sprintf("row-%d", pk))))
	}
	require.NoError(t, w.Seal(1))
	require.NoError(t, s.Commit(1))
}

// TestObjectStoreOpen checks what Open refuses on an object store, each with
// a message that says what is wrong, and that a refused Open of a new store
// leaves nothing behind.
func TestObjectStoreOpen(t *testing.T) {
	srv := s3server.Shared(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	a, b := srv.NewBucket(t), srv.NewBucket(t)
	urlA := objURL(srv, a, "s1", "2s")
	open := func(dir, url string) (*Store, error) {
		o := &Options{Logger: QuietLogger(io.Discard), CommitBatchBytes: -1}
		if url != "" {
			o.ObjectStore = &objstore.StoreOptions{URL: url}
		}
		return Open(dir, o)
	}

	dir := t.TempDir()
	s, err := open(dir, urlA)
	require.NoError(t, err)
	fillObjStore(t, s, 100)
	require.NoError(t, s.Close())
	local, err := filepath.Glob(filepath.Join(dir, pebbleDir, "*.sst"))
	require.NoError(t, err)
	require.Empty(t, local)

	// Without the object store, or with another one.
	_, err = open(dir, "")
	require.ErrorContains(t, err, "keeps its SSTs in the object store s3://"+a+"/s1/")
	for _, other := range []string{objURL(srv, b, "s1", "2s"), objURL(srv, a, "s2", "2s")} {
		_, err = open(dir, other)
		require.ErrorContains(t, err, "does not hold the store's objects", other)
		require.ErrorContains(t, err, "s3://"+a+"/s1/", other)
	}
	// A store on local disk, with an object store.
	ldir := t.TempDir()
	s, err = open(ldir, "")
	require.NoError(t, err)
	require.Nil(t, s.ObjectStoreCollector())
	require.NoError(t, s.Close())
	_, err = open(ldir, urlA)
	require.ErrorContains(t, err, "keeps its SSTs on local disk")

	// The object store itself: each failure says which.
	for _, c := range []struct {
		name, url, secret string
		mark              error
		says              string
	}{
		{"wrong credentials", objURL(srv, a, "s3", "2s"), "wrong", objstore.ErrAccessDenied, "access denied"},
		{"missing bucket", objURL(srv, "no-such-bucket", "s3", "2s"), srv.SecretKey, objstore.ErrNoSuchBucket, "no-such-bucket"},
		{"unreachable endpoint", "s3://" + a + "/s3?endpoint=http://127.0.0.1:1&retry-for=1s", srv.SecretKey, objstore.ErrUnreachable, "127.0.0.1:1"},
	} {
		t.Setenv("AWS_SECRET_ACCESS_KEY", c.secret)
		ndir := filepath.Join(t.TempDir(), "store")
		_, err := open(ndir, c.url)
		require.ErrorIs(t, err, c.mark, c.name)
		require.ErrorContains(t, err, c.says, c.name)
		t.Logf("%s: %v", c.name, err)
		_, statErr := os.Stat(filepath.Join(ndir, objectStoreRecordName))
		require.True(t, os.IsNotExist(statErr), "%s: a refused Open left a record", c.name)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)

	// The store opens again with its own object store, all rows there.
	s, err = open(dir, urlA)
	require.NoError(t, err)
	// Its Bucket's metrics count the requests of this Open.
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(s.ObjectStoreCollector()))
	families, err := reg.Gather()
	require.NoError(t, err)
	var requests float64
	for _, f := range families {
		if f.GetName() == "lsmstats_objstore_requests_total" {
			for _, m := range f.GetMetric() {
				requests += m.GetCounter().GetValue()
			}
		}
	}
	require.Positive(t, requests, "no requests counted")
	rep, err := s.Verify()
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep)
	require.EqualValues(t, 100, rep.Rows)
	require.NoError(t, s.Close())
}

// TestObjectStoreCorruption deletes one SST's object from the bucket, and
// flips a byte in another's: Verify names each SST with its object, marked
// ErrCorruption, and once the objects are restored Verify finds nothing.
func TestObjectStoreCorruption(t *testing.T) {
	srv := s3server.Shared(t)
	bucket := testBucket(t, srv, srv.NewBucket(t), "c/")
	dir := t.TempDir()
	opts := &Options{Logger: QuietLogger(io.Discard), CommitBatchBytes: -1,
		ObjectStore: &objstore.StoreOptions{Storage: bucket}}
	s, err := Open(dir, opts)
	require.NoError(t, err)
	defer func() {
		if s != nil {
			require.NoError(t, s.Close())
		}
	}()
	fillObjStore(t, s, 2000)
	rep, err := s.Verify()
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep)

	// The SSTs' objects, by name.
	names, err := bucket.List("", "")
	require.NoError(t, err)
	var ssts []string
	for _, n := range names {
		if p, ok := objstore.ParseName(n); ok && !p.Ref {
			ssts = append(ssts, n)
		}
	}
	require.GreaterOrEqual(t, len(ssts), 2, "objects: %q", names)
	ctx := context.Background()
	read := func(name string) []byte {
		r, size, err := bucket.ReadObject(ctx, name)
		require.NoError(t, err)
		body := make([]byte, size)
		require.NoError(t, r.ReadAt(ctx, body, 0))
		require.NoError(t, r.Close())
		return body
	}
	write := func(name string, body []byte) {
		w, err := bucket.CreateObject(name)
		require.NoError(t, err)
		_, err = w.Write(body)
		require.NoError(t, err)
		require.NoError(t, w.Close())
	}
	// The largest SST holds the table's rows (the others the store's
	// metadata): flip a byte in its data, delete another.
	size := func(n string) int64 {
		sz, err := bucket.Size(n)
		require.NoError(t, err)
		return sz
	}
	slices.SortFunc(ssts, func(x, y string) int { return cmp.Compare(size(y), size(x)) })
	flipped, gone := ssts[0], ssts[1]
	goneBody, flippedBody := read(gone), read(flipped)
	require.NoError(t, bucket.Delete(gone))
	bad := append([]byte(nil), flippedBody...)
	bad[len(bad)/4] ^= 0x40 // in a data block: the footer and index sit at the end
	write(flipped, bad)

	rep, err = s.Verify()
	require.NoError(t, err)
	require.False(t, rep.OK())
	for _, n := range []string{gone, flipped} {
		found := false
		for _, c := range rep.Corrupt {
			if strings.Contains(c, "object "+n) {
				found = true
			}
		}
		require.True(t, found, "Verify does not name object %s: %q", n, rep.Corrupt)
	}
	t.Logf("corrupt: %q", rep.Corrupt)
	// Reopened (nothing in Pebble's caches), the store meets the damage as
	// corruption that names the object: Open, if the missing SST holds
	// metadata, else the read of its rows; the flipped byte at the read of
	// its block.
	require.NoError(t, s.Close())
	s, err = Open(dir, opts)
	if err != nil {
		s = nil
		require.True(t, errors.Is(err, lsmstats.ErrCorruption), "%v", err)
		require.ErrorContains(t, err, gone)
		t.Logf("open: %v", err)
		write(gone, goneBody)
		s, err = Open(dir, opts)
		require.NoError(t, err)
	}
	readAll := func() error {
		var readErr error
		for v := range uint16(objTable.VnodeCount) {
			it, err := s.NewIter(objTable.ID, v, nil, nil)
			if err != nil {
				return err
			}
			for ok := it.First(); ok; ok = it.Next() {
			}
			if err := it.Close(); err != nil && readErr == nil {
				readErr = err
			}
		}
		return readErr
	}
	readErr := readAll()
	require.Error(t, readErr)
	require.True(t, errors.Is(readErr, lsmstats.ErrCorruption), "%v", readErr)
	t.Logf("read: %v", readErr)

	// Restored, the store is whole again.
	write(gone, goneBody)
	write(flipped, flippedBody)
	require.NoError(t, readAll())
	rep, err = s.Verify()
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep)
	require.EqualValues(t, 2000, rep.Rows)
}

// TestObjectStoreLowerLevels keeps only L5 and L6 in the object store
// (ObjectStore.Levels = remote.CreateOnSharedLower): a checkpoint
// committed as a batch is flushed into a local L0 SST, which a compaction
// into L6 moves into the bucket; ingested checkpoints go to the bucket at
// once. The store reopens and verifies.
func TestObjectStoreLowerLevels(t *testing.T) {
	srv := s3server.Shared(t)
	bucket := testBucket(t, srv, srv.NewBucket(t), "lower/")
	dir := t.TempDir()
	opts := &Options{Logger: QuietLogger(io.Discard),
		ObjectStore: &objstore.StoreOptions{Storage: bucket, Levels: remote.CreateOnSharedLower}}
	s, err := Open(dir, opts)
	require.NoError(t, err)
	fillObjStore(t, s, 200) // small: one batch, through the memtable
	require.NoError(t, s.db.Flush())
	local, err := filepath.Glob(filepath.Join(dir, pebbleDir, "*.sst"))
	require.NoError(t, err)
	require.NotEmpty(t, local, "the flush of a batch checkpoint stays local")
	countSSTs := func() int {
		names, err := bucket.List("", "")
		require.NoError(t, err)
		n := 0
		for _, name := range names {
			if p, ok := objstore.ParseName(name); ok && !p.Ref {
				n++
			}
		}
		return n
	}
	before := countSSTs()
	lo, hi := keys.TableSpan(objTable.ID)
	require.NoError(t, s.db.Compact(context.Background(), lo, hi, true))
	require.Greater(t, countSSTs(), before, "the compaction into L6 wrote no object")
	require.NoError(t, s.Close())

	s, err = Open(dir, opts)
	require.NoError(t, err)
	rep, err := s.Verify()
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep)
	require.EqualValues(t, 200, rep.Rows)
	require.NoError(t, s.Close())
}

// tailCounter is a caller's object store: a Bucket that counts its tail
// reads (the statistics' loads of SST properties), and the reads that run
// at once with an Overlap: loads one at a time never meet.
type tailCounter struct {
	*objstore.Bucket
	testutil.Overlap
	calls atomic.Int64 // every tail read
}

// reads returns the number of tail reads so far.
func (c *tailCounter) reads() int { return int(c.calls.Load()) }

func (c *tailCounter) ReadTail(ctx context.Context, name string, n int64) (remote.ObjectReader, []byte, int64, error) {
	c.calls.Add(1)
	if c.Enter() {
		defer c.Leave()
	}
	return c.Bucket.ReadTail(ctx, name, n)
}

// TestObjectStoreStatsLoad fills a store with many SSTs, on local disk and
// on the object store, where the statistics read the properties of the
// SSTs the store writes from their uploads' last bytes, without a request.
// Reopened, the statistics' first refresh reads the SSTs' properties
// several at once (on the object store, tail reads in flight together),
// and its Version equals one loaded an SST at a time. Both
// stores hold the same statistics. With the footers of two SSTs' objects
// damaged, Open loads the others, and the statistics' error names the
// first of the two by number, and its object, every time.
func TestObjectStoreStatsLoad(t *testing.T) {
	srv := s3server.Shared(t)
	bucket := testBucket(t, srv, srv.NewBucket(t), "load/")
	counter := &tailCounter{Bucket: bucket}
	const commits, rows = 30, 25
	sums := map[string]map[[2]uint32]stats.Counts{}
	var objDir string
	var objOpts *Options
	var dataSSTs []uint64 // of the store on the object store, by number
	for _, side := range []string{"local", "object store"} {
		opts := &Options{Logger: QuietLogger(io.Discard), CommitBatchBytes: -1, Pebble: func(po *pebble.Options) {
			po.DisableAutomaticCompactions = true
			po.L0StopWritesThreshold = 1000
		}}
		if side == "object store" {
			opts.ObjectStore = &objstore.StoreOptions{Storage: counter}
		}
		dir := t.TempDir()
		s, err := Open(dir, opts)
		require.NoError(t, err)
		require.NoError(t, s.CreateTable(objTable))
		def, err := s.Table(objTable.ID)
		require.NoError(t, err)
		w, err := s.NewWriter(objTable.ID, nil, nil)
		require.NoError(t, err)
		for epoch := uint64(1); epoch <= commits; epoch++ {
			for pk := (epoch - 1) * rows; pk < epoch*rows; pk++ {
				k := keys.AppendUint64(nil, pk)
				require.NoError(t, w.Insert(epoch, def.VnodeOf(k), k, []byte(fmt.Sprintf("row-%d", pk))))
			}
			require.NoError(t, w.Seal(epoch))
			require.NoError(t, s.Commit(epoch))
		}
		require.GreaterOrEqual(t, s.tracker.Current().NumFiles(), commits, side)
		require.Zero(t, counter.reads(), "tail reads of SSTs the store wrote")
		require.NoError(t, s.Close())

		counter.Arm(4, 10*time.Second)
		s, err = Open(dir, opts)
		most := counter.Disarm()
		require.NoError(t, err)
		if side == "object store" {
			require.GreaterOrEqual(t, counter.reads(), s.tracker.Current().NumFiles(), "tail reads at Open")
			require.GreaterOrEqual(t, most, 4, "tail reads in flight at once while Open loaded the statistics")
			require.LessOrEqual(t, most, ssttracker.DefaultLoadParallelism)
		}
		v := s.tracker.Current()
		require.GreaterOrEqual(t, v.NumFiles(), commits, side)
		cfg := s.tracker.Config()
		cfg.LoadParallelism = 1
		seq, err := ssttracker.Recompute(cfg)
		require.NoError(t, err)
		require.NoError(t, ssttracker.DiffVersions(v, seq), side)
		st := s.Stats().Physical
		sums[side] = map[[2]uint32]stats.Counts{}
		for _, table := range st.Tables() {
			for _, vn := range st.Vnodes(table) {
				sums[side][[2]uint32{table, uint32(vn)}] = st.Vnode(table, vn)
			}
		}
		t.Logf("%s: %d SSTs, %d (table, vnode)s; at most %d tail reads at once", side, v.NumFiles(), len(sums[side]), most)
		if side == "object store" {
			objDir, objOpts = dir, opts
			for _, f := range ssttracker.Files(v) {
				if f.Summary.Table(objTable.ID) != nil && f.Summary.MetaKeys == 0 {
					dataSSTs = append(dataSSTs, f.BackingNum)
				}
			}
		}
		require.NoError(t, s.Close())
	}
	require.Equal(t, sums["local"], sums["object store"])

	// Two SSTs' footers damaged (their rows' SSTs: Open reads no row).
	require.Greater(t, len(dataSSTs), 10)
	bad := []uint64{dataSSTs[9], dataSSTs[2]}
	ctx := context.Background()
	rec, _, err := readObjectStoreRecord(vfs.Default, objDir)
	require.NoError(t, err)
	bodies := map[uint64][]byte{}
	for _, num := range bad {
		name := objstore.SSTName(rec.creator, num)
		r, size, err := bucket.ReadObject(ctx, name)
		require.NoError(t, err)
		body := make([]byte, size)
		require.NoError(t, r.ReadAt(ctx, body, 0))
		require.NoError(t, r.Close())
		bodies[num] = body
		damaged := slices.Clone(body)
		damaged[len(damaged)-10] ^= 0xff // the footer's format version
		writeObj(t, bucket, name, damaged)
	}
	for range 3 {
		s, err := Open(objDir, objOpts)
		require.NoError(t, err, "a damaged SST's statistics do not keep a store from opening")
		perr := s.Stats().PhysicalErr
		require.Error(t, perr)
		require.True(t, lsmstats.IsCorruption(perr), "%v", perr)
		require.ErrorContains(t, perr, fmt.Sprintf("sst %06d", bad[1]))
		require.ErrorContains(t, perr, "object "+objstore.SSTName(rec.creator, bad[1])+" in ")
		require.NotContains(t, perr.Error(), objstore.SSTName(rec.creator, bad[0]))
		require.NoError(t, s.Close())
	}
	for num, body := range bodies {
		writeObj(t, bucket, objstore.SSTName(rec.creator, num), body)
	}
	s, err := Open(objDir, objOpts)
	require.NoError(t, err)
	require.NoError(t, s.Stats().PhysicalErr)
	require.NoError(t, s.Close())
}

// writeObj writes body as object name of b.
func writeObj(t *testing.T, b *objstore.Bucket, name string, body []byte) {
	t.Helper()
	w, err := b.CreateObject(name)
	require.NoError(t, err)
	_, err = w.Write(body)
	require.NoError(t, err)
	require.NoError(t, w.Close())
}

// vanishingBucket is a Bucket that runs a hook once, when an object it is
// armed with is opened (ReadObject: a HEAD), between the open and the
// open's return: the hook deletes the object, by the store's own work.
type vanishingBucket struct {
	*objstore.Bucket
	mu    sync.Mutex
	name  string
	hook  func()
	fired bool
}

func (b *vanishingBucket) arm(name string, hook func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.name, b.hook = name, hook
}

func (b *vanishingBucket) ReadObject(ctx context.Context, name string) (remote.ObjectReader, int64, error) {
	r, size, err := b.Bucket.ReadObject(ctx, name)
	b.mu.Lock()
	hook := b.hook
	if err != nil || name != b.name || hook == nil {
		hook = nil
	} else {
		b.hook, b.fired = nil, true
	}
	b.mu.Unlock()
	if hook != nil {
		hook()
	}
	return r, size, err
}

// TestObjectStoreVerifyVanished is a compaction that replaces an SST while
// Verify checks it: Verify lists the SSTs and opens one's object (a HEAD),
// then the compaction ends and Pebble deletes the object, then Verify reads
// the SST's footer (a GET): the object is missing. The SST is no longer
// live, so Verify checks its replacements, as it does for an SST that is
// missing at its open, and finds nothing wrong. (Verify once failed with
// the GET's error: TestCluster's final check after the job's last commits,
// which left compactions running.)
func TestObjectStoreVerifyVanished(t *testing.T) {
	srv := s3server.Shared(t)
	bucket := testBucket(t, srv, srv.NewBucket(t), "v/")
	vb := &vanishingBucket{Bucket: bucket}
	opts := &Options{Logger: QuietLogger(io.Discard), CommitBatchBytes: -1,
		ObjectStore: &objstore.StoreOptions{Storage: vb},
		Pebble:      func(po *pebble.Options) { po.DisableAutomaticCompactions = true }}
	s, err := Open(t.TempDir(), opts)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()

	// Epoch 1's rows, then epochs that update some of them: SSTs above the
	// bottom level that overlap the ones below, which a compaction rewrites.
	require.NoError(t, s.CreateTable(objTable))
	def, err := s.Table(objTable.ID)
	require.NoError(t, err)
	w, err := s.NewWriter(objTable.ID, nil, nil)
	require.NoError(t, err)
	rows := map[uint64][]byte{}
	for epoch := uint64(1); epoch <= 4; epoch++ {
		step := uint64(7)
		if epoch == 1 {
			step = 1
		}
		for pk := epoch - 1; pk < 2000; pk += step {
			k := keys.AppendUint64(nil, pk)
			row := []byte(fmt.Sprintf("row-%d-%d", pk, epoch))
			if old, ok := rows[pk]; ok {
				require.NoError(t, w.Update(epoch, def.VnodeOf(k), k, old, row))
			} else {
				require.NoError(t, w.Insert(epoch, def.VnodeOf(k), k, row))
			}
			rows[pk] = row
		}
		require.NoError(t, w.Seal(epoch))
		require.NoError(t, s.Commit(epoch))
	}
	require.NoError(t, w.Close())
	rep, err := s.Verify()
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep)

	// An SST of the table above the bottom level (the store's metadata
	// SSTs are outside its span).
	lower, upper := moveSpan(objTable.ID, 0, objTable.VnodeCount)
	levels, err := s.db.SSTables(pebble.WithKeyRangeFilter(lower, upper))
	require.NoError(t, err)
	top := slices.IndexFunc(levels, func(ts []pebble.SSTableInfo) bool { return len(ts) > 0 })
	require.Less(t, top, 6, "an SST of the table above the bottom level: %v", levels)
	num := uint64(levels[top][0].BackingSSTNum)
	name := s.obj.sstObject(num)
	vb.arm(name, func() {
		// Every level into the bottom one: the SST is replaced, and Pebble
		// deletes its object in the background.
		require.NoError(t, s.db.Compact(context.Background(), lower, upper, true))
		require.Eventually(t, func() bool {
			_, err := bucket.Size(name)
			return bucket.IsNotExistError(err)
		}, 30*time.Second, 10*time.Millisecond, "object %s deleted after the compaction", name)
	})
	rep, err = s.Verify()
	require.NoError(t, err, "Verify during the compaction that replaced SST %06d", num)
	require.True(t, rep.OK(), "%+v", rep)
	require.True(t, vb.fired, "Verify opened SST %06d's object %s", num, name)
	live, err := s.db.SSTables()
	require.NoError(t, err)
	for _, ts := range live {
		for _, ti := range ts {
			require.NotEqual(t, num, uint64(ti.BackingSSTNum), "SST %06d is still live", num)
		}
	}
	// Verify checked every SST left (the compaction's).
	n := 0
	for _, ts := range live {
		n += len(ts)
	}
	require.GreaterOrEqual(t, rep.Files, n, "SSTs checked")
}

// testBucket returns a Bucket of srv's bucket under prefix, closed when the
// test ends, whose requests give up after 5 s.
func testBucket(t *testing.T, srv *s3server.Server, bucket, prefix string) *objstore.Bucket {
	t.Helper()
	b, err := objstore.New(objstore.Config{Endpoint: srv.Endpoint, Bucket: bucket, Prefix: prefix,
		AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey, Retry: objstore.RetryPolicy{MaxElapsed: 5 * time.Second}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}
