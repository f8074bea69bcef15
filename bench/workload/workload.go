// Package workload generates the deterministic upstream workloads of the
// backfill benchmarks and tests, and keeps an exact model of the table they
// produce.
//
// A workload is a sequence of steps; step k's ops depend only on the seed, k
// and the table after step k-1 (its random picks are by rank among the live
// rows in (vnode, pk) order, not by history), so a process that restarts
// from a committed step rebuilds the model from the committed table
// (Resume) and continues with exactly the ops it would have produced
// without the crash. Replay runs the steps in memory instead (tests use it
// as the uncrashed reference). Steps come in three phases:
// the load (Rows inserts), the churn before the backfill (updates and
// deletes), and the churn during the backfill (updates, deletes, inserts
// spread over DuringSteps steps).
//
// The table's pk has one of several shapes (Shape): by default (hashed) it is
// (dist u64, id u64) with distribution key dist, a hash of the row id or,
// for a skewed workload, a Zipf draw, so that hot dist values pile rows into
// a few vnodes; the others are shaped like tables real systems hold
// (auto-increment ids, orders and their line items, a low-cardinality
// category, string keys, time series). Every row that can ever exist is
// known up front, so the model keeps
// each vnode's live rows in a Fenwick tree over the vnode's pk order: the
// rows at or below any cursor are counted exactly in O(log n). That is the
// truth the backfill's progress estimates are judged against.
package workload

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
)

// Params describe a workload. Fractions are of Rows.
type Params struct {
	Rows       int
	VnodeCount int
	Seed       uint64
	// Shape is the pk shape; empty means Hashed.
	Shape Shape
	// Children is the largest number of children of a parent in the
	// parent-child shape; 0 means 7.
	Children int
	// Zipf is the skew s of the hashed shape's distribution keys; 0 is
	// uniform.
	Zipf float64
	// ValueSize is the row size in bytes; 0 means 100.
	ValueSize int
	// UpdateFrac and DeleteFrac are applied before the backfill, in
	// DeleteOrder: "random", "prefix" (lowest pks of each vnode first) or
	// "suffix".
	UpdateFrac, DeleteFrac float64
	DeleteOrder            string
	// UpdateDuring, DeleteDuring and InsertDuring are applied during the
	// backfill, evenly over DuringSteps steps.
	UpdateDuring, DeleteDuring, InsertDuring float64
	DuringSteps                              int
	// BatchRows is the number of ops per step of the load and of the churn
	// before the backfill; 0 means 20000.
	BatchRows int
}

// Presets are the named workloads of the backfill issue.
var Presets = map[string]Params{
	"uniform":          {},
	"skew":             {Zipf: 1.2},
	"update-churn":     {UpdateFrac: 0.3, UpdateDuring: 0.3},
	"delete-churn":     {DeleteFrac: 0.3, DeleteDuring: 0.3},
	"tombstone-prefix": {DeleteFrac: 0.4, DeleteOrder: "prefix"},
	"insert-during":    {InsertDuring: 0.5},
	"mixed":            {UpdateFrac: 0.2, DeleteFrac: 0.2, UpdateDuring: 0.1, DeleteDuring: 0.1, InsertDuring: 0.2},
}

// PresetNames lists the presets in a stable order.
func PresetNames() []string {
	return []string{"uniform", "skew", "update-churn", "delete-churn", "tombstone-prefix", "insert-during", "mixed"}
}

// Preset returns a named preset with the sizes filled in.
func Preset(name string, rows, vnodes int, seed uint64) (Params, error) {
	p, ok := Presets[name]
	if !ok {
		return Params{}, errors.Newf("workload: unknown workload %q (known: %v)", name, PresetNames())
	}
	p.Rows, p.VnodeCount, p.Seed = rows, vnodes, seed
	return p, nil
}

// Check returns the error New would return for p's parameters, without
// generating its rows: a caller can refuse bad parameters before it starts
// anything.
func (p Params) Check() error { return p.normalize() }

