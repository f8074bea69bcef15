package compactiondelta

import (
	"cmp"
	"slices"

	"github.com/lsmstats/lsmstats/internal/sstsummary"
)

// Delta is a signed change of physical statistics. The zero value is no
// change.
type Delta struct {
	Entries, Puts, Deletes int64
	KeyBytes, ValueBytes   int64
	PebbleTombstones       int64
}

func (d *Delta) add(c sstsummary.Counts, sign int64) {
	d.Entries += sign * int64(c.Entries)
	d.Puts += sign * int64(c.Puts)
	d.Deletes += sign * int64(c.Deletes)
	d.KeyBytes += sign * int64(c.KeyBytes)
	d.ValueBytes += sign * int64(c.ValueBytes)
	d.PebbleTombstones += sign * int64(c.PebbleTombstones)
}

// IsZero reports whether d changes nothing.
func (d Delta) IsZero() bool { return d == Delta{} }

// VnodeDelta is the change of one vnode.
type VnodeDelta struct {
	Vnode uint16
	Delta
}

// TableDelta is the change of one table: Delta = Out − In, and the vnodes
// whose counts changed, in increasing order.
type TableDelta struct {
	Table uint32
	Delta
	// In and Out are the table's counts in the inputs and in the outputs.
	In, Out sstsummary.Counts
	Vnodes  []VnodeDelta
}

// Vnode returns the delta of one vnode (zero if unchanged).
func (t *TableDelta) Vnode(v uint16) Delta {
	i, ok := slices.BinarySearchFunc(t.Vnodes, v, func(d VnodeDelta, v uint16) int { return int(d.Vnode) - int(v) })
	if !ok {
		return Delta{}
	}
	return t.Vnodes[i].Delta
}

// File is one input or output table of a compaction.
type File struct {
	FileNum uint64
	Level   int
}

// Compaction is the change one Pebble compaction made to the physical
// statistics. Its slices are shared between subscribers: read-only.
type Compaction struct {
	// JobID and Reason are Pebble's.
	JobID  int
	Reason string
	// Inputs and Outputs are the compaction's tables; a file in both (a move)
	// is in neither Tables.
	Inputs, Outputs []File
	// Tables lists the tables with files in the compaction, in increasing id
	// order.
	Tables []TableDelta
	// Missing lists the files whose summary the tracker never read (an
	// output that another compaction consumed before a refresh listed it);
	// the delta leaves them out.
	Missing []uint64
}

// Complete reports whether every file's summary was known: then the delta
// is exact.
func (d *Compaction) Complete() bool { return len(d.Missing) == 0 }

// Table returns the delta of one table, if the compaction touched it.
func (d *Compaction) Table(id uint32) (TableDelta, bool) {
	i, ok := slices.BinarySearchFunc(d.Tables, id, func(t TableDelta, id uint32) int { return cmp.Compare(uint64(t.Table), uint64(id)) })
	if !ok {
		return TableDelta{}, false
	}
	return d.Tables[i], true
}

type tvKey struct {
	table uint32
	vnode uint16
}

// Builder sums the delta of one compaction from the summaries of its
// files: Σ outputs − Σ inputs per (table, vnode). The zero value is not
// usable (NewBuilder); not safe for concurrent use.
type Builder struct {
	cd     Compaction
	vnodes map[tvKey]*Delta
	tables map[uint32]*TableDelta
}

// NewBuilder starts the delta of a compaction.
func NewBuilder(jobID int, reason string, inputs, outputs []File) *Builder {
	return &Builder{
		cd:     Compaction{JobID: jobID, Reason: reason, Inputs: inputs, Outputs: outputs},
		vnodes: map[tvKey]*Delta{},
		tables: map[uint32]*TableDelta{},
	}
}

// Add adds a file of the compaction, an input or an output: its summary
// and the value bytes apportioned to each of its (table, vnode)s, in the
// summary's order (collectors see no values).
func (b *Builder) Add(s *sstsummary.FileSummary, values []uint64, output bool) {
	sign := int64(-1)
	if output {
		sign = 1
	}
	k := 0
	for i := range s.Tables {
		ts := &s.Tables[i]
		td := b.tables[ts.Table]
		if td == nil {
			td = &TableDelta{Table: ts.Table}
			b.tables[ts.Table] = td
		}
		for j := range ts.Vnodes {
			c := ts.Vnodes[j].Counts
			c.ValueBytes = values[k]
			k++
			key := tvKey{ts.Table, ts.Vnodes[j].Vnode}
			vd := b.vnodes[key]
			if vd == nil {
				vd = &Delta{}
				b.vnodes[key] = vd
			}
			vd.add(c, sign)
			td.Delta.add(c, sign)
			if output {
				td.Out.Add(c)
			} else {
				td.In.Add(c)
			}
		}
	}
}

// Missing records a file of the compaction whose summary is unknown; the
// delta leaves it out and is not Complete.
func (b *Builder) Missing(fileNum uint64) { b.cd.Missing = append(b.cd.Missing, fileNum) }

// Finish returns the delta: the tables in increasing id order, each with
// the vnodes whose counts changed.
func (b *Builder) Finish() Compaction {
	cd := b.cd
	for key, vd := range b.vnodes {
		if !vd.IsZero() {
			td := b.tables[key.table]
			td.Vnodes = append(td.Vnodes, VnodeDelta{Vnode: key.vnode, Delta: *vd})
		}
	}
	for _, td := range b.tables {
		slices.SortFunc(td.Vnodes, func(a, b VnodeDelta) int { return int(a.Vnode) - int(b.Vnode) })
		cd.Tables = append(cd.Tables, *td)
	}
	slices.SortFunc(cd.Tables, func(a, b TableDelta) int { return cmp.Compare(uint64(a.Table), uint64(b.Table)) })
	return cd
}
