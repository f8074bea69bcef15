package objstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// BenchmarkBucket compares a Bucket on the loopback SeaweedFS server with
// Pebble's own remote.Storage on the local disk (remote.NewLocalFS, which
// fsyncs each object as a Bucket's server does), in the same run: objects
// of 64 KiB, 1 MiB and 8 MiB (two parts of 5 MiB: a multipart upload)
// uploaded, read whole, and read in ranges of 64 KiB at random offsets,
// one at a time and eight at once.
// Each iteration does the operation on both; it reports the throughput of
// each (local-MiB/s, s3-MiB/s), the object store's share of the local
// disk's (s3/local), and the object store's requests per MiB moved
// (s3-req/MiB).
func BenchmarkBucket(b *testing.B) {
	bucket, _ := newBucket(b)
	local := remote.NewLocalFS(b.TempDir(), vfs.Default)
	rng := rand.New(rand.NewPCG(1, 1))
	ctx := context.Background()
	for _, size := range []int{64 << 10, 1 << 20, 8 << 20} {
		data := randomBytes(rng, size)
		sizeName := fmt.Sprintf("%dKiB", size>>10)
		upload := func(s remote.Storage, i int) error {
			w, err := s.CreateObject(fmt.Sprintf("up-%s-%d", sizeName, i%4))
			if err != nil {
				return err
			}
			for rest := data; len(rest) > 0; {
				n := min(len(rest), 64<<10) // Pebble writes SSTs in pieces
				if _, err := w.Write(rest[:n]); err != nil {
					w.Close()
					return err
				}
				rest = rest[n:]
			}
			return w.Close()
		}
		name := "read-" + sizeName
		for _, s := range []remote.Storage{local, bucket} {
			w, err := s.CreateObject(name)
			if err == nil {
				_, err = w.Write(data)
				if cerr := w.Close(); err == nil {
					err = cerr
				}
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		readers := map[remote.Storage]remote.ObjectReader{}
		for _, s := range []remote.Storage{local, bucket} {
			r, _, err := s.ReadObject(ctx, name)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			readers[s] = r
		}
		whole := make([]byte, size)
		readWhole := func(s remote.Storage, _ int) error { return readers[s].ReadAt(ctx, whole, 0) }
		chunk := make([]byte, min(size, 64<<10))
		readChunk := func(s remote.Storage, i int) error {
			off := rand.New(rand.NewPCG(uint64(i), 3)).IntN(size - len(chunk) + 1)
			return readers[s].ReadAt(ctx, chunk, int64(off))
		}

		// Eight ranged reads at once, as from Pebble's concurrent
		// iterators and compactions.
		chunks := make([][]byte, 8)
		for j := range chunks {
			chunks[j] = make([]byte, len(chunk))
		}
		readChunks := func(s remote.Storage, i int) error {
			errs := make(chan error, len(chunks))
			for j, c := range chunks {
				go func() {
					off := rand.New(rand.NewPCG(uint64(i), uint64(j))).IntN(size - len(c) + 1)
					errs <- readers[s].ReadAt(ctx, c, int64(off))
				}()
			}
			var first error
			for range chunks {
				if err := <-errs; err != nil && first == nil {
					first = err
				}
			}
			return first
		}

		for _, op := range []struct {
			name  string
			bytes int
			do    func(remote.Storage, int) error
		}{
			{"upload", size, upload},
			{"read-whole", size, readWhole},
			{"read-64KiB", len(chunk), readChunk},
			{"read-64KiB-x8", 8 * len(chunk), readChunks},
		} {
			b.Run(sizeName+"/"+op.name, func(b *testing.B) {
				var tLocal, tS3 time.Duration
				before := bucket.Stats()
				i := 0
				for b.Loop() {
					t0 := time.Now()
					if err := op.do(local, i); err != nil {
						b.Fatal(err)
					}
					t1 := time.Now()
					if err := op.do(bucket, i); err != nil {
						b.Fatal(err)
					}
					tLocal += t1.Sub(t0)
					tS3 += time.Since(t1)
					i++
				}
				d := bucket.Stats().Sub(before)
				mib := float64(i) * float64(op.bytes) / (1 << 20)
				b.SetBytes(int64(2 * op.bytes))
				b.ReportMetric(mib/tLocal.Seconds(), "local-MiB/s")
				b.ReportMetric(mib/tS3.Seconds(), "s3-MiB/s")
				b.ReportMetric(tLocal.Seconds()/tS3.Seconds(), "s3/local")
				b.ReportMetric(float64(d.Total().Requests)/mib, "s3-req/MiB")
				if d.Total().Retries > 0 || d.Total().Errors > 0 {
					b.Logf("%d retries, %d errors", d.Total().Retries, d.Total().Errors)
				}
			})
		}
	}
}