func (p *Params) normalize() error {
	if p.Rows < 0 {
		return errors.Newf("workload: rows %d < 0", p.Rows)
	}
	if p.VnodeCount == 0 {
		p.VnodeCount = keys.DefaultVnodeCount
	}
	if p.Shape == "" {
		p.Shape = Hashed
	}
	if _, err := ParseShape(string(p.Shape)); err != nil {
		return err
	}
	if p.Children == 0 {
		p.Children = defaultChildren
	}
	if p.Children < 1 {
		return errors.Newf("workload: children %d < 1", p.Children)
	}
	if p.Zipf != 0 && p.Shape != Hashed {
		return errors.Newf("workload: zipf applies to the hashed pk shape, not %s", p.Shape)
	}
	if err := keys.CheckVnodeCount(p.VnodeCount); err != nil {
		return err
	}
	if p.ValueSize == 0 {
		p.ValueSize = 100
	}
	if p.ValueSize < 12 {
		return errors.Newf("workload: value size %d < 12", p.ValueSize)
	}
	if p.BatchRows == 0 {
		p.BatchRows = 20000
	}
	if p.DuringSteps <= 0 {
		p.DuringSteps = 1
	}
	if p.DeleteOrder == "" {
		p.DeleteOrder = "random"
	}
	switch p.DeleteOrder {
	case "random", "prefix", "suffix":
	default:
		return errors.Newf("workload: delete order %q is not random, prefix or suffix", p.DeleteOrder)
	}
	for name, f := range map[string]float64{"update-frac": p.UpdateFrac, "delete-frac": p.DeleteFrac,
		"update-during": p.UpdateDuring, "delete-during": p.DeleteDuring, "insert-during": p.InsertDuring} {
		if f < 0 || f > 10 || math.IsNaN(f) {
			return errors.Newf("workload: %s %v out of range", name, f)
		}
	}
	if p.DeleteFrac+p.DeleteDuring > 1 {
		return errors.Newf("workload: delete fractions %v + %v delete more than every row", p.DeleteFrac, p.DeleteDuring)
	}
	if p.Zipf != 0 && p.Zipf <= 1 {
		return errors.Newf("workload: zipf s must be > 1 (or 0 for uniform), got %v", p.Zipf)
	}
	return nil
}

// TableDef returns the definition of the upstream table: the pk schema and
// distribution key of the shape.
func (p Params) TableDef(id uint32) lsm.TableDef {
	shape := p.Shape
	if shape == "" {
		shape = Hashed
	}
	pk, dist := shape.schema()
	return lsm.TableDef{ID: id, Name: "upstream", VnodeCount: p.VnodeCount, PK: pk, DistKeyColumns: dist}
}

// OpKind is the kind of an upstream op.
type OpKind uint8

const (
	Insert OpKind = iota
	Delete
	Update
)

func (k OpKind) String() string { return [...]string{"insert", "delete", "update"}[k] }

// Op is one upstream row op.
type Op struct {
	Kind   OpKind
	Vnode  uint16
	PK     []byte
	OldRow []byte // Delete and Update
	NewRow []byte // Insert and Update
}

// Phase of a step.
type Phase uint8

const (
	Load Phase = iota
	Churn
	During
)

func (p Phase) String() string { return [...]string{"load", "churn", "during"}[p] }

// Generator produces the steps and models the table. Not safe for
// concurrent use.
type Generator struct {
	p    Params
	step uint64

	// Every row that can ever exist: ids [0, Rows) are loaded, the rest are
	// inserted during the backfill.
	pk    [][]byte
	vnode []uint16
	pos   []int32  // position of the row in its vnode's pk order
	ver   []uint32 // 0: not live; else the row's version (value seed)

	order [][]int32 // per vnode: row ids by pk
	fen   []fenwick // per vnode: live rows by position
	vfen  fenwick   // live rows by vnode
	nlive int       // live rows
	bytes []int64   // per vnode: live bytes (pk + row)

	loadSteps, churnSteps uint64
	quota                 []int // prefix/suffix deletes left per vnode
	rr                    int   // next vnode to delete from
	updates, deletes      int   // churn before the backfill, not yet done
	nextInsert            int   // next id to insert during the backfill
	duringOps             [3]float64
	duringDone            [3]int
}

