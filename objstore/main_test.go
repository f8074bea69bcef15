package objstore_test

import (
	"context"
	"flag"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/lsmstats/lsmstats/internal/s3server"
	"github.com/lsmstats/lsmstats/objstore"
	"github.com/stretchr/testify/require"
)

var seedFlag = flag.Uint64("seed", 1, "seed of the randomized tests (0: from the clock)")

func TestMain(m *testing.M) { os.Exit(s3server.RunTests(m)) }

// config returns a Config for bucket on srv with the server's credentials,
// parts of the smallest size S3 allows, and a retry policy quick enough for
// tests.
func config(srv *s3server.Server, bucket string) objstore.Config {
	return objstore.Config{
		Endpoint:        srv.Endpoint,
		Bucket:          bucket,
		AccessKeyID:     srv.AccessKey,
		SecretAccessKey: srv.SecretKey,
		PartSize:        objstore.MinPartSize,
		Retry: objstore.RetryPolicy{
			MaxAttempts:    8,
			InitialBackoff: 20 * time.Millisecond,
			MaxBackoff:     500 * time.Millisecond,
			AttemptTimeout: 20 * time.Second,
			MaxElapsed:     60 * time.Second,
		},
	}
}

// newBucket returns a Bucket in a bucket of its own on the shared server,
// closed at the end of the test.
func newBucket(t testing.TB, edit ...func(*objstore.Config)) (*objstore.Bucket, *s3server.Server) {
	t.Helper()
	srv := s3server.Shared(t)
	cfg := config(srv, srv.NewBucket(t))
	for _, e := range edit {
		e(&cfg)
	}
	b, err := objstore.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	return b, srv
}

// randomBytes returns n bytes drawn from rng.
func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := rng.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// writeObject writes data as object name in writes of random sizes (up to
// 256 KiB) and closes the writer.
func writeObject(t testing.TB, b remote.Storage, rng *rand.Rand, name string, data []byte) error {
	t.Helper()
	w, err := b.CreateObject(name)
	if err != nil {
		return err
	}
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 1+rng.IntN(256<<10))
		if _, err := w.Write(rest[:n]); err != nil {
			_ = w.Close()
			return err
		}
		rest = rest[n:]
	}
	return w.Close()
}

// readObject reads the whole object name.
func readObject(t testing.TB, b *objstore.Bucket, name string) ([]byte, error) {
	t.Helper()
	r, size, err := b.ReadObject(context.Background(), name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	buf := make([]byte, size)
	if err := r.ReadAt(context.Background(), buf, 0); err != nil {
		return nil, err
	}
	return buf, nil
}
