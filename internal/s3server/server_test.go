package s3server

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { os.Exit(RunTests(m)) }

func put(t *testing.T, s *Server, bucket, name, body string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.Client().PutObject(ctx, bucket, name, strings.NewReader(body), int64(len(body)), minio.PutObjectOptions{})
	return err
}

func get(t *testing.T, s *Server, bucket, name string, timeout time.Duration) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	obj, err := s.Client().GetObject(ctx, bucket, name, minio.GetObjectOptions{})
	if err != nil {
		return "", err
	}
	defer obj.Close()
	b, err := io.ReadAll(obj)
	return string(b), err
}

// The server keeps its data across a crash (SIGKILL) and a start on the
// same ports, and answers nothing while stopped.
func TestStopStart(t *testing.T) {
	s := Start(t)
	require.True(t, strings.HasPrefix(s.Endpoint, "http://127.0.0.1:"), s.Endpoint)
	require.NoError(t, put(t, s, s.Bucket, "a/b", "hello"))
	pid := s.PID()
	require.NotZero(t, pid)

	s.Stop(t)
	require.Zero(t, s.PID())
	require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "the server's process outlived Stop")
	_, err := get(t, s, s.Bucket, "a/b", 2*time.Second)
	require.Error(t, err, "a stopped server answered")

	s.Start(t)
	require.NotEqual(t, pid, s.PID())
	got, err := get(t, s, s.Bucket, "a/b", 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, "hello", got)
}

// A paused server accepts connections but answers nothing; it answers again
// once resumed.
func TestPauseResume(t *testing.T) {
	s := Start(t)
	require.NoError(t, put(t, s, s.Bucket, "k", "v"))
	s.Pause(t)
	_, err := get(t, s, s.Bucket, "k", 500*time.Millisecond)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	s.Resume(t)
	got, err := get(t, s, s.Bucket, "k", 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, "v", got)
}

// The server refuses requests signed with other credentials than its own.
func TestCredentials(t *testing.T) {
	s := Shared(t)
	bucket := s.NewBucket(t)
	require.NoError(t, put(t, s, bucket, "k", "v"))
	for name, creds := range map[string]*credentials.Credentials{
		"unknown key":  credentials.NewStaticV4("AKUNKNOWN", s.SecretKey, ""),
		"wrong secret": credentials.NewStaticV4(s.AccessKey, "not-the-secret", ""),
	} {
		c, err := minio.New(strings.TrimPrefix(s.Endpoint, "http://"), &minio.Options{Creds: creds, Region: Region, MaxRetries: 1})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = c.StatObject(ctx, bucket, "k", minio.StatObjectOptions{})
		cancel()
		require.Error(t, err, name)
		require.Equal(t, 403, minio.ToErrorResponse(err).StatusCode, "%s: %v", name, err)
	}
}

// Buckets of the shared server are distinct.
func TestSharedBuckets(t *testing.T) {
	s := Shared(t)
	require.Same(t, s, Shared(t))
	b1, b2 := s.NewBucket(t), s.NewBucket(t)
	require.NotEqual(t, b1, b2)
	require.NoError(t, put(t, s, b1, "k", "one"))
	_, err := get(t, s, b2, "k", 10*time.Second)
	require.Equal(t, "NoSuchKey", minio.ToErrorResponse(err).Code, "%v", err)
	got, err := get(t, s, b1, "k", 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, "one", got)
}

// Without the binary, starting fails with a message that says how to build
// it.
func TestMissingBinary(t *testing.T) {
	t.Setenv(BinaryEnv, filepath.Join(t.TempDir(), "no-weed"))
	_, err := start()
	require.Error(t, err)
	require.Contains(t, err.Error(), "make objstore")
	require.Contains(t, err.Error(), "no-weed")
}

// BenchmarkStart measures how long a server takes from exec to answering S3
// requests, and its resident memory then and after 1,000 small objects.
func BenchmarkStart(b *testing.B) {
	var startSecs, rssStart, rssLoaded float64
	for b.Loop() {
		t0 := time.Now()
		s, err := start()
		if err != nil {
			b.Fatal(err)
		}
		startSecs += time.Since(t0).Seconds()
		rss, err := s.RSS()
		if err != nil {
			b.Fatal(err)
		}
		rssStart += float64(rss)
		ctx := context.Background()
		body := strings.Repeat("x", 4096)
		for i := range 1000 {
			if _, err := s.Client().PutObject(ctx, s.Bucket, "o/"+strings.Repeat("k", i%7)+string(rune('a'+i%26))+time.Now().String(),
				strings.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		if rss, err = s.RSS(); err != nil {
			b.Fatal(err)
		}
		rssLoaded += float64(rss)
		if err := s.close(); err != nil {
			b.Fatal(err)
		}
	}
	n := float64(b.N)
	b.ReportMetric(startSecs/n, "start-s")
	b.ReportMetric(rssStart/n/(1<<20), "rss-MiB")
	b.ReportMetric(rssLoaded/n/(1<<20), "rss-1k-objects-MiB")
}

// A data directory whose test binary is gone is removed by the next start;
// one whose test binary lives is not.
func TestStaleDirs(t *testing.T) {
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	stale, err := os.MkdirTemp("", dirPrefix)
	require.NoError(t, err)
	staleSocket := filepath.Join(t.TempDir(), "seaweedfs-master-grpc-1.sock")
	require.NoError(t, os.WriteFile(staleSocket, nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(stale, ownerFile), []byte(strconv.Itoa(dead.Process.Pid)+"\n"+staleSocket+"\n"), 0o644))
	live, err := os.MkdirTemp("", dirPrefix)
	require.NoError(t, err)
	defer os.RemoveAll(live)
	require.NoError(t, os.WriteFile(filepath.Join(live, ownerFile), []byte(strconv.Itoa(os.Getppid())), 0o644))

	s := Start(t)
	require.DirExists(t, s.Dir())
	require.NoDirExists(t, stale)
	require.NoFileExists(t, staleSocket)
	require.DirExists(t, live)
	for _, sock := range s.sockets {
		require.FileExists(t, sock, "the server's gRPC socket (weed mini names it so)")
	}
	s.Stop(t)
	for _, sock := range s.sockets {
		require.NoFileExists(t, sock, "a killed server's socket stayed")
	}
	entries, err := os.ReadDir(os.TempDir())
	require.NoError(t, err)
	for _, e := range entries {
		require.False(t, strings.HasPrefix(e.Name(), "weed-"+revision()+"."), "glog file %s in the temporary directory", e.Name())
	}
}

// Every bucket takes writes, however many the tests make: mini's own volume
// budget (free disk / 1 GiB, one volume per bucket) ran out at the 31st
// bucket on a machine with 35 GiB free. The test makes more buckets than
// the free disk's GiB count, up to 64 (each takes ~0.2 s).
func TestManyBuckets(t *testing.T) {
	s := Shared(t)
	var st syscall.Statfs_t
	require.NoError(t, syscall.Statfs(s.Dir(), &st))
	freeGiB := int(st.Bavail * uint64(st.Bsize) >> 30)
	n := min(freeGiB+4, 64)
	t.Logf("%d GiB free: %d buckets", freeGiB, n)
	for i := range n {
		b := s.NewBucket(t)
		require.NoError(t, put(t, s, b, "k", strconv.Itoa(i)), "bucket %d of %d (%s), %d GiB free", i+1, n, b, freeGiB)
	}
}