// New returns a generator at step 0 (empty table).
func New(p Params) (*Generator, error) {
	if err := p.normalize(); err != nil {
		return nil, err
	}
	inserts := int(math.Round(p.InsertDuring * float64(p.Rows)))
	n := p.Rows + inserts
	g := &Generator{
		p:     p,
		vnode: make([]uint16, n),
		pos:   make([]int32, n),
		ver:   make([]uint32, n),
		order: make([][]int32, p.VnodeCount),
		fen:   make([]fenwick, p.VnodeCount),
		vfen:  make(fenwick, p.VnodeCount+1),
		bytes: make([]int64, p.VnodeCount),
	}
	def := p.TableDef(0)
	g.pk = p.Shape.pks(p, n)
	for id := range n {
		dist, err := def.PK.PrefixLen(g.pk[id], def.DistKeyColumns)
		if err != nil {
			return nil, errors.NewAssertionErrorWithWrappedErrf(err, "workload: shape %s made an invalid pk", p.Shape)
		}
		g.vnode[id] = keys.Vnode(g.pk[id][:dist], p.VnodeCount)
		g.order[g.vnode[id]] = append(g.order[g.vnode[id]], int32(id))
	}
	for v := range g.order {
		o := g.order[v]
		sort.Slice(o, func(i, j int) bool { return bytes.Compare(g.pk[o[i]], g.pk[o[j]]) < 0 })
		for i, id := range o {
			g.pos[id] = int32(i)
		}
		g.fen[v] = make(fenwick, len(o)+1)
	}
	g.loadSteps = uint64((p.Rows + p.BatchRows - 1) / p.BatchRows)
	g.updates = int(math.Round(p.UpdateFrac * float64(p.Rows)))
	g.deletes = int(math.Round(p.DeleteFrac * float64(p.Rows)))
	g.churnSteps = uint64((g.updates + g.deletes + p.BatchRows - 1) / p.BatchRows)
	g.nextInsert = p.Rows
	g.duringOps = [3]float64{p.UpdateDuring * float64(p.Rows), p.DeleteDuring * float64(p.Rows), float64(inserts)}
	return g, nil
}

// mix is splitmix64's finaliser: a fixed permutation of uint64.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Params returns the normalized parameters.
func (g *Generator) Params() Params { return g.p }

// Step returns the number of steps produced so far.
func (g *Generator) Step() uint64 { return g.step }

// BackfillStep is the first step of the During phase: the load and the churn
// before the backfill are steps 1 to BackfillStep-1.
func (g *Generator) BackfillStep() uint64 { return g.loadSteps + g.churnSteps + 1 }

// PhaseOf returns the phase of step k.
func (g *Generator) PhaseOf(k uint64) Phase {
	switch {
	case k <= g.loadSteps:
		return Load
	case k <= g.loadSteps+g.churnSteps:
		return Churn
	default:
		return During
	}
}

// Next produces the ops of the next step and applies them to the model.
func (g *Generator) Next() []Op {
	g.step++
	k := g.step
	r := rand.New(rand.NewPCG(g.p.Seed, k))
	var ops []Op
	switch g.PhaseOf(k) {
	case Load:
		lo := int(k-1) * g.p.BatchRows
		for id := lo; id < min(lo+g.p.BatchRows, g.p.Rows); id++ {
			ops = append(ops, g.insert(int32(id)))
		}
	case Churn:
		n := g.p.BatchRows
		for ; n > 0 && g.deletes > 0 && g.nlive > 0; n-- {
			g.deletes--
			if id := g.pickDelete(r, g.p.DeleteOrder); id >= 0 {
				ops = append(ops, g.delete(id))
			}
		}
		for ; n > 0 && g.updates > 0 && g.nlive > 0; n-- {
			ops = append(ops, g.update(g.pickLive(r)))
			g.updates--
		}
	case During:
		i := k - g.BackfillStep() + 1 // 1-based step of the phase
		for kind := range 3 {
			want := int(math.Round(g.duringOps[kind] * float64(min(i, uint64(g.p.DuringSteps))) / float64(g.p.DuringSteps)))
			for ; g.duringDone[kind] < want; g.duringDone[kind]++ {
				switch {
				case kind == 0 && g.nlive > 0:
					ops = append(ops, g.update(g.pickLive(r)))
				case kind == 1 && g.nlive > 0:
					ops = append(ops, g.delete(g.pickDelete(r, "random")))
				case kind == 2 && g.nextInsert < len(g.pk):
					ops = append(ops, g.insert(int32(g.nextInsert)))
					g.nextInsert++
				}
			}
		}
	}
	return ops
}

