package backfill_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/bench/genjob"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/internal/s3server"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/lsmstats/lsmstats/objstore"
	"github.com/stretchr/testify/require"
)

// TestObjectStoreServerDown runs a backfill on a store whose SSTs are in a
// bucket of an S3 server of the test's own, and takes the server away in
// the middle of the job twice: frozen (SIGSTOP) after the job's second
// checkpoint, then killed (SIGKILL) after a later one. Each time the job
// fails within the object store's retry bound, with an error naming the
// endpoint; once the server is back, the job opens again, resumes from its
// last checkpoint, and in the end the MV equals the upstream table and
// Verify finds nothing.
func TestObjectStoreServerDown(t *testing.T) {
	seed := testSeed(t)
	start := time.Now()
	srv := s3server.Start(t)
	t.Logf("server started in %s", time.Since(start).Round(time.Millisecond))
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	// Requests give up after 2s of retries: the job fails soon after the
	// server goes away.
	url := "s3://" + srv.Bucket + "/job?endpoint=" + srv.Endpoint + "&retry-for=2s"
	dir := t.TempDir()
	p, err := workload.Preset("mixed", 4000, 16, seed)
	require.NoError(t, err)
	p.BatchRows = 1000
	p.DuringSteps = 10

	// run opens the store and the job and runs the job; after the job's
	// checkpoint number at (if not 0) it calls fault, from the job's
	// goroutine, and the job goes on. It returns the job's error.
	run := func(at int, fault func()) (*lsm.Store, *backfill.Job, error) {
		// Every checkpoint is ingested (none goes through the memtable
		// and the WAL only), so each one needs the server.
		s, err := lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger(nil), MemoryWatermark: 256 << 10,
			CommitBatchBytes: -1, ObjectStore: &objstore.StoreOptions{URL: url}})
		require.NoError(t, err)
		g, err := workload.New(p)
		require.NoError(t, err)
		n := 0
		j, err := backfill.OpenJob(backfill.JobConfig{
			Store: s, Upstream: p.TableDef(1), MV: 2, State: 3, Meta: 4,
			Actors: 2, ChunkSize: 16, BarrierRows: 100, CheckpointEvery: 2,
			Source: genjob.Source{G: g},
			OnCheckpoint: func(backfill.Record) {
				if n++; n == at {
					fault()
				}
			},
		})
		require.NoError(t, err)
		start := time.Now()
		_, err = j.Run(context.Background())
		t.Logf("run to checkpoint %d: %d checkpoints in %s", at, n, time.Since(start).Round(time.Millisecond))
		return s, j, err
	}
	host := strings.TrimPrefix(srv.Endpoint, "http://")
	for _, f := range []struct {
		name        string
		at          int
		down, again func(testing.TB)
	}{
		{"paused", 2, srv.Pause, srv.Resume},
		{"killed", 3, srv.Stop, srv.Start},
	} {
		s, j, err := run(f.at, func() { f.down(t) })
		require.Error(t, err, "the job ran on with the server %s", f.name)
		require.Contains(t, err.Error(), host, "the error does not name the endpoint")
		t.Logf("server %s: %v", f.name, err)
		start := time.Now()
		f.again(t)
		back := time.Since(start)
		// Close may report the failure again; the store reopens all the same.
		_ = j.Close()
		_ = s.Close()
		t.Logf("server back in %s, closed in %s", back.Round(time.Millisecond), (time.Since(start) - back).Round(time.Millisecond))
	}
	s, j, err := run(0, nil)
	require.NoError(t, err)
	require.True(t, j.Finished())
	require.NoError(t, j.Compare())
	rep, err := s.Verify()
	require.NoError(t, err)
	require.True(t, rep.OK(), "verify: %+v", rep)
	local, err := filepath.Glob(filepath.Join(dir, "db", "*.sst"))
	require.NoError(t, err)
	require.Empty(t, local, "SSTs on local disk")
	require.NoError(t, j.Close())
	require.NoError(t, s.Close())
}
