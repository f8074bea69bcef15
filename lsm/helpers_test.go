package lsm

import (
	"flag"
	"os"
	"strconv"
	"testing"

	"github.com/lsmstats/lsmstats"
	"github.com/lsmstats/lsmstats/internal/livebuckets"
	"github.com/lsmstats/lsmstats/internal/s3server"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(quietFatalChildEnv) != "" {
		quietFatalChild() // logger_test.go
	}
	if dir := os.Getenv(singleDelChildEnv); dir != "" {
		singleDelChild(dir, os.Getenv(singleDelFaultEnv)) // singledel_test.go
	}
	if dir := os.Getenv(faultChildEnv); dir != "" {
		seed, _ := strconv.ParseUint(os.Getenv(crashSeedEnv), 10, 64)
		faultChild(dir, seed, os.Getenv(faultRuleEnv)) // faults_crash_test.go
		os.Exit(0)
	}
	if dir := os.Getenv(importChildEnv); dir != "" {
		testutil.ExitChild(importChild(dir)) // vnodeexport_test.go
	}
	if dir := os.Getenv(crashChildEnv); dir != "" {
		seed, _ := strconv.ParseUint(os.Getenv(crashSeedEnv), 10, 64)
		// The children run until killed, or return an error.
		if os.Getenv(gcCrashChildEnv) != "" {
			testutil.ExitChild(gcCrashChild(dir, seed))
		}
		testutil.ExitChild(crashChild(dir, seed))
	}
	// Every commit of the tests checks the buckets its log section took as
	// unchanged against those it publishes (not while benchmarking).
	flag.Parse()
	livebuckets.CheckSharedBuckets(flag.Lookup("test.bench").Value.String() == "")
	// The tests on an object store share one S3 server (internal/s3server),
	// which RunTests stops when they end.
	goleak.VerifyTestMain(s3server.TestingM(m))
}

// crashForTest abandons a store as a crash would: the staging directory and
// every buffer stay behind. Pebble is closed so that the directory can be
// reopened in this process; Close does not flush, so the checkpoints
// committed as batches since the last flush stay in the WAL alone, and the
// reopened store replays them as it would after a crash.
func crashForTest(s *Store) {
	s.iters.close()
	_ = s.tracker.Close()
	_ = s.db.Close()
}

func TestCatalogEntryRoundTrip(t *testing.T) {
	for _, d := range []TableDef{
		{ID: 1, Name: "t", PK: keys.Schema{keys.Uint64, keys.Bytes}, DistKeyColumns: 1},
		{ID: 7, Name: "backfill_state", VnodeCount: 16, PK: keys.Schema{keys.Uint64}, VnodeKeyed: true},
	} {
		require.NoError(t, d.normalize())
		got, err := decodeCatalogEntry(d.ID, encodeCatalogEntry(&d))
		require.NoError(t, err)
		require.True(t, sameDef(&d, got), "%+v vs %+v", d, *got)
		b := encodeCatalogEntry(&d)
		for i := range b {
			_, err := decodeCatalogEntry(d.ID, b[:i])
			require.ErrorIs(t, err, errCorruptMetadata, "truncated at %d", i)
			require.ErrorIs(t, err, lsmstats.ErrCorruption, "truncated at %d", i)
		}
	}
	bad := TableDef{ID: 2, PK: keys.Schema{keys.Bytes}, VnodeKeyed: true}
	require.Error(t, bad.normalize())
	d := TableDef{ID: 3, VnodeCount: 8, PK: keys.Schema{keys.Uint64}, VnodeKeyed: true}
	require.NoError(t, d.normalize())
	require.NoError(t, d.checkRow(5, keys.AppendUint64(nil, 5)))
	require.ErrorIs(t, d.checkRow(4, keys.AppendUint64(nil, 5)), ErrInvalidVnode)
	require.ErrorIs(t, d.checkRow(9, keys.AppendUint64(nil, 9)), ErrInvalidVnode)
}