// Replay runs the generator to step k without returning ops, in memory
// from step 0 (a reference for tests; a restart resumes, see Resume).
func (g *Generator) Replay(k uint64) {
	for g.step < k {
		g.Next()
	}
}

// ErrResume marks a table a generator cannot resume from: it does not hold
// the rows the generator produced.
var ErrResume = errors.New("workload: table does not hold the workload's rows")

// Resume sets a new generator (at step 0) to step k from the table its
// steps 1..k produced, without replaying them: rows calls f for every row
// of a vnode of that table. The model is the table (each row's value holds
// its id and version); the phases' counters are functions of k and of the
// load's rows (the delete quotas of the prefix and suffix orders are
// counted, not drawn). The generator then produces exactly the steps one
// that ran steps 1..k would.
func (g *Generator) Resume(k uint64, rows func(vnode uint16, f func(pk, row []byte) error) error) error {
	if g.step != 0 || g.nlive != 0 {
		return errors.Newf("workload: resume of a generator at step %d", g.step)
	}
	for v := range g.p.VnodeCount {
		err := rows(uint16(v), func(pk, row []byte) error {
			if len(row) != g.p.ValueSize {
				return errors.Wrapf(ErrResume, "vnode %d: row of pk %x has %d bytes, want %d", v, pk, len(row), g.p.ValueSize)
			}
			id, ver := binary.BigEndian.Uint64(row), binary.BigEndian.Uint32(row[8:])
			// The id, version and pk say which row it is; the rest of the
			// value is not compared (generating it per row would double
			// the resume's cost).
			if id >= uint64(len(g.pk)) || ver == 0 || g.vnode[id] != uint16(v) || !bytes.Equal(g.pk[id], pk) || g.ver[id] != 0 {
				return errors.Wrapf(ErrResume, "vnode %d: row of pk %x is not a row of the workload (id %d version %d)", v, pk, id, ver)
			}
			g.ver[id] = ver
			g.setLive(int32(id), true)
			return nil
		})
		if err != nil {
			return err
		}
	}
	// The counters, step by step, as Next moves them.
	live := g.p.Rows // the load inserts every row it has
	for step := g.loadSteps + 1; step <= min(k, g.loadSteps+g.churnSteps); step++ {
		n := g.p.BatchRows
		for ; n > 0 && g.deletes > 0 && live > 0; n-- {
			g.deletes--
			if g.countDelete() {
				live--
			}
		}
		for ; n > 0 && g.updates > 0 && live > 0; n-- {
			g.updates--
		}
	}
	if k >= g.BackfillStep() {
		i := k - g.BackfillStep() + 1
		for kind := range 3 {
			g.duringDone[kind] = int(math.Round(g.duringOps[kind] * float64(min(i, uint64(g.p.DuringSteps))) / float64(g.p.DuringSteps)))
		}
		g.nextInsert = min(g.p.Rows+g.duringDone[2], len(g.pk))
	}
	g.step = k
	return nil
}

// countDelete moves the delete counters of the churn as pickDelete would,
// without a row to pick: it reports whether a row would be deleted.
func (g *Generator) countDelete() bool {
	if g.p.DeleteOrder == "random" {
		return true
	}
	if g.quota == nil {
		g.quota = make([]int, g.p.VnodeCount)
		for v := range g.quota {
			loaded := 0
			for _, id := range g.order[v] {
				if int(id) < g.p.Rows {
					loaded++
				}
			}
			g.quota[v] = int(math.Round(g.p.DeleteFrac * float64(loaded)))
		}
	}
	for range g.p.VnodeCount {
		v := g.rr
		g.rr = (g.rr + 1) % g.p.VnodeCount
		if g.quota[v] > 0 {
			g.quota[v]--
			return true
		}
	}
	return false
}

