package genjob_test

import (
	"io"
	"testing"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/bench/genjob"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/internal/s3server"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/lsmstats/lsmstats/objstore"
	"github.com/stretchr/testify/require"
)

// TestResumeOnObjectStore resumes a generator from its upstream table in a
// store on the object store (a SeaweedFS bucket) and checks that the
// resumed model is the one that wrote the table, and that the resume read
// the table as one sequential scan: Pebble's read-ahead grown to its
// largest, a few GETs per SST, not GETs per vnode. An iterator per vnode
// starts each SST's read-ahead over at its smallest, at every vnode: the
// restart of make demo-s3 took twice as many GETs so.
func TestResumeOnObjectStore(t *testing.T) {
	srv := s3server.Shared(t)
	bucket, err := objstore.New(objstore.Config{Endpoint: srv.Endpoint, Bucket: srv.NewBucket(t), Prefix: "resume/",
		AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey})
	require.NoError(t, err)
	defer func() { require.NoError(t, bucket.Close()) }()
	p, err := workload.Preset("mixed", 50000, 256, 7)
	require.NoError(t, err)
	opts := &lsm.Options{Logger: lsm.QuietLogger(io.Discard), ObjectStore: &objstore.StoreOptions{Storage: bucket}}
	dir := t.TempDir()

	// The load steps, all in one epoch, ingested into SSTs.
	g, err := workload.New(p)
	require.NoError(t, err)
	p = g.Params()
	loadSteps := uint64((p.Rows + p.BatchRows - 1) / p.BatchRows)
	def := p.TableDef(1)
	s, err := lsm.Open(dir, opts)
	require.NoError(t, err)
	require.NoError(t, s.CreateTable(def))
	w, err := s.NewWriter(def.ID, nil, nil)
	require.NoError(t, err)
	for g.Step() < loadSteps {
		for _, op := range g.Next() {
			require.Equal(t, workload.Insert, op.Kind, "step %d", g.Step())
			require.NoError(t, w.Insert(1, op.Vnode, op.PK, op.NewRow))
		}
	}
	require.NoError(t, w.Seal(1))
	require.NoError(t, s.Commit(1))
	require.NoError(t, w.Close())
	require.NoError(t, s.Close())

	// Reopened, with nothing of the table in its caches.
	s, err = lsm.Open(dir, opts)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	resumed, err := workload.New(p)
	require.NoError(t, err)
	before := bucket.Stats()
	require.NoError(t, genjob.Source{G: resumed}.Resume(backfill.Position{Step: loadSteps, Epoch: 1, Store: s, Upstream: def}))
	gets := bucket.Stats().Sub(before).Of(objstore.KindGet)
	require.Equal(t, g.LiveRows(), resumed.LiveRows())
	for v := range p.VnodeCount {
		wantRows, wantBytes := g.Live(uint16(v))
		rows, bytes := resumed.Live(uint16(v))
		require.Equal(t, [2]int64{wantRows, wantBytes}, [2]int64{rows, bytes}, "vnode %d", v)
	}
	t.Logf("resume of %d rows in %d vnodes: %d GETs, %d bytes", p.Rows, p.VnodeCount, gets.Requests, gets.Bytes)
	require.Less(t, gets.Requests, int64(p.VnodeCount/4), "the resume read the table in GETs per vnode, not as one scan")
}
