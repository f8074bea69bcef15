package replicated

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/lsmstats/lsmstats/stats"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

var seedFlag = flag.Uint64("seed", 0, "seed for TestRandom (0: testutil.DefaultSeed, or time based with -random-seeds)")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRandom applies random upstream changes through a writer (persisted,
// committed only at some barriers) and to the replicated table's overlay,
// and checks reads and statistics at random epochs between the committed
// epoch and the newest against a model.
func TestRandom(t *testing.T) {
	seed := testutil.Seed(t, "seed", *seedFlag)
	r := rand.New(rand.NewPCG(seed, 9))
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	defer s.Close()
	def := lsm.TableDef{ID: 1, VnodeCount: 4, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	def, _ = s.Table(1)
	w, err := s.NewWriter(1, nil, nil)
	require.NoError(t, err)
	mine := roaring.New()
	mine.AddMany([]uint32{1, 2})
	rt, err := New(s, 1, mine)
	require.NoError(t, err)

	// history[pk] = versions by epoch; state = latest.
	type ver struct {
		epoch uint64
		row   string // "" is deleted
	}
	history := map[uint64][]ver{}
	cur := func(pk uint64) string {
		h := history[pk]
		if len(h) == 0 {
			return ""
		}
		return h[len(h)-1].row
	}
	at := func(pk, epoch uint64) string {
		row := ""
		for _, v := range history[pk] {
			if v.epoch <= epoch {
				row = v.row
			}
		}
		return row
	}
	epoch := uint64(1)
	for round := 0; round < 60; round++ {
		var ops []Op
		for range r.IntN(40) {
			pk := uint64(r.IntN(100))
			key := keys.AppendUint64(nil, pk)
			vn := def.VnodeOf(key)
			old := cur(pk)
			row := fmt.Sprintf("e%d-%d", epoch, r.IntN(1000))
			op := Op{Vnode: vn, PK: key, Live: true, Row: []byte(row)}
			switch {
			case old == "":
				require.NoError(t, w.Insert(epoch, vn, key, []byte(row)))
				op.Delta = stats.LiveCounts{Rows: 1, Bytes: int64(8 + len(row))}
			case r.IntN(3) == 0:
				require.NoError(t, w.Delete(epoch, vn, key, []byte(old)))
				op = Op{Vnode: vn, PK: key, Delta: stats.LiveCounts{Rows: -1, Bytes: -int64(8 + len(old))}}
				row = ""
			default:
				require.NoError(t, w.Update(epoch, vn, key, []byte(old), []byte(row)))
				op.Delta = stats.LiveCounts{Bytes: int64(len(row) - len(old))}
			}
			h := history[pk]
			if n := len(h); n > 0 && h[n-1].epoch == epoch {
				h = h[:n-1]
			}
			history[pk] = append(h, ver{epoch, row})
			ops = append(ops, op)
		}
		rt.Apply(epoch, ops)
		require.NoError(t, w.Seal(epoch))
		if r.IntN(3) == 0 {
			require.NoError(t, s.Commit(epoch))
		}
		// Read at every epoch from the committed one to the newest.
		for e := s.CommittedEpoch(); e <= epoch; e++ {
			snap, err := rt.Snapshot(e)
			require.NoError(t, err)
			st := s.Stats()
			// shared reads every vnode again, Reset from one to the next.
			var shared *Iter
			for _, vn := range []uint16{1, 2} {
				var want []string
				var live stats.LiveCounts
				for pk := range history {
					key := keys.AppendUint64(nil, pk)
					if def.VnodeOf(key) == vn {
						if row := at(pk, e); row != "" {
							want = append(want, fmt.Sprintf("%x=%s", key, row))
							live.Rows++
							live.Bytes += int64(8 + len(row))
						}
					}
				}
				sort.Strings(want)
				var after []byte
				if len(want) > 0 && r.IntN(2) == 0 {
					// Start after a random row.
					i := r.IntN(len(want))
					fmt.Sscanf(want[i][:16], "%x", &after)
					want = want[i+1:]
				}
				if len(want) == 0 {
					want = nil
				}
				it, err := snap.Iter(vn, after)
				require.NoError(t, err)
				var got []string
				for it.Next() {
					got = append(got, fmt.Sprintf("%x=%s", it.PK(), it.Row()))
				}
				require.NoError(t, it.Close())
				require.Equal(t, want, got, "vnode %d at epoch %d (committed %d) after %x", vn, e, s.CommittedEpoch(), after)
				if shared == nil {
					shared, err = snap.Iter(vn, after)
				} else {
					err = shared.Reset(vn, after)
				}
				require.NoError(t, err)
				got = nil
				for shared.Next() {
					got = append(got, fmt.Sprintf("%x=%s", shared.PK(), shared.Row()))
				}
				require.NoError(t, shared.Err())
				require.Equal(t, want, got, "reset iterator: vnode %d at epoch %d after %x", vn, e, after)
				require.Equal(t, live, snap.Live(st, vn), "live of vnode %d at epoch %d", vn, e)
				est := snap.EstimateRows(st, vn, nil, nil)
				require.Equal(t, live.Rows, est.Lower)
				require.Equal(t, live.Rows, est.Upper)
			}
			require.ErrorIs(t, shared.Reset(0, nil), lsm.ErrInvalidVnode, "vnode 0 is not the table's")
			require.NoError(t, shared.Close())
			snap.Close()
		}
		epoch++
	}
	_, err = rt.Snapshot(s.CommittedEpoch() - 1)
	require.Error(t, err)
	_, err = New(s, 1, roaring.BitmapOf(9))
	require.ErrorIs(t, err, lsm.ErrInvalidVnode)
	snap, err := rt.Snapshot(epoch)
	require.NoError(t, err)
	_, err = snap.Iter(0, nil)
	require.ErrorIs(t, err, lsm.ErrInvalidVnode)
	snap.Close()
	require.NoError(t, w.Close())
}