// pickDelete picks the next row to delete, or -1 if none is left.
func (g *Generator) pickDelete(r *rand.Rand, order string) int32 {
	if order == "random" {
		return g.pickLive(r)
	}
	// prefix / suffix: each vnode loses the same share of its rows, lowest
	// (highest) pks first; the vnodes take turns.
	if g.quota == nil {
		g.quota = make([]int, g.p.VnodeCount)
		for v := range g.quota {
			rows, _ := g.Live(uint16(v))
			g.quota[v] = int(math.Round(g.p.DeleteFrac * float64(rows)))
		}
	}
	for range g.p.VnodeCount {
		v := g.rr
		g.rr = (g.rr + 1) % g.p.VnodeCount
		if g.quota[v] == 0 {
			continue
		}
		g.quota[v]--
		f := g.fen[v]
		rank := 1
		if order == "suffix" {
			rank = f.sum(len(f) - 1)
		}
		return g.order[v][f.find(rank)]
	}
	return -1
}

func (g *Generator) value(id int32, ver uint32) []byte {
	b := make([]byte, g.p.ValueSize)
	binary.BigEndian.PutUint64(b, uint64(id))
	binary.BigEndian.PutUint32(b[8:], ver)
	x := uint64(id)<<32 | uint64(ver)
	for i := 12; i < len(b); i += 8 {
		x = mix(x)
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], x)
		copy(b[i:], w[:])
	}
	return b
}

func (g *Generator) insert(id int32) Op {
	g.ver[id] = 1
	g.setLive(id, true)
	return Op{Kind: Insert, Vnode: g.vnode[id], PK: g.pk[id], NewRow: g.value(id, 1)}
}

func (g *Generator) delete(id int32) Op {
	op := Op{Kind: Delete, Vnode: g.vnode[id], PK: g.pk[id], OldRow: g.value(id, g.ver[id])}
	g.setLive(id, false)
	g.ver[id] = 0
	return op
}

func (g *Generator) update(id int32) Op {
	old := g.value(id, g.ver[id])
	g.ver[id]++
	return Op{Kind: Update, Vnode: g.vnode[id], PK: g.pk[id], OldRow: old, NewRow: g.value(id, g.ver[id])}
}

func (g *Generator) setLive(id int32, live bool) {
	v := g.vnode[id]
	d := int64(len(g.pk[id]) + g.p.ValueSize)
	if live {
		g.fen[v].add(int(g.pos[id])+1, 1)
		g.vfen.add(int(v)+1, 1)
		g.nlive++
		g.bytes[v] += d
		return
	}
	g.fen[v].add(int(g.pos[id])+1, -1)
	g.vfen.add(int(v)+1, -1)
	g.nlive--
	g.bytes[v] -= d
}

// pickLive picks a live row uniformly: the rank drawn from r, in (vnode,
// pk) order. The pick depends on the live rows only, not on the order they
// became live in, so that a generator resumed from the table (Resume) picks
// exactly as one that ran every step.
func (g *Generator) pickLive(r *rand.Rand) int32 {
	rank := r.IntN(g.nlive) + 1
	v := g.vfen.find(rank)
	rank -= g.vfen.sum(v)
	return g.order[v][g.fen[v].find(rank)]
}

// Live returns the live rows and bytes of a vnode.
func (g *Generator) Live(vnode uint16) (rows, bytes int64) {
	f := g.fen[vnode]
	return int64(f.sum(len(f) - 1)), g.bytes[vnode]
}

// LiveRows returns the live rows of the whole table.
func (g *Generator) LiveRows() int64 { return int64(g.nlive) }

// RowsAtOrBelow counts the live rows of a vnode with pk <= cursor.
func (g *Generator) RowsAtOrBelow(vnode uint16, cursor []byte) int64 {
	return int64(g.fen[vnode].sum(g.rank(vnode, cursor)))
}

