package lsm

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats"
	"github.com/lsmstats/lsmstats/internal/s3server"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/objstore"
	"github.com/stretchr/testify/require"
)

// TestBackupRestore loses a store's directory after a backup: its WAL,
// MANIFEST and catalog are gone, its SSTs are in the object store. The
// store restored from the backup on a new directory has the backup's
// committed epoch and its rows, though the store compacted the backup's
// SSTs away after it, reopened (and swept its orphaned objects) and
// committed more before the loss; Verify is clean, and the restored store
// commits again, closes and reopens. Restore refuses a directory that
// holds a store, a missing backup, a bad name, and a backup file that
// does not match its index (ErrCorruption, naming the object). Commits
// are ingested SSTs, or batches in Pebble's WAL, which the backup carries.
func TestBackupRestore(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) { testBackupRestore(t, batched) })
	}
}

func testBackupRestore(t *testing.T, batched bool) {
	srv := s3server.Shared(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	url := objURL(srv, srv.NewBucket(t), "b", "5s")
	opts := func() *Options {
		o := &Options{Logger: QuietLogger(io.Discard), CommitBatchBytes: -1, ObjectStore: &objstore.StoreOptions{URL: url}}
		if batched {
			o.CommitBatchBytes = 0
		}
		return o
	}
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, opts())
	require.NoError(t, err)
	require.NoError(t, s.CreateTable(objTable))
	def, err := s.Table(objTable.ID)
	require.NoError(t, err)
	rows := map[uint64]string{}
	w, err := s.NewWriter(objTable.ID, nil, nil)
	require.NoError(t, err)
	commit := func(epoch uint64, tag string) {
		for pk := epoch; pk < 1500; pk += 1 + epoch%3 {
			k := keys.AppendUint64(nil, pk)
			row := fmt.Sprintf("row-%d-%s-%d", pk, tag, epoch)
			if old, ok := rows[pk]; ok {
				require.NoError(t, w.Update(epoch, def.VnodeOf(k), k, []byte(old), []byte(row)))
			} else {
				require.NoError(t, w.Insert(epoch, def.VnodeOf(k), k, []byte(row)))
			}
			rows[pk] = row
		}
		require.NoError(t, w.Seal(epoch))
		require.NoError(t, s.Commit(epoch))
	}
	for e := uint64(1); e <= 3; e++ {
		commit(e, "a")
	}
	_, err = s.Backup(ctx, "../x")
	require.ErrorContains(t, err, `backup name "../x"`)
	info, err := s.Backup(ctx, "nodes/n1")
	require.NoError(t, err)
	require.EqualValues(t, 3, info.Epoch)
	require.Positive(t, info.Objects)
	require.Positive(t, info.Files)
	t.Logf("backup: %+v", info)
	backedUp := map[uint64]string{}
	for k, v := range rows {
		backedUp[k] = v
	}

	// After the backup: a compaction replaces every SST of the table, the
	// store closes and opens (its sweep), and commits epoch 4.
	lower, upper := moveSpan(objTable.ID, 0, objTable.VnodeCount)
	require.NoError(t, s.db.Compact(ctx, lower, upper, true))
	require.NoError(t, w.Close())
	require.NoError(t, s.Close())
	s, err = Open(dir, opts())
	require.NoError(t, err)
	w, err = s.NewWriter(objTable.ID, nil, nil)
	require.NoError(t, err)
	commit(4, "b")
	require.NoError(t, w.Close())
	require.NoError(t, s.Close())

	// The directory is lost.
	require.NoError(t, os.RemoveAll(dir))
	o := opts()
	_, err = Restore(ctx, dir, o, "nodes/n2")
	require.ErrorIs(t, err, ErrNoBackup)
	got, err := Restore(ctx, dir, o, "nodes/n1")
	require.NoError(t, err)
	require.Equal(t, info.Seq, got.Seq)
	require.EqualValues(t, 3, got.Epoch)
	require.Positive(t, got.Removed, "the SSTs of epoch 4 and of the compaction")
	t.Logf("restore: %+v", got)

	_, err = Restore(ctx, dir, o, "nodes/n1")
	require.ErrorIs(t, err, ErrStoreExists)

	s, err = Open(dir, opts())
	require.NoError(t, err)
	require.EqualValues(t, 3, s.CommittedEpoch())
	rep, err := s.Verify()
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep)
	n := 0
	for v := range uint16(objTable.VnodeCount) {
		it, err := s.NewIter(objTable.ID, v, nil, nil)
		require.NoError(t, err)
		for ok := it.First(); ok; ok = it.Next() {
			pk, _, err := keys.DecodeUint64(it.PK())
			require.NoError(t, err)
			require.Equal(t, backedUp[pk], string(it.Row()), "pk %d", pk)
			n++
		}
		require.NoError(t, it.Error())
		require.NoError(t, it.Close())
	}
	require.Len(t, backedUp, n)

	// The restored store goes on: epoch 4 again, other rows.
	rows = backedUp
	w, err = s.NewWriter(objTable.ID, nil, nil)
	require.NoError(t, err)
	commit(4, "c")
	require.NoError(t, w.Close())
	require.NoError(t, s.db.Compact(ctx, lower, upper, true))
	require.NoError(t, s.Close())
	s, err = Open(dir, opts())
	require.NoError(t, err)
	rep, err = s.Verify()
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep)
	require.EqualValues(t, len(rows), rep.Rows)
	require.NoError(t, s.Close())

	// A backup file that does not match its index.
	bucket := testBucket(t, srv, objstoreBucketOf(t, url), "b/")
	victim := fmt.Sprintf("%snodes/n1/%d/%s", backupRoot, info.Seq, objectStoreRecordName)
	b, err := getObject(ctx, bucket, victim)
	require.NoError(t, err)
	b[0] ^= 1
	require.NoError(t, putObject(bucket, victim, b))
	_, err = Restore(ctx, t.TempDir(), o, "nodes/n1")
	require.True(t, lsmstats.IsCorruption(err), "%v", err)
	require.ErrorContains(t, err, victim)
	// A damaged CURRENT.
	cur := backupRoot + "nodes/n1/" + backupCurrent
	b, err = getObject(ctx, bucket, cur)
	require.NoError(t, err)
	b[len(b)/2] ^= 1
	require.NoError(t, putObject(bucket, cur, b))
	_, err = Restore(ctx, t.TempDir(), o, "nodes/n1")
	require.True(t, lsmstats.IsCorruption(err), "%v", err)
	require.ErrorContains(t, err, cur)
}

