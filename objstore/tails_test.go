package objstore_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/objstore"
	"github.com/stretchr/testify/require"
)

// A TailKeeper gives out the last bytes of an object written through it
// once, without a request (single PUTs and multipart uploads alike, in
// writes of any size); the next read of the tail asks the server, and
// reads beyond the tail go to the server too.
func TestTailKeeper(t *testing.T) {
	b, srv := newBucket(t)
	seed := testutil.Seed(t, "seed", *seedFlag)
	rng := rand.New(rand.NewPCG(seed, 10))
	ctx := context.Background()
	const tail = 64 << 10
	k := objstore.NewTailKeeper(b, tail, 16<<20, func(name string) bool { return !strings.HasPrefix(name, "skip") })
	since := func(before objstore.Stats) objstore.Stats { return b.Stats().Sub(before) }
	for _, size := range []int{1, 100, tail, tail + 1, 300 << 10, int(objstore.MinPartSize) + 777} {
		name := fmt.Sprintf("o-%d", size)
		data := randomBytes(rng, size)
		require.NoError(t, writeObject(t, k, rng, name, data), "size %d", size)
		for _, n := range []int{tail, 61} {
			// Taken at the first read of the tail only.
			before := b.Stats()
			r, got, gotSize, err := k.ReadTail(ctx, name, int64(n))
			require.NoError(t, err)
			requests := since(before).Total().Requests
			require.Equal(t, int64(size), gotSize)
			require.Equal(t, data[size-min(n, size):], got, "size %d, last %d", size, n)
			if n == tail {
				require.Zero(t, requests, "size %d: the kept tail", size)
			} else {
				require.Equal(t, int64(1), requests, "size %d: a tail taken before", size)
			}
			// Beyond the tail: the server.
			p := make([]byte, min(size, 10))
			require.NoError(t, r.ReadAt(ctx, p, 0))
			require.Equal(t, data[:len(p)], p)
			require.NoError(t, r.Close())
		}
	}

	// Not kept: names keep refuses, a write that failed.
	require.NoError(t, writeObject(t, k, rng, "skip-1", []byte("abc")))
	before := b.Stats()
	_, got, _, err := k.ReadTail(ctx, "skip-1", tail)
	require.NoError(t, err)
	require.Equal(t, []byte("abc"), got)
	require.Equal(t, int64(1), since(before).Total().Requests)
	cb, err := objstore.New(config(srv, b.Config().Bucket))
	require.NoError(t, err)
	ck := objstore.NewTailKeeper(cb, tail, 1<<20, nil)
	w, err := ck.CreateObject("x")
	require.NoError(t, err)
	_, err = w.Write([]byte("lost"))
	require.NoError(t, err)
	require.NoError(t, cb.Close())
	require.ErrorIs(t, w.Close(), objstore.ErrClosed)
	n, _ := ck.Kept()
	require.Zero(t, n, "the tail of a write that failed")

	// Rewritten, deleted: the new bytes, then none.
	require.NoError(t, writeObject(t, k, rng, "w", []byte("first")))
	require.NoError(t, writeObject(t, k, rng, "w", []byte("second!")))
	_, got, size, err := k.ReadTail(ctx, "w", tail)
	require.NoError(t, err)
	require.Equal(t, []byte("second!"), got)
	require.Equal(t, int64(7), size)
	require.NoError(t, writeObject(t, k, rng, "d", []byte("gone")))
	require.NoError(t, k.Delete("d"))
	_, _, _, err = k.ReadTail(ctx, "d", tail)
	require.True(t, b.IsNotExistError(err), "%v", err)

	// Changed behind the keeper: the tail is the one written, and a read
	// beyond it refuses an object of another size.
	require.NoError(t, writeObject(t, k, rng, "c", bytes.Repeat([]byte{1}, tail+100)))
	require.NoError(t, writeObject(t, b, rng, "c", []byte("short")))
	r, got, size, err := k.ReadTail(ctx, "c", tail)
	require.NoError(t, err)
	require.Equal(t, int64(tail+100), size)
	require.Equal(t, bytes.Repeat([]byte{1}, tail), got)
	err = r.ReadAt(ctx, make([]byte, 10), 0)
	require.ErrorContains(t, err, `object "c" holds 5 bytes, not the 65636 written`)
	require.NoError(t, r.Close())

	// The bound: the oldest tails go.
	small := objstore.NewTailKeeper(b, 1000, 3000, nil)
	for i := range 5 {
		require.NoError(t, writeObject(t, small, rng, fmt.Sprintf("s-%d", i), randomBytes(rng, 5000)))
	}
	tails, kept := small.Kept()
	require.Equal(t, 3, tails)
	require.Equal(t, int64(3000), kept)
	for i, requests := range []int64{1, 1, 0, 0, 0} {
		before := b.Stats()
		_, _, _, err := small.ReadTail(ctx, fmt.Sprintf("s-%d", i), 1000)
		require.NoError(t, err)
		require.Equal(t, requests, since(before).Total().Requests, "s-%d", i)
	}
	tails, kept = small.Kept()
	require.Zero(t, tails)
	require.Zero(t, kept)
}

// NewTailReadable over a TailKeeper reads an SST's end from memory, and
// every read returns the object's bytes; writers and readers run at once.
func TestTailKeeperReadable(t *testing.T) {
	b, _ := newBucket(t)
	seed := testutil.Seed(t, "seed", *seedFlag)
	ctx := context.Background()
	const tail, window = 16 << 10, 64 << 10
	k := objstore.NewTailKeeper(b, tail, 1<<20, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			data := randomBytes(rng, 1+rng.IntN(200<<10))
			name := fmt.Sprintf("g-%d", g)
			if err := writeObject(t, k, rng, name, data); err != nil {
				errs <- err
				return
			}
			r, err := objstore.NewTailReadable(ctx, k, name, tail, window)
			if err != nil {
				errs <- err
				return
			}
			defer r.Close()
			for range 20 {
				off := len(data) - 1 - rng.IntN(min(len(data), 3*tail))
				if rng.IntN(3) == 0 {
					off = rng.IntN(len(data))
				}
				p := make([]byte, 1+rng.IntN(len(data)-off))
				if err := r.ReadAt(ctx, p, int64(off)); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(data[off:off+len(p)], p) {
					errs <- fmt.Errorf("%s: [%d, %d) differs", name, off, off+len(p))
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
}
