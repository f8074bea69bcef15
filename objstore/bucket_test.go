package objstore_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/objstore"
	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"
)

// Objects of every size class go up and come back byte for byte: empty, a
// few bytes, within a part (one PUT), exactly a part (one PUT), and over
// one or several parts (a multipart upload).
func TestRoundTrip(t *testing.T) {
	b, srv := newBucket(t)
	seed := testutil.Seed(t, "seed", *seedFlag)
	rng := rand.New(rand.NewPCG(seed, 0))
	part := int(objstore.MinPartSize)
	for _, tc := range []struct {
		size     int
		parts    int64 // 0: one PUT
		partsMax int64
	}{
		{0, 0, 0}, {1, 0, 0}, {4093, 0, 0}, {64 << 10, 0, 0},
		{part - 1, 0, 0}, {part, 0, 0},
		{part + 1, 2, 2}, {2*part + 12345, 3, 3},
	} {
		t.Run(fmt.Sprint(tc.size), func(t *testing.T) {
			name := fmt.Sprintf("obj-%d", tc.size)
			data := randomBytes(rng, tc.size)
			before := b.Stats()
			require.NoError(t, writeObject(t, b, rng, name, data))
			d := b.Stats().Sub(before)
			if tc.parts == 0 {
				require.Equal(t, int64(1), d.Of(objstore.KindPut).Requests)
				require.Zero(t, d.Of(objstore.KindCreateMultipart).Requests)
				require.Equal(t, int64(tc.size), d.Of(objstore.KindPut).Bytes)
			} else {
				require.Zero(t, d.Of(objstore.KindPut).Requests)
				require.Equal(t, int64(1), d.Of(objstore.KindCreateMultipart).Requests)
				require.Equal(t, tc.parts, d.Of(objstore.KindUploadPart).Requests)
				require.Equal(t, int64(1), d.Of(objstore.KindCompleteMultipart).Requests)
				require.Equal(t, int64(tc.size), d.Of(objstore.KindUploadPart).Bytes)
			}
			require.Zero(t, d.Total().Retries)
			require.Zero(t, d.Total().Errors)

			size, err := b.Size(name)
			require.NoError(t, err)
			require.Equal(t, int64(tc.size), size)
			got, err := readObject(t, b, name)
			require.NoError(t, err)
			require.True(t, bytes.Equal(data, got), "object %s read back differs", name)

			// What the server holds, asked without this package.
			info, err := srv.Client().StatObject(context.Background(), b.Config().Bucket, name, minio.StatObjectOptions{})
			require.NoError(t, err)
			require.Equal(t, int64(tc.size), info.Size)
		})
	}
}