// objstoreBucketOf is the bucket of an s3:// URL.
func objstoreBucketOf(t *testing.T, url string) string {
	cfg, err := objstore.ParseURL(url)
	require.NoError(t, err)
	return cfg.Bucket
}

// TestBackupSweep backs a store up after every commit while compactions
// replace its SSTs: Pebble's Checkpoint keeps every SST a backup
// referenced, and the sweeps between backups remove those that only older
// backups kept. After a last sweep, every SST object of the store in the
// bucket is one its catalog or its latest backup references, and the
// latest backup restores.
func TestBackupSweep(t *testing.T) {
	srv := s3server.Shared(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	url := objURL(srv, srv.NewBucket(t), "s", "5s")
	opts := func() *Options {
		return &Options{Logger: QuietLogger(io.Discard), CommitBatchBytes: -1, ObjectStore: &objstore.StoreOptions{URL: url}}
	}
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, opts())
	require.NoError(t, err)
	require.NoError(t, s.CreateTable(objTable))
	def, err := s.Table(objTable.ID)
	require.NoError(t, err)
	w, err := s.NewWriter(objTable.ID, nil, nil)
	require.NoError(t, err)
	lower, upper := moveSpan(objTable.ID, 0, objTable.VnodeCount)
	const epochs = backupSweepEvery + backupSweepEvery/2 // one sweep between backups, and a last one
	for epoch := uint64(1); epoch <= epochs; epoch++ {
		for pk := uint64(0); pk < 400; pk++ {
			k := keys.AppendUint64(nil, pk)
			row := []byte(fmt.Sprintf("row-%d-%d", pk, epoch))
			if epoch == 1 {
				require.NoError(t, w.Insert(epoch, def.VnodeOf(k), k, row))
			} else {
				require.NoError(t, w.Update(epoch, def.VnodeOf(k), k, []byte(fmt.Sprintf("row-%d-%d", pk, epoch-1)), row))
			}
		}
		require.NoError(t, w.Seal(epoch))
		require.NoError(t, s.Commit(epoch))
		if epoch%2 == 0 {
			require.NoError(t, s.db.Compact(ctx, lower, upper, true))
		}
		_, err := s.Backup(ctx, "n")
		require.NoError(t, err)
	}
	require.NoError(t, w.Close())
	// The bucket holds the latest backup, and the one before it until the
	// next backup's uploads.
	last, err := readBackupCurrent(ctx, s.obj.storage, backupRoot+"n/")
	require.NoError(t, err)
	held, err := s.obj.storage.List(backupRoot+"n/", "")
	require.NoError(t, err)
	for _, n := range held {
		require.True(t, n == backupCurrent || strings.HasPrefix(n, fmt.Sprintf("%d/", last.seq)) || strings.HasPrefix(n, fmt.Sprintf("%d/", last.seq-1)),
			"object %s of an older backup than %d", n, last.seq-1)
	}
	m := s.Metrics()
	require.EqualValues(t, epochs, m.Backups)
	require.Positive(t, m.BackupBytes)
	require.Positive(t, m.BackupSweptObjects, "the sweeps removed the SSTs older backups kept")

	// A last sweep; then the store's SST objects are those its catalog or
	// latest backup references.
	s.backupsSinceSweep = backupSweepEvery
	s.sweepBackedUp()
	me := s.obj.rec.creator
	keep := map[uint64]bool{}
	for _, o := range s.db.ObjProvider().List() {
		if o.IsRemote() && uint64(o.Remote.CreatorID) == me {
			keep[uint64(o.Remote.CreatorFileNum)] = true
		}
	}
	backed, err := backupsOf(ctx, s.obj.storage, me)
	require.NoError(t, err)
	for _, o := range backed {
		if o.creator == me {
			keep[o.creatorNum] = true
		}
	}
	names, err := s.obj.storage.List("", "")
	require.NoError(t, err)
	ssts := 0
	for _, n := range names {
		if p, ok := objstore.ParseName(n); ok && !p.Ref && p.Creator == me {
			ssts++
			require.True(t, keep[p.FileNum], "object %s: neither the catalog nor the latest backup references it", n)
		}
	}
	t.Logf("%d backups of %d bytes; %d objects swept; %d SST objects left", m.Backups, m.BackupBytes, m.BackupSweptObjects, ssts)
	require.NoError(t, s.Close())
	require.NoError(t, os.RemoveAll(dir))
	info, err := Restore(ctx, dir, opts(), "n")
	require.NoError(t, err)
	require.EqualValues(t, epochs, info.Epoch)
	s, err = Open(dir, opts())
	require.NoError(t, err)
	rep, err := s.Verify()
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep)
	require.EqualValues(t, 400, rep.Rows)
	require.NoError(t, s.Close())
}

