package workload

import (
	"bytes"
	"math"
	"testing"

	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// brute counts live rows at or below cursor by walking the model's rows.
func brute(g *Generator, v uint16, cursor []byte) int64 {
	var n int64
	g.EachRow(v, func(pk, _ []byte) {
		if bytes.Compare(pk, cursor) <= 0 {
			n++
		}
	})
	return n
}

func run(t *testing.T, p Params, steps int) *Generator {
	g, err := New(p)
	require.NoError(t, err)
	for range steps {
		g.Next()
	}
	return g
}

// TestOrderStatistics checks RowsAtOrBelow against a walk of the rows, for
// every workload preset.
func TestOrderStatistics(t *testing.T) {
	for _, name := range PresetNames() {
		t.Run(name, func(t *testing.T) {
			p, err := Preset(name, 3000, 16, 7)
			require.NoError(t, err)
			p.BatchRows = 500
			p.DuringSteps = 4
			g := run(t, p, 20)
			var total int64
			for v := uint16(0); v < 16; v++ {
				rows, _ := g.Live(v)
				total += rows
				require.Equal(t, rows, brute(g, v, bytes.Repeat([]byte{0xFF}, 16)))
				g.EachRow(v, func(pk, _ []byte) {
					require.Equal(t, brute(g, v, pk), g.RowsAtOrBelow(v, pk))
					require.Equal(t, v, keys.Vnode(pk[:8], 16))
				})
			}
			require.Equal(t, g.LiveRows(), total)
		})
	}
}

// TestCounts copies the counts of a generator in the middle of its load
// and churn, feeds the copy the ops of the steps that follow, and checks
// that it answers as the generator at every step, for every preset: at the
// pks of live rows, of deleted rows and of rows never inserted.
func TestCounts(t *testing.T) {
	for _, name := range PresetNames() {
		t.Run(name, func(t *testing.T) {
			p, err := Preset(name, 3000, 16, 7)
			require.NoError(t, err)
			p.BatchRows = 500
			p.DuringSteps = 6
			g := run(t, p, 4)
			c := g.Counts()
			all := g.pk // every row that can exist
			for range 16 {
				for _, op := range g.Next() {
					row := op.NewRow
					if op.Kind == Delete {
						row = op.OldRow
					}
					id, ok := RowID(row)
					require.True(t, ok)
					if op.Kind != Update {
						require.NoError(t, c.Apply(op.Kind == Insert, op.Vnode, id))
					}
				}
				for v := uint16(0); v < 16; v++ {
					live, _ := g.Live(v)
					require.Equal(t, live, c.Live(v), "step %d vnode %d", g.Step(), v)
				}
				for id := 0; id < len(all); id += 7 {
					v := g.vnode[id]
					require.Equal(t, g.RowsAtOrBelow(v, all[id]), c.RowsAtOrBelow(v, all[id]), "step %d vnode %d", g.Step(), v)
				}
			}
			_, ok := RowID([]byte("short"))
			require.False(t, ok)
			require.Error(t, c.Apply(true, (g.vnode[0]+1)%16, 0), "a row of another vnode")
			require.Error(t, c.Apply(true, 0, int32(len(all))), "a row that cannot exist")
		})
	}
}

// TestReplay checks that a generator replayed to step k then continued
// produces the same ops as one that ran straight through.
func TestReplay(t *testing.T) {
	p, err := Preset("mixed", 2000, 8, 3)
	require.NoError(t, err)
	p.BatchRows = 300
	p.DuringSteps = 5
	a := run(t, p, 0)
	var want [][]Op
	for range 25 {
		want = append(want, a.Next())
	}
	for k := range 25 {
		b := run(t, p, 0)
		b.Replay(uint64(k))
		require.Equal(t, want[k], b.Next(), "step %d after replay", k+1)
	}
}

// TestResume checks that a generator resumed at step k from the table of a
// generator that ran steps 1..k, with every delete order, produces exactly
// the ops of the one that ran, to the end; and that a table that is not the
// workload's is refused.
func TestResume(t *testing.T) {
	for _, order := range []string{"random", "prefix", "suffix"} {
		p, err := Preset("mixed", 2000, 8, 3)
		require.NoError(t, err)
		p.BatchRows, p.DuringSteps, p.DeleteOrder = 300, 5, order
		a := run(t, p, 0)
		end := a.BackfillStep() + 6
		for k := uint64(0); k < end; k++ {
			b := run(t, p, 0)
			require.NoError(t, b.Resume(k, func(v uint16, f func(pk, row []byte) error) error {
				var err error
				a.EachRow(v, func(pk, row []byte) {
					if err == nil {
						err = f(pk, row)
					}
				})
				return err
			}), "order %s step %d", order, k)
			require.Equal(t, a.Step(), b.Step())
			for s := k; s < end; s++ {
				require.Equal(t, b.Next(), run(t, p, int(s)).Next(), "order %s: step %d after a resume at %d", order, s+1, k)
			}
			a.Next()
		}
	}
	g := run(t, p0(t), 0)
	err := g.Resume(1, func(v uint16, f func(pk, row []byte) error) error {
		return f([]byte("not a pk"), make([]byte, 100))
	})
	require.ErrorIs(t, err, ErrResume)
}

func p0(t *testing.T) Params {
	p, err := Preset("mixed", 200, 8, 3)
	require.NoError(t, err)
	return p
}

// TestPrefixDeletes checks tombstone-prefix: each vnode loses the lowest 40%
// of its pks before the backfill.
func TestPrefixDeletes(t *testing.T) {
	p, err := Preset("tombstone-prefix", 4000, 8, 11)
	require.NoError(t, err)
	p.BatchRows = 1000
	g, err := New(p)
	require.NoError(t, err)
	g.Replay(g.BackfillStep() - 1)
	for v := uint16(0); v < 8; v++ {
		all := len(g.order[v])
		rows, _ := g.Live(v)
		require.InDelta(t, 0.6*float64(all), float64(rows), 1, "vnode %d", v)
		// The survivors are exactly the highest pks.
		survivors := g.order[v][all-int(rows):]
		for _, id := range survivors {
			require.NotZero(t, g.ver[id])
		}
	}
}

func TestSkew(t *testing.T) {
	p, err := Preset("skew", 20000, 16, 5)
	require.NoError(t, err)
	g := run(t, p, 1)
	var hi, lo int64 = 0, math.MaxInt64
	for v := uint16(0); v < 16; v++ {
		rows, _ := g.Live(v)
		hi, lo = max(hi, rows), min(lo, rows)
	}
	require.Greater(t, hi, 3*lo, "zipf 1.2 must skew vnode sizes (max %d, min %d)", hi, lo)
}

func TestParamsRejected(t *testing.T) {
	for _, p := range []Params{
		{Rows: -1},
		{Rows: 10, VnodeCount: 40000},
		{Rows: 10, DeleteOrder: "middle"},
		{Rows: 10, DeleteFrac: 0.8, DeleteDuring: 0.5},
		{Rows: 10, Zipf: 0.5},
		{Rows: 10, UpdateFrac: math.NaN()},
	} {
		_, err := New(p)
		require.Error(t, err, "%+v", p)
	}
	_, err := Preset("nope", 1, 1, 1)
	require.ErrorContains(t, err, "nope")
}

// TestShapes checks every pk shape: pks are valid and unique under the
// shape's schema, each row sits in the vnode the table definition computes,
// the order statistics hold, and the shape's own promise holds (repeated
// first columns, few categories, inserts at the high end).
func TestShapes(t *testing.T) {
	for _, shape := range Shapes() {
		t.Run(string(shape), func(t *testing.T) {
			p := Params{Rows: 3000, VnodeCount: 16, Seed: 9, Shape: shape, InsertDuring: 0.2,
				DeleteFrac: 0.3, DeleteOrder: "prefix", BatchRows: 1000, DuringSteps: 3}
			g, err := New(p)
			require.NoError(t, err)
			def := g.Params().TableDef(1)
			require.NoError(t, lsmTableCheck(def))
			seen := map[string]bool{}
			firstCols := map[string]int{}
			for id, pk := range g.pk {
				require.NoError(t, def.PK.Validate(pk), "row %d", id)
				require.False(t, seen[string(pk)], "duplicate pk %x", pk)
				seen[string(pk)] = true
				require.Equal(t, def.VnodeOf(pk), g.vnode[id])
				n, err := def.PK.PrefixLen(pk, 1)
				require.NoError(t, err)
				firstCols[string(pk[:n])]++
			}
			switch shape {
			case ParentChild:
				require.Less(t, len(firstCols), len(g.pk)/2, "parents have several children")
			case LowCard:
				require.LessOrEqual(t, len(firstCols), lowCardValues)
			case Timeseries:
				require.LessOrEqual(t, len(firstCols), timeseriesSources)
			}
			g.Replay(g.BackfillStep() + 3)
			var total int64
			for v := uint16(0); v < 16; v++ {
				rows, _ := g.Live(v)
				total += rows
				g.EachRow(v, func(pk, _ []byte) {
					require.Equal(t, brute(g, v, pk), g.RowsAtOrBelow(v, pk))
				})
			}
			require.Equal(t, g.LiveRows(), total)
			if shape == Sequential || shape == Timeseries || shape == ParentChild {
				// Rows inserted during the backfill sort after every loaded
				// row of their first column's group: the high end.
				for id := p.Rows; id < len(g.pk); id++ {
					for old := 0; old < p.Rows; old += 97 {
						if g.vnode[old] == g.vnode[id] && sameFirst(def, g.pk[old], g.pk[id]) {
							require.Positive(t, bytes.Compare(g.pk[id], g.pk[old]))
						}
					}
				}
			}
		})
	}
}

func sameFirst(def lsm.TableDef, a, b []byte) bool {
	if len(def.PK) == 1 {
		return true
	}
	na, _ := def.PK.PrefixLen(a, 1)
	nb, _ := def.PK.PrefixLen(b, 1)
	return bytes.Equal(a[:na], b[:nb])
}

func lsmTableCheck(def lsm.TableDef) error { return def.PK.Check() }

func TestShapeParams(t *testing.T) {
	_, err := New(Params{Rows: 10, Shape: "zigzag"})
	require.ErrorContains(t, err, "zigzag")
	_, err = New(Params{Rows: 10, Shape: Sequential, Zipf: 1.2})
	require.ErrorContains(t, err, "hashed")
	_, err = New(Params{Rows: 10, Shape: ParentChild, Children: -1})
	require.ErrorContains(t, err, "children")
}
