package objstore_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/objstore"
	"github.com/stretchr/testify/require"
)

// ReadTail returns an object's last bytes, and its size, from one GET.
func TestReadTail(t *testing.T) {
	b, srv := newBucket(t)
	rng := rand.New(rand.NewPCG(7, 8))
	ctx := context.Background()
	for _, size := range []int{1, 1000, 300 << 10} {
		name := fmt.Sprintf("t-%d", size)
		data := randomBytes(rng, size)
		require.NoError(t, writeObject(t, b, rng, name, data))
		for _, n := range []int{1, 61, 4096, size - 1, size, size + 10, 1 << 20} {
			if n <= 0 {
				continue
			}
			before := b.Stats()
			r, tail, gotSize, err := b.ReadTail(ctx, name, int64(n))
			require.NoError(t, err, "size %d, last %d", size, n)
			d := b.Stats().Sub(before)
			want := data[size-min(n, size):]
			require.Equal(t, int64(size), gotSize)
			require.True(t, bytes.Equal(want, tail), "size %d, last %d: the bytes differ", size, n)
			require.Equal(t, int64(1), d.Total().Requests, "size %d, last %d: one request", size, n)
			require.Equal(t, int64(1), d.Of(objstore.KindGet).Requests)
			require.Equal(t, int64(len(want)), d.Of(objstore.KindGet).Bytes)
			// The reader reads the rest, and knows the size.
			p := make([]byte, min(size, 10))
			require.NoError(t, r.ReadAt(ctx, p, 0))
			require.Equal(t, data[:len(p)], p)
			require.ErrorContains(t, r.ReadAt(ctx, make([]byte, 1), int64(size)), "are not in the object's")
			require.NoError(t, r.Close())
		}
	}

	_, _, _, err := b.ReadTail(ctx, "nope", 100)
	require.True(t, b.IsNotExistError(err), "%v", err)
	require.ErrorIs(t, err, objstore.ErrNotExist)
	require.ErrorContains(t, err, `"nope"`)
	require.ErrorContains(t, err, b.Config().Bucket)
	require.ErrorContains(t, err, srv.Endpoint)
	_, _, _, err = b.ReadTail(ctx, "t-1", 0)
	require.ErrorContains(t, err, "not a positive length")
	require.NoError(t, writeObject(t, b, rng, "empty", nil))
	_, _, _, err = b.ReadTail(ctx, "empty", 10)
	require.ErrorContains(t, err, "InvalidRange")
	require.ErrorContains(t, err, `"empty"`)
	_, _, _, err = b.ReadTail(ctx, "", 10)
	require.ErrorContains(t, err, "empty object name")
}

// plainStorage hides a Bucket's ReadTail: NewTailReadable's fallback.
type plainStorage struct{ remote.Storage }

// A tail Readable serves the reads of an SST reader from the tail it read
// at once; a read below it, up into it, costs one GET of the bytes missing;
// any read returns the object's bytes, on a Bucket (no HEAD) and on another
// Storage (ReadObject's HEAD, then the tail).
func TestTailReadable(t *testing.T) {
	b, _ := newBucket(t)
	seed := testutil.Seed(t, "seed", *seedFlag)
	rng := rand.New(rand.NewPCG(seed, 9))
	ctx := context.Background()
	const size, tail, window = 600 << 10, 64 << 10, 128 << 10
	data := randomBytes(rng, size)
	require.NoError(t, writeObject(t, b, rng, "sst", data))
	for _, s := range []struct {
		name    string
		storage remote.Storage
		heads   int64
	}{{"bucket", b, 0}, {"other storage", plainStorage{b}, 1}} {
		before := b.Stats()
		since := func() objstore.Stats { return b.Stats().Sub(before) }
		r, err := objstore.NewTailReadable(ctx, s.storage, "sst", tail, window)
		require.NoError(t, err, s.name)
		require.Equal(t, int64(size), r.Size())
		require.Equal(t, s.heads, since().Of(objstore.KindHead).Requests, s.name)
		require.Equal(t, int64(1), since().Of(objstore.KindGet).Requests, s.name)
		require.Equal(t, int64(tail), since().Of(objstore.KindGet).Bytes, s.name)
		read := func(off, n int) {
			t.Helper()
			p := make([]byte, n)
			require.NoError(t, r.ReadAt(ctx, p, int64(off)), "%s: [%d, %d)", s.name, off, off+n)
			require.True(t, bytes.Equal(data[off:off+n], p), "%s: [%d, %d) differs", s.name, off, off+n)
		}
		// A footer, a metaindex, properties: within the tail.
		read(size-61, 61)
		read(size-200, 139)
		read(size-tail, 3000)
		require.Equal(t, int64(1), since().Of(objstore.KindGet).Requests, s.name)
		// Properties longer than the tail: one GET of the bytes missing.
		low := size - tail - 40000
		read(low, 45000)
		require.Equal(t, int64(2), since().Of(objstore.KindGet).Requests, s.name)
		require.Equal(t, int64(tail+40000), since().Of(objstore.KindGet).Bytes, s.name)
		read(low, size-low)
		require.Equal(t, int64(2), since().Of(objstore.KindGet).Requests, "%s: the tail and the bytes below it are held", s.name)
		// Far below: a window, as NewReadable's.
		read(0, 100)
		read(window-100, 100)
		require.Equal(t, int64(3), since().Of(objstore.KindGet).Requests, s.name)
		// Any read returns the object's bytes.
		for range 30 {
			off := rng.IntN(size)
			read(off, 1+rng.IntN(min(size-off, 200<<10)))
		}
		require.ErrorContains(t, r.ReadAt(ctx, make([]byte, 2), size-1), "are not in its")
		require.NoError(t, r.Close())
		require.ErrorContains(t, r.ReadAt(ctx, make([]byte, 1), 0), "after Close")
	}

	// A tail longer than the object holds all of it.
	small := data[:500]
	require.NoError(t, writeObject(t, b, rng, "small", small))
	r, err := objstore.NewTailReadable(ctx, b, "small", tail, window)
	require.NoError(t, err)
	before := b.Stats()
	p := make([]byte, 500)
	require.NoError(t, r.ReadAt(ctx, p, 0))
	require.Equal(t, small, p)
	require.Zero(t, b.Stats().Sub(before).Total().Requests)
	require.NoError(t, r.Close())

	for _, s := range []remote.Storage{b, plainStorage{b}} {
		_, err = objstore.NewTailReadable(ctx, s, "nope", tail, window)
		require.True(t, b.IsNotExistError(err), "%v", err)
		require.ErrorContains(t, err, `"nope"`)
	}
}
