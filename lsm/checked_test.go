package lsm

import (
	"testing"

	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// TestCheckedWithoutRead: a checked writer's op on a pk that the committed
// live statistics prove not live (above its vnode's largest pk, between
// the rows of a small vnode's buckets) is checked without a read, and
// every inconsistent op is still refused, proved or read: an insert of a
// live row (inside the vnode, at its largest pk, at a bucket bound), an
// update or delete of a row that is not live. After an unchecked writer's
// commit the empty buckets prove nothing, and the ops read again.
func TestCheckedWithoutRead(t *testing.T) {
	s, err := Open(t.TempDir(), &Options{Logger: QuietLogger(nil)})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.CreateTable(TableDef{ID: 1, VnodeCount: 1, PK: keys.Schema{keys.Uint64}}))
	w, err := s.NewWriter(1, nil, nil)
	require.NoError(t, err)
	pk := func(n uint64) []byte { return keys.AppendUint64(nil, n) }
	answered := func() int64 { return s.metrics.checksAnswered.Load() }
	epoch := uint64(0)
	commit := func(w *Writer) {
		require.NoError(t, w.Seal(epoch))
		require.NoError(t, s.Commit(epoch))
	}
	epoch++
	for n := uint64(10); n <= 100; n += 10 {
		require.NoError(t, w.Insert(epoch, 0, pk(n), []byte("row")))
	}
	require.Equal(t, int64(10), answered(), "a vnode without rows: no row is live")
	commit(w)

	epoch++
	a := answered()
	require.NoError(t, w.Insert(epoch, 0, pk(200), []byte("row")), "above the largest pk")
	require.NoError(t, w.Insert(epoch, 0, pk(15), []byte("row")), "between two rows of one-row buckets")
	require.Equal(t, a+2, answered())
	for _, n := range []uint64{10, 50, 100} {
		require.ErrorIs(t, w.Insert(epoch, 0, pk(n), []byte("row")), ErrInconsistentOp, "insert of live row %d", n)
	}
	require.ErrorIs(t, w.Delete(epoch, 0, pk(300), []byte("row")), ErrInconsistentOp)
	require.ErrorIs(t, w.Update(epoch, 0, pk(5), []byte("row"), []byte("new")), ErrInconsistentOp)
	require.ErrorIs(t, w.Delete(epoch, 0, pk(55), []byte("row")), ErrInconsistentOp)
	require.NoError(t, w.Update(epoch, 0, pk(50), []byte("row"), []byte("new")))
	require.ErrorIs(t, w.Update(epoch, 0, pk(60), []byte("other"), []byte("new")), ErrInconsistentOp, "old row differs")
	require.Equal(t, a+5, answered(), "the live rows were read")
	commit(w)
	// The rows of the last commit are live, found in the statistics the
	// commit published (and not in the writer's buffers any more).
	epoch++
	require.ErrorIs(t, w.Insert(epoch, 0, pk(200), []byte("row")), ErrInconsistentOp)
	require.ErrorIs(t, w.Insert(epoch, 0, pk(15), []byte("row")), ErrInconsistentOp)
	// A delete in the writer's own buffer is seen before the statistics.
	require.NoError(t, w.Delete(epoch, 0, pk(200), []byte("row")))
	require.NoError(t, w.Insert(epoch, 0, pk(200), []byte("again")))
	commit(w)
	require.NoError(t, w.Close())

	// An unchecked writer's commit makes the counts estimates: an empty
	// bucket proves nothing now; the anchors still do.
	u, err := s.NewWriter(1, nil, &WriterOptions{Unchecked: true})
	require.NoError(t, err)
	epoch++
	require.NoError(t, u.Insert(epoch, 0, pk(25), []byte("row")))
	commit(u)
	require.NoError(t, u.Close())
	w, err = s.NewWriter(1, nil, nil)
	require.NoError(t, err)
	epoch++
	a = answered()
	require.NoError(t, w.Insert(epoch, 0, pk(35), []byte("row")))
	require.Equal(t, a, answered(), "read: the bucket's count may be an estimate")
	require.NoError(t, w.Insert(epoch, 0, pk(1000), []byte("row")))
	require.Equal(t, a+1, answered(), "above the largest pk")
	commit(w)
	rep, err := s.Verify()
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep)
}
