package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lsmstats/lsmstats/internal/s3server"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/lsmstats/lsmstats/objstore"
	"github.com/stretchr/testify/require"
)

// TestObjectStoreCommands runs backfill (with a crash), stats and verify on
// a store whose SSTs are in a bucket of the shared S3 server
// (--object-store): the report names the object store, the MV matches, and
// verify finds nothing; without --object-store the store is refused; with
// an object deleted from the bucket verify names it and exits 7.
func TestObjectStoreCommands(t *testing.T) {
	srv, bucket, url := cliBucket(t, "cli")
	dir := filepath.Join(t.TempDir(), "store")
	jsonPath := filepath.Join(t.TempDir(), "run.json")
	out, errOut, code := runCmd(t, "backfill", "--workload", "mixed", "--rows", "8000", "--vnodes", "16",
		"--actors", "2", "--seed", "3", "--chunk-size", "64", "--barrier-rows", "256", "--crash-at", "3",
		"--dir", dir, "--json", jsonPath, "--bars", "off", "--object-store", url)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	var rep report
	b, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rep))
	require.True(t, rep.MVMatches)
	require.Equal(t, 1, rep.Crashes)
	require.Equal(t, "s3://"+bucket+"/cli/?endpoint="+strings.ReplaceAll(strings.ReplaceAll(srv.Endpoint, ":", "%3A"), "/", "%2F")+
		"&region=us-east-1&retry-for=10s", rep.Parameters["object_store"])
	local, err := filepath.Glob(filepath.Join(dir, "db", "*.sst"))
	require.NoError(t, err)
	require.Empty(t, local, "SSTs on local disk")

	sout, serr, code := runCmd(t, "stats", "--dir", dir, "--json", "--object-store", url)
	require.Equal(t, 0, code, serr)
	var sj statsJSON
	require.NoError(t, json.Unmarshal([]byte(sout), &sj))
	require.Equal(t, rep.CommittedEpoch, sj.CommittedEpoch)
	vout, verr, code := runCmd(t, "verify", "--dir", dir, "--object-store", url)
	require.Equal(t, 0, code, "%s\n%s", vout, verr)
	require.Contains(t, vout, ": ok")

	_, serr, code = runCmd(t, "stats", "--dir", dir)
	require.NotEqual(t, 0, code)
	require.Contains(t, serr, "keeps its SSTs in the object store s3://"+bucket+"/cli/")

	// An SST's object deleted: verify names it, exit 7.
	bk := prefixBucket(t, srv, bucket, "cli/")
	names, err := bk.List("", "")
	require.NoError(t, err)
	var victim string
	var size int64
	for _, n := range names {
		if p, ok := objstore.ParseName(n); ok && !p.Ref {
			sz, err := bk.Size(n)
			require.NoError(t, err)
			if sz > size { // the largest: rows, not the store's metadata
				victim, size = n, sz
			}
		}
	}
	require.NotEmpty(t, victim, "no SST object in %q", names)
	require.NoError(t, bk.Delete(victim))
	vout, verr, code = runCmd(t, "verify", "--dir", dir, "--object-store", url)
	require.Equal(t, exitCorrupt, code, "%s\n%s", vout, verr)
	require.Contains(t, vout+verr, victim)
}

// TestRestoreCommand restores a store backed up to the bucket into the
// directory it lost, and verifies it; then a directory that holds a store,
// a backup that does not exist, missing flags and a damaged backup, each
// with its message and exit status.
func TestRestoreCommand(t *testing.T) {
	srv, bucket, url := cliBucket(t, "r")
	dir := filepath.Join(t.TempDir(), "store")
	s, err := lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger(nil), ObjectStore: &objstore.StoreOptions{URL: url}})
	require.NoError(t, err)
	def := lsm.TableDef{ID: 1, Name: "t", VnodeCount: 8, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	w, err := s.NewWriter(def.ID, nil, nil)
	require.NoError(t, err)
	for pk := range uint64(500) {
		k := keys.AppendUint64(nil, pk)
		require.NoError(t, w.Insert(1, def.VnodeOf(k), k, []byte("row")))
	}
	require.NoError(t, w.Seal(1))
	require.NoError(t, s.Commit(1))
	require.NoError(t, w.Close())
	_, err = s.Backup(context.Background(), "n1")
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, os.RemoveAll(dir))

	out, errOut, code := runCmd(t, "restore", "--dir", dir, "--object-store", url, "--backup", "n1")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, out, "restored backup 1 of n1 into "+dir+": committed epoch 1")
	require.Contains(t, out, ": ok")
	_, errOut, code = runCmd(t, "restore", "--dir", dir, "--object-store", url, "--backup", "n1")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "holds a store")
	_, errOut, code = runCmd(t, "restore", "--dir", t.TempDir(), "--object-store", url, "--backup", "n2")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "no backup")
	_, errOut, code = runCmd(t, "restore", "--dir", t.TempDir(), "--object-store", url)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--backup are required")

	// A damaged CURRENT: exit 7, naming it.
	bk := prefixBucket(t, srv, bucket, "r/")
	cur := "lsmstats-backup/n1/CURRENT"
	r, size, err := bk.ReadObject(context.Background(), cur)
	require.NoError(t, err)
	b := make([]byte, size)
	require.NoError(t, r.ReadAt(context.Background(), b, 0))
	require.NoError(t, r.Close())
	b[size/2] ^= 1
	wc, err := bk.CreateObject(cur)
	require.NoError(t, err)
	_, err = wc.Write(b)
	require.NoError(t, err)
	require.NoError(t, wc.Close())
	_, errOut, code = runCmd(t, "restore", "--dir", t.TempDir(), "--object-store", url, "--backup", "n1")
	require.Equal(t, exitCorrupt, code, errOut)
	require.Contains(t, errOut, cur)
}

// cliBucket gives a test a bucket of the shared S3 server and the
// --object-store URL of prefix in it, and sets the server's credentials in
// the environment, where the commands read them.
func cliBucket(t *testing.T, prefix string) (srv *s3server.Server, bucket, url string) {
	srv = s3server.Shared(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	bucket = srv.NewBucket(t)
	return srv, bucket, "s3://" + bucket + "/" + prefix + "?endpoint=" + srv.Endpoint + "&retry-for=10s"
}

// prefixBucket opens prefix of srv's bucket for a test to read and damage
// the objects the commands wrote; it is closed when the test ends.
func prefixBucket(t *testing.T, srv *s3server.Server, bucket, prefix string) *objstore.Bucket {
	bk, err := objstore.New(objstore.Config{Endpoint: srv.Endpoint, Bucket: bucket, Prefix: prefix,
		AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey})
	require.NoError(t, err)
	t.Cleanup(func() { _ = bk.Close() })
	return bk
}
