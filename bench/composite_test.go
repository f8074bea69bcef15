package bench

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

var (
	lineitemSeed = flag.Uint64("lineitem-seed", 0, "seed of TestLineitemAccuracy's orders (0: testutil.DefaultSeed, or time based with -random-seeds)")
	lineitemRows = flag.Int("lineitem-rows", 120_000, "line items of TestLineitemAccuracy (TPC-H's lineitem at SF 0.02 has about 120k)")
)

// lineitems is a TPC-H-like lineitem table: pk (orderkey u64, linenumber
// u64), 1 to 7 lines per order, the orderkey the distribution key, so
// that all lines of an order share a vnode and their first 8 bytes. Its
// orderkeys are sequential (TPC-H's dbgen numbers orders in turn, sparse
// but in order) or hashed (an order id drawn from a hash, as a UUID or a
// snowflake id would be). The load steps insert stepRows lines each; the
// backfill's steps change nothing. It is the job's Source and its
// Oracle: the rows of a vnode at or below a cursor, counted in a sorted
// copy of its pks.
type lineitems struct {
	def      lsm.TableDef
	pks      [][]byte   // in load order
	byVnode  [][]string // sorted pks per vnode
	stepRows int
	step     uint64
	// churn is the orders each backfill step inserts (RF1: new orders
	// above every orderkey, or new hashed keys) and deletes (RF2: the
	// oldest orders, as loaded); 0: the backfill's steps change nothing.
	churn int
	r     *rand.Rand
	// orders are the pks of each order, in load order; nextOrder the key
	// of the next sequential order, oldest the next order to delete.
	orders    [][][]byte
	nextOrder uint64
	oldest    int
	hashed    bool
}

func newLineitems(def lsm.TableDef, rows int, hashed bool, seed uint64) *lineitems {
	r := rand.New(rand.NewPCG(seed, 0x11e1))
	li := &lineitems{def: def, byVnode: make([][]string, def.VnodeCount), stepRows: 20_000}
	li.r, li.hashed, li.nextOrder = r, hashed, 1
	for len(li.pks) < rows {
		o := li.newOrder()
		li.orders = append(li.orders, o)
		for _, pk := range o {
			li.pks = append(li.pks, pk)
			v := def.VnodeOf(pk)
			li.byVnode[v] = append(li.byVnode[v], string(pk))
		}
	}
	for _, v := range li.byVnode {
		sort.Strings(v)
	}
	return li
}

func (li *lineitems) newOrder() [][]byte {
	key := li.nextOrder
	li.nextOrder++
	if li.hashed {
		key = li.r.Uint64()
	}
	var o [][]byte
	for line := range uint64(1 + li.r.IntN(7)) {
		o = append(o, keys.AppendUint64(keys.AppendUint64(nil, key), line+1))
	}
	return o
}

func (li *lineitems) loadSteps() uint64 {
	return uint64((len(li.pks) + li.stepRows - 1) / li.stepRows)
}

func (li *lineitems) Resume(at backfill.Position) error { li.step = at.Step; return nil }
func (li *lineitems) BackfillStep() uint64              { return li.loadSteps() + 1 }
func (li *lineitems) Next(context.Context) ([]backfill.RowOp, error) {
	li.step++
	if li.step > li.loadSteps() {
		var ops []backfill.RowOp
		for range li.churn {
			for _, pk := range li.newOrder() {
				ops = append(ops, backfill.RowOp{Kind: backfill.Insert, Vnode: li.def.VnodeOf(pk), PK: pk, Row: []byte("new item")})
			}
			if li.oldest < len(li.orders) {
				for _, pk := range li.orders[li.oldest] {
					ops = append(ops, backfill.RowOp{Kind: backfill.Delete, Vnode: li.def.VnodeOf(pk), PK: pk, Row: []byte("line item")})
				}
				li.oldest++
			}
		}
		return ops, nil
	}
	lo := int(li.step-1) * li.stepRows
	var ops []backfill.RowOp
	for _, pk := range li.pks[lo:min(lo+li.stepRows, len(li.pks))] {
		ops = append(ops, backfill.RowOp{Kind: backfill.Insert, Vnode: li.def.VnodeOf(pk), PK: pk, Row: []byte("line item")})
	}
	return ops, nil
}

func (li *lineitems) Rows(_ uint64, vnode uint16, cursor []byte) (behind, total int64, err error) {
	v := li.byVnode[vnode]
	if cursor != nil {
		behind = int64(sort.Search(len(v), func(i int) bool { return v[i] > string(cursor) }))
	}
	return behind, int64(len(v)), nil
}

// TestLineitemAccuracy runs a backfill of a TPC-H-like lineitem table
// (pk (orderkey, linenumber)) in 256 vnodes with a bucket budget of 256
// (buckets of about 470 rows at 120k rows: a vnode is one to a few
// buckets), in both snapshot orders, with orders sequential and hashed,
// and asserts the stats approach's accuracy goals at every checkpoint.
func TestLineitemAccuracy(t *testing.T) {
	seed := testutil.Seed(t, "lineitem-seed", *lineitemSeed)
	for _, churn := range []int{0, 20} {
		for _, hashed := range []bool{false, true} {
			for _, order := range []backfill.SnapshotOrder{backfill.VnodeOrder, backfill.Interleaved} {
				orders := map[bool]string{false: "sequential", true: "hashed"}[hashed]
				t.Run(fmt.Sprintf("orders=%s/order=%s/churn=%d", orders, order, churn), func(t *testing.T) {
					def := lsm.TableDef{ID: 1, Name: "lineitem", VnodeCount: 256, PK: keys.Schema{keys.Uint64, keys.Uint64}, DistKeyColumns: 1}
					li := newLineitems(def, *lineitemRows, hashed, seed)
					li.churn = churn
					cfg := Config{Dir: t.TempDir(), Actors: 2, ChunkSize: 256, BarrierRows: 2048, SnapshotOrder: order,
						Approaches: []string{"stats"},
						Store:      &lsm.Options{Logger: lsm.QuietLogger(nil), StatsBucketBudget: 256},
						User: &UserJob{Table: def, New: func(s *lsm.Store) (backfill.Source, backfilltest.Oracle) {
							c := *li
							c.step = 0
							if churn > 0 {
								return &c, backfilltest.ScanOracle{Store: s, Table: def.ID}
							}
							return &c, li
						}}}
					sum, err := Run(context.Background(), cfg)
					require.NoError(t, err)
					require.True(t, sum.MVMatches, sum.MVError)
					st := sum.Errors["stats"]
					require.NotNil(t, st)
					t.Logf("%d rows, %d checkpoints: stats mean %.3f max %.3f signed %+.3f pp, bounds %.3f pp wide (max %.3f)",
						len(li.pks), st.N, st.MeanPP, st.MaxPP, st.SignedPP, st.WidthMeanPP, st.WidthMaxPP)
					require.Zero(t, st.Outside, "checkpoints whose truth lay outside the stats figure's bounds")
					require.LessOrEqual(t, st.MeanPP, goalMeanPP, "stats mean error")
					require.LessOrEqual(t, st.MaxPP, goalMaxPP, "stats max error")
				})
			}
		}
	}
}
