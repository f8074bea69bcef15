package replicated

import (
	"math/rand/v2"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// BenchmarkOverlay is an actor's overlay at a backfill's barrier whose
// every epoch is a checkpoint: the upstream's ops of the epoch (ops-per-epoch,
// random pks over 256 vnodes, of which the actor holds half) are applied,
// the epoch is committed, and the next snapshot prunes what the commit
// made durable. ns/op is one barrier's overlay work, without the store's
// (empty, synced) commit.
func BenchmarkOverlay(b *testing.B) {
	const vnodes, opsPerEpoch = 256, 1024
	s, err := lsm.Open(b.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(b, err)
	defer s.Close()
	def := lsm.TableDef{ID: 1, VnodeCount: vnodes, PK: keys.Schema{keys.Uint64}}
	require.NoError(b, s.CreateTable(def))
	def, _ = s.Table(1)
	mine := roaring.New()
	mine.AddRange(0, vnodes/2)
	rt, err := New(s, 1, mine)
	require.NoError(b, err)
	r := rand.New(rand.NewPCG(1, 2))
	ops := make([]Op, opsPerEpoch)
	row := make([]byte, 40)
	for i := range ops {
		pk := keys.AppendUint64(nil, r.Uint64())
		ops[i] = Op{Vnode: def.VnodeOf(pk), PK: pk, Live: true, Row: row} // updates: no change of rows
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		epoch := uint64(i + 1)
		rt.Apply(epoch, ops)
		b.StopTimer()
		require.NoError(b, s.Commit(epoch))
		b.StartTimer()
		snap, err := rt.Snapshot(epoch)
		require.NoError(b, err)
		snap.Close()
	}
	b.StopTimer()
	require.Zero(b, rt.Pending(), "every version committed")
}