// Writing an object again replaces it, whatever the sizes.
func TestOverwrite(t *testing.T) {
	b, _ := newBucket(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{int(objstore.MinPartSize) + 100, 10, 0, 3000} {
		data := randomBytes(rng, size)
		require.NoError(t, writeObject(t, b, rng, "x", data))
		got, err := readObject(t, b, "x")
		require.NoError(t, err)
		require.True(t, bytes.Equal(data, got), "size %d", size)
	}
}

// Ranged reads at random offsets and lengths return the bytes written
// there; reads past the end are refused without a request.
func TestRangedReads(t *testing.T) {
	b, _ := newBucket(t)
	seed := testutil.Seed(t, "seed", *seedFlag)
	rng := rand.New(rand.NewPCG(seed, 1))
	ctx := context.Background()
	for _, size := range []int{1, 1000, 300 << 10, int(objstore.MinPartSize) + 777} {
		name := fmt.Sprintf("r-%d", size)
		data := randomBytes(rng, size)
		require.NoError(t, writeObject(t, b, rng, name, data))
		r, gotSize, err := b.ReadObject(ctx, name)
		require.NoError(t, err)
		require.Equal(t, int64(size), gotSize)
		for range 40 {
			off := rng.IntN(size)
			n := rng.IntN(size-off) + 1
			if rng.IntN(4) == 0 {
				n = min(size-off, 1+rng.IntN(64)) // small reads, as of an SST footer
			}
			p := make([]byte, n)
			require.NoError(t, r.ReadAt(ctx, p, int64(off)), "size %d [%d, %d)", size, off, off+n)
			require.True(t, bytes.Equal(data[off:off+n], p), "size %d [%d, %d) differs", size, off, off+n)
		}
		// Concurrent reads of one reader.
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lrng := rand.New(rand.NewPCG(seed, uint64(g)+100))
				for range 10 {
					off := lrng.IntN(size)
					n := lrng.IntN(size-off) + 1
					p := make([]byte, n)
					if err := r.ReadAt(ctx, p, int64(off)); err != nil {
						errs <- err
						return
					}
					if !bytes.Equal(data[off:off+n], p) {
						errs <- fmt.Errorf("size %d [%d, %d) differs", size, off, off+n)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}

		before := b.Stats()
		require.NoError(t, r.ReadAt(ctx, nil, int64(size)), "an empty read at the end")
		err = r.ReadAt(ctx, make([]byte, 2), int64(size-1))
		require.ErrorContains(t, err, fmt.Sprintf("bytes [%d, %d) are not in the object's %d bytes", size-1, size+1, size))
		require.ErrorContains(t, err, name)
		require.Error(t, r.ReadAt(ctx, make([]byte, 1), -1))
		require.Zero(t, b.Stats().Sub(before).Total().Requests, "a refused read sent a request")
		require.NoError(t, r.Close())
	}
}

// List, Size, Delete and the errors for objects that do not exist.
func TestListSizeDelete(t *testing.T) {
	b, srv := newBucket(t)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, name := range []string{"a", "b/4", "b/5", "b/6", "c/d/e"} {
		require.NoError(t, writeObject(t, b, rng, name, []byte(name)))
	}
	list := func(prefix, delim string) []string {
		names, err := b.List(prefix, delim)
		require.NoError(t, err)
		return names
	}
	require.Equal(t, []string{"a", "b/4", "b/5", "b/6", "c/d/e"}, list("", ""))
	require.Equal(t, []string{"a", "b", "c"}, list("", "/"))
	require.Equal(t, []string{"4", "5", "6"}, list("b/", "/"))
	require.Equal(t, []string{"/4", "/5", "/6"}, list("b", ""))
	require.Equal(t, []string{"d"}, list("c/", "/"))
	require.Empty(t, list("zzz", ""))
	_, err := b.List("", ",")
	require.ErrorContains(t, err, `delimiter ","`)

	size, err := b.Size("b/5")
	require.NoError(t, err)
	require.Equal(t, int64(3), size)

	require.NoError(t, b.Delete("b/5"))
	require.Equal(t, []string{"4", "6"}, list("b/", ""))
	require.NoError(t, b.Delete("b/5"), "deleting what is not there")

	bucket := b.Config().Bucket
	for what, err := range map[string]error{
		"size": func() error { _, err := b.Size("b/5"); return err }(),
		"read": func() error { _, _, err := b.ReadObject(context.Background(), "nope"); return err }(),
	} {
		require.Error(t, err, what)
		require.True(t, b.IsNotExistError(err), "%s: %v", what, err)
		require.ErrorIs(t, err, objstore.ErrNotExist)
		require.ErrorContains(t, err, bucket, what)
		require.ErrorContains(t, err, srv.Endpoint, what)
		require.Contains(t, err.Error(), "no such object", what)
	}
	_, err = b.Size("b/5")
	wrapped := errors.Wrap(err, "pebble: opening")
	require.True(t, b.IsNotExistError(wrapped), "wrapped: %v", wrapped)
	require.True(t, errors.Is(wrapped, objstore.ErrNotExist))
	require.False(t, errors.Is(wrapped, objstore.ErrUnreachable))
	require.False(t, b.IsNotExistError(errors.New("other")))
	require.False(t, b.IsNotExistError(nil))

	// An object deleted between ReadObject and ReadAt.
	r, _, err := b.ReadObject(context.Background(), "a")
	require.NoError(t, err)
	require.NoError(t, b.Delete("a"))
	err = r.ReadAt(context.Background(), make([]byte, 1), 0)
	require.True(t, b.IsNotExistError(err), "%v", err)
	require.ErrorContains(t, err, `"a"`)

	_, err = b.CreateObject("")
	require.ErrorContains(t, err, "empty object name")
	_, err = b.Size(strings.Repeat("x", 1100))
	require.ErrorContains(t, err, "longer than S3's 1024")
}

// Prefixes keep the objects of Buckets that share an S3 bucket apart.
func TestPrefixes(t *testing.T) {
	b, srv := newBucket(t)
	rng := rand.New(rand.NewPCG(5, 6))
	other := b.Config()
	other.Prefix = "store-2/"
	b2, err := objstore.New(other)
	require.NoError(t, err)
	defer b2.Close()
	first := b.Config()
	first.Prefix = "store-1/"
	b1, err := objstore.New(first)
	require.NoError(t, err)
	defer b1.Close()

	require.NoError(t, writeObject(t, b1, rng, "x", []byte("one")))
	require.NoError(t, writeObject(t, b2, rng, "x", []byte("two")))
	require.NoError(t, writeObject(t, b2, rng, "y", []byte("two")))
	names, err := b1.List("", "")
	require.NoError(t, err)
	require.Equal(t, []string{"x"}, names)
	names, err = b2.List("", "")
	require.NoError(t, err)
	require.Equal(t, []string{"x", "y"}, names)
	got, err := readObject(t, b1, "x")
	require.NoError(t, err)
	require.Equal(t, "one", string(got))
	all, err := b.List("", "/")
	require.NoError(t, err)
	require.Equal(t, []string{"store-1", "store-2"}, all)

	// The keys in the bucket, as another client sees them.
	var keys []string
	for o := range srv.Client().ListObjectsIter(context.Background(), b.Config().Bucket, minio.ListObjectsOptions{Recursive: true}) {
		require.NoError(t, o.Err)
		keys = append(keys, o.Key)
	}
	sort.Strings(keys)
	require.Equal(t, []string{"store-1/x", "store-2/x", "store-2/y"}, keys)
}

// Listings longer than a page come in pages, one request each, with and
// without a delimiter.
func TestListPages(t *testing.T) {
	b, _ := newBucket(t)
	const n = 1050
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			w, err := b.CreateObject(fmt.Sprintf("p/%04d/x", i))
			if err == nil {
				_, err = w.Write([]byte{byte(i)})
				err = errors.CombineErrors(err, w.Close())
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, delim := range []string{"", "/"} {
		before := b.Stats()
		names, err := b.List("p/", delim)
		require.NoError(t, err)
		require.Len(t, names, n)
		for i, name := range names {
			want := fmt.Sprintf("%04d/x", i)
			if delim == "/" {
				want = fmt.Sprintf("%04d", i)
			}
			require.Equal(t, want, name)
		}
		require.Equal(t, int64(2), b.Stats().Sub(before).Of(objstore.KindList).Requests, "delimiter %q", delim)
	}
}

// Writers and readers of many objects at once (run under -race by make
// race).
func TestConcurrent(t *testing.T) {
	b, _ := newBucket(t, func(c *objstore.Config) { c.UploadConcurrency = 3 })
	seed := testutil.Seed(t, "seed", *seedFlag)
	const workers, perWorker = 6, 4
	sizes := []int{0, 700, 200 << 10, int(objstore.MinPartSize)*2 + 1}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			for i := range perWorker {
				name := fmt.Sprintf("w%d/%d", g, i)
				data := randomBytes(rng, sizes[(g+i)%len(sizes)])
				if err := writeObject(t, b, rng, name, data); err != nil {
					errs <- err
					return
				}
				got, err := readObject(t, b, name)
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, data) {
					errs <- fmt.Errorf("%s read back differs", name)
					return
				}
				if _, err := b.List(fmt.Sprintf("w%d/", (g+1)%workers), ""); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	names, err := b.List("", "")
	require.NoError(t, err)
	require.Len(t, names, workers*perWorker)
}

// A writer after an error, a second Close, a closed Bucket.
func TestWriterAndBucketLifecycle(t *testing.T) {
	b, _ := newBucket(t)
	w, err := b.CreateObject("o")
	require.NoError(t, err)
	_, err = w.Write([]byte("abc"))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.NoError(t, w.Close(), "a second Close returns the first's result")
	_, err = w.Write([]byte("x"))
	require.ErrorContains(t, err, "after Close")

	cfg := b.Config()
	b2, err := objstore.New(cfg)
	require.NoError(t, err)
	w2, err := b2.CreateObject("late")
	require.NoError(t, err)
	require.NoError(t, b2.Close())
	require.NoError(t, b2.Close())
	for what, err := range map[string]error{
		"close of a writer": w2.Close(),
		"size":              func() error { _, err := b2.Size("o"); return err }(),
		"list":              func() error { _, err := b2.List("", ""); return err }(),
		"create":            func() error { _, err := b2.CreateObject("x"); return err }(),
		"check":             b2.Check(context.Background()),
	} {
		require.ErrorIs(t, err, objstore.ErrClosed, what)
	}
}