// rank returns the number of the vnode's pks (live or not) <= cursor.
func (g *Generator) rank(vnode uint16, cursor []byte) int {
	o := g.order[vnode]
	return sort.Search(len(o), func(i int) bool { return bytes.Compare(g.pk[o[i]], cursor) > 0 })
}

// EachRow calls f for each live row of a vnode in pk order.
func (g *Generator) EachRow(vnode uint16, f func(pk, row []byte)) {
	for _, id := range g.order[vnode] {
		if g.ver[id] != 0 {
			f(g.pk[id], g.value(id, g.ver[id]))
		}
	}
}

func (g *Generator) String() string {
	return fmt.Sprintf("workload(rows=%d vnodes=%d seed=%d step=%d live=%d)", g.p.Rows, g.p.VnodeCount, g.p.Seed, g.step, g.nlive)
}

// fenwick is a binary indexed tree over positions 1..n.
type fenwick []int32

func (f fenwick) add(i int, d int32) {
	for ; i < len(f); i += i & -i {
		f[i] += d
	}
}

// sum returns the total of positions 1..i.
func (f fenwick) sum(i int) int {
	s := 0
	for ; i > 0; i -= i & -i {
		s += int(f[i])
	}
	return s
}

// find returns the 0-based position of the rank-th live row (1-based rank).
func (f fenwick) find(rank int) int {
	pos := 0
	step := 1
	for step*2 < len(f) {
		step *= 2
	}
	for ; step > 0; step /= 2 {
		if next := pos + step; next < len(f) && int(f[next]) < rank {
			pos = next
			rank -= int(f[next])
		}
	}
	return pos
}

// Counts is a copy of a generator's live-row counts (Generator.Counts) that
// follows the ops given to it (Apply) instead of the generator: it answers
// Live and RowsAtOrBelow as the generator did at the step it was copied at,
// plus the ops applied since. A truth computed from it can run on another
// goroutine while the generator goes on. It shares the generator's
// immutable parts (the pks and their order), which Next does not change.
// Not safe for concurrent use; safe beside its generator's use.
type Counts struct {
	g   *Generator
	fen []fenwick
}

// Counts returns a copy of the generator's live-row counts at its current
// step: O(rows) time and 4 bytes per row that can exist.
func (g *Generator) Counts() *Counts {
	c := &Counts{g: g, fen: make([]fenwick, len(g.fen))}
	for v, f := range g.fen {
		c.fen[v] = slices.Clone(f)
	}
	return c
}

// RowID returns the id of the workload's row whose value is row: every
// row's value starts with it (Generator.Resume reads it the same way).
func RowID(row []byte) (int32, bool) {
	if len(row) < 12 {
		return 0, false
	}
	id := binary.BigEndian.Uint64(row)
	if id > math.MaxInt32 {
		return 0, false
	}
	return int32(id), true
}

// Apply takes one op of the generator's, an Insert or a Delete of row id
// (RowID of its value) in vnode: the row becomes live or not. Updates
// change no count and need not be applied. A row the generator cannot
// produce is an error.
func (c *Counts) Apply(insert bool, vnode uint16, id int32) error {
	if id < 0 || int(id) >= len(c.g.pk) || c.g.vnode[id] != vnode {
		return errors.Newf("workload: counts: row %d of vnode %d is not a row of the workload", id, vnode)
	}
	d := int32(-1)
	if insert {
		d = 1
	}
	c.fen[vnode].add(int(c.g.pos[id])+1, d)
	return nil
}

// Live returns the live rows of a vnode.
func (c *Counts) Live(vnode uint16) int64 {
	f := c.fen[vnode]
	return int64(f.sum(len(f) - 1))
}

// RowsAtOrBelow counts the live rows of a vnode with pk <= cursor.
func (c *Counts) RowsAtOrBelow(vnode uint16, cursor []byte) int64 {
	return int64(c.fen[vnode].sum(c.g.rank(vnode, cursor)))
}