// failingBucket fails the uploads of objects whose names end with an
// armed suffix.
type failingBucket struct {
	*objstore.Bucket
	mu     sync.Mutex
	suffix string
	failed int
}

func (b *failingBucket) arm(suffix string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.suffix = suffix
}

func (b *failingBucket) CreateObject(name string) (io.WriteCloser, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.suffix != "" && strings.HasSuffix(name, b.suffix) {
		b.failed++
		return nil, errors.Newf("injected: upload of %s fails", name)
	}
	return b.Bucket.CreateObject(name)
}

// TestBackupFaults fails a backup's uploads in the object store: a file's,
// then CURRENT's. Each failed backup returns the error and leaves CURRENT
// naming the last backup that succeeded, which restores; the backups
// after succeed, and the bucket then holds no object of a failed one but
// those the last two backups have.
func TestBackupFaults(t *testing.T) {
	srv := s3server.Shared(t)
	bucket := testBucket(t, srv, srv.NewBucket(t), "f/")
	fb := &failingBucket{Bucket: bucket}
	opts := func() *Options {
		return &Options{Logger: QuietLogger(io.Discard), ObjectStore: &objstore.StoreOptions{Storage: fb}}
	}
	ctx := context.Background()
	s, err := Open(t.TempDir(), opts())
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	require.NoError(t, s.CreateTable(objTable))
	def, err := s.Table(objTable.ID)
	require.NoError(t, err)
	w, err := s.NewWriter(objTable.ID, nil, nil)
	require.NoError(t, err)
	defer w.Close()
	commit := func(epoch uint64) {
		for pk := uint64(0); pk < 100; pk++ {
			k := keys.AppendUint64(nil, epoch*1000+pk)
			require.NoError(t, w.Insert(epoch, def.VnodeOf(k), k, []byte("row")))
		}
		require.NoError(t, w.Seal(epoch))
		require.NoError(t, s.Commit(epoch))
	}
	restoredEpoch := func() uint64 {
		info, err := Restore(ctx, t.TempDir(), opts(), "n")
		require.NoError(t, err)
		return info.Epoch
	}
	commit(1)
	first, err := s.Backup(ctx, "n")
	require.NoError(t, err)
	for i, suffix := range []string{".log", "/" + backupCurrent} {
		commit(uint64(2 + i))
		fb.arm(suffix)
		_, err := s.Backup(ctx, "n")
		fb.arm("")
		require.ErrorContains(t, err, "injected", "a backup whose upload of *%s failed", suffix)
		require.Equal(t, first.Epoch, restoredEpoch(), "CURRENT still names the last backup that succeeded")
	}
	require.Equal(t, 2, fb.failed)
	var last BackupInfo
	for e := uint64(4); e <= 5; e++ {
		commit(e)
		last, err = s.Backup(ctx, "n")
		require.NoError(t, err)
		require.Equal(t, e, restoredEpoch())
	}
	// Left: CURRENT, the last backup's objects and the one's before.
	held, err := bucket.List(backupRoot+"n/", "")
	require.NoError(t, err)
	for _, n := range held {
		require.True(t, n == backupCurrent || strings.HasPrefix(n, fmt.Sprintf("%d/", last.Seq)) || strings.HasPrefix(n, fmt.Sprintf("%d/", last.Seq-1)),
			"object %s: neither of the last two backups (%d, %d)", n, last.Seq-1, last.Seq)
	}
	t.Logf("backups: first %d, last %d; %d objects left", first.Seq, last.Seq, len(held))
}
