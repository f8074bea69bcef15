package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lsmstats/lsmstats/internal/s3server"
	"github.com/lsmstats/lsmstats/objstore"
	"github.com/stretchr/testify/require"
)

// TestObjectStoreCommands runs backfill (with a crash), stats and verify on
// a store whose SSTs are in a bucket of the shared S3 server
// (--object-store): the report names the object store, the MV matches, and
// verify finds nothing; without --object-store the store is refused; with
// an object deleted from the bucket verify names it and exits 7.
func TestObjectStoreCommands(t *testing.T) {
	srv := s3server.Shared(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	bucket := srv.NewBucket(t)
	url := "s3://" + bucket + "/cli?endpoint=" + srv.Endpoint + "&retry-for=10s"
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
	bk, err := objstore.New(objstore.Config{Endpoint: srv.Endpoint, Bucket: bucket, Prefix: "cli/",
		AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey})
	require.NoError(t, err)
	defer bk.Close()
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
