package stats_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/lsminternal"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// TestStoreStatsRandomized is acceptance 2 through the store: random writes
// (checked and unchecked writers), spills (a small memory watermark),
// commits of one or several sealed epochs, Pebble SINGLEDELs of shadowed
// versions written into the memtable (as MVCC garbage collection would),
// Pebble flushes (which write those into SSTs through the collector) and
// manual compactions of random spans (which drop them with their targets),
// automatic compactions in the background (in half of the runs), and
// reopens that drop sealed but uncommitted epochs. After every step:
//
//   - store.Verify: the tracker's incremental Version equals a from-scratch
//     recomputation over the live SSTs, every SST satisfies the NumEntries
//     identity, and the live statistics of every (table, vnode), bucket by
//     bucket, equal a scan at the committed epoch;
//   - the live statistics equal the in-memory model of the committed rows;
//   - the physical puts and deletes of every (table, vnode) equal a raw count
//     of the table's Pebble keys that an iterator sees plus the versions that
//     the Pebble tombstones counted hide (each SINGLEDEL meets exactly one
//     SET, and compaction drops both together), and each table's totals are
//     the sums over its vnodes.
//
// Accepts -stats-seed.
func TestStoreStatsRandomized(t *testing.T) {
	seed := storeSeed(t)
	r := rand.New(rand.NewPCG(seed, 0x5EED))
	steps := 60
	if raceEnabled {
		steps = 20
	}
	opts := uncompacted()
	opts.MemoryWatermark = int64(2<<10 + r.IntN(16<<10))
	autoCompactions := r.IntN(2) == 0
	if autoCompactions {
		opts.Pebble = nil
		opts.L0StopSublevels = 0
	}
	t.Logf("memory watermark %d bytes, automatic compactions %t", opts.MemoryWatermark, autoCompactions)
	e := openStore(t, opts)

	tables := []struct {
		id        uint32
		vnodes    int
		unchecked bool
		pks       int
	}{{1, 4, false, 800}, {2, 16, false, 3000}, {3, 1, true, 300}}
	m := &storeModel{committed: map[uint32]map[uint64]string{}}
	for _, tb := range tables {
		e.createTable(tb.id, tb.vnodes)
		m.committed[tb.id] = map[uint64]string{}
	}
	newWriters := func() {
		for _, tb := range tables {
			w, err := e.s.NewWriter(tb.id, nil, &lsm.WriterOptions{Unchecked: tb.unchecked})
			require.NoError(t, err)
			e.writers[tb.id] = w
		}
	}
	newWriters()
	epoch := e.s.EpochFloor()
	var counts storeRandomCounts
	for step := range steps {
		var what string
		switch k := r.IntN(20); {
		case k < 11: // one or two epochs, then a commit
			for n := 1 + r.IntN(2); n > 0; n-- {
				epoch++
				for _, tb := range tables {
					m.write(t, r, e, tb.id, epoch, r.IntN(tb.pks/4), tb.pks)
				}
				for _, w := range e.writers {
					require.NoError(t, w.Seal(epoch))
				}
			}
			require.NoError(t, e.s.Commit(epoch))
			m.commit(epoch)
			counts.commits++
			what = fmt.Sprintf("commit %d", epoch)
		case k < 13: // Pebble tombstones in the memtable, as MVCC GC writes them
			tb := tables[r.IntN(len(tables))].id
			n := e.singleDeleteShadowed(r, tb, 1+r.IntN(40))
			counts.tombstones += n
			m.unflushed = m.unflushed || n > 0
			what = fmt.Sprintf("%d SINGLEDELs of shadowed versions of table %d", n, tb)
		case k < 15:
			require.NoError(t, lsminternal.DB(e.s).Flush())
			m.unflushed = false
			counts.flushes++
			what = "flush"
		case k < 18:
			lo, hi := storeRandomSpan(r, tables[r.IntN(len(tables))].id)
			require.NoError(t, lsminternal.DB(e.s).Compact(context.Background(), lo, hi, r.IntN(2) == 0))
			counts.compactions++
			what = fmt.Sprintf("compact [%x, %x)", lo, hi)
		default: // reopen, maybe with sealed and open epochs that never commit
			if r.IntN(2) == 0 {
				epoch++
				for _, tb := range tables {
					m.write(t, r, e, tb.id, epoch, r.IntN(tb.pks/4), tb.pks)
				}
				if r.IntN(2) == 0 {
					for _, w := range e.writers {
						require.NoError(t, w.Seal(epoch))
					}
				}
			}
			e.reopen()
			m.drop()
			newWriters()
			epoch = e.s.EpochFloor()
			counts.reopens++
			what = "reopen"
		}
		m.check(t, e, fmt.Sprintf("step %d (%s)", step, what))
	}
	met := e.s.Metrics()
	t.Logf("%d steps: %d commits, %d spills, %d SINGLEDELs, %d flushes, %d manual compactions, %d reopens; %d live SSTs at the end",
		steps, counts.commits, met.Spills, counts.tombstones, counts.flushes, counts.compactions, counts.reopens, e.s.Stats().Physical.NumFiles())
	require.Positive(t, counts.commits)
}

type storeRandomCounts struct{ commits, tombstones, flushes, compactions, reopens int }

// singleDeleteShadowed writes Pebble SINGLEDELs of up to n random shadowed
// versions of a table (any version but the newest of its pk: every version
// in Pebble is committed, so reads at the committed epoch do not change)
// into Pebble's memtable, as MVCC garbage collection would; flushes and
// compactions then carry them. Each key is written once, so each SINGLEDEL
// meets exactly one SET. Returns the number written.
func (e *storeEnv) singleDeleteShadowed(r *rand.Rand, table uint32, n int) int {
	lo, hi := keys.TableSpan(table)
	it, err := lsminternal.DB(e.s).NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	require.NoError(e.t, err)
	var shadowed [][]byte
	var prev []byte
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		p := k[:keys.Split(k)]
		if prev != nil && string(p) == string(prev) {
			shadowed = append(shadowed, slices.Clone(k))
		}
		prev = append(prev[:0], p...)
	}
	require.NoError(e.t, it.Close())
	r.Shuffle(len(shadowed), func(i, j int) { shadowed[i], shadowed[j] = shadowed[j], shadowed[i] })
	shadowed = shadowed[:min(n, len(shadowed))]
	b := lsminternal.DB(e.s).NewBatch()
	for _, k := range shadowed {
		require.NoError(e.t, b.SingleDelete(k, nil))
	}
	require.NoError(e.t, b.Commit(pebble.Sync))
	return len(shadowed)
}

// storeRandomSpan returns a random compaction span: a whole table, a part of
// one vnode, or everything.
func storeRandomSpan(r *rand.Rand, table uint32) (lo, hi []byte) {
	switch r.IntN(3) {
	case 0:
		return keys.TableSpan(table)
	case 1:
		v := uint16(r.IntN(4))
		a, b := uint64(r.IntN(3000)), uint64(r.IntN(3000))
		if a > b {
			a, b = b, a
		}
		return keys.AppendPrefix(nil, table, v, pk64(a)), keys.AppendPrefix(nil, table, v, pk64(b+1))
	default:
		return []byte{0}, []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF}
	}
}

// storeModel is the committed rows of every table and the rows of the
// epochs not committed yet.
type storeModel struct {
	committed map[uint32]map[uint64]string
	pending   []storePending // by ascending epoch
	// unflushed is set while Pebble's memtable may hold SINGLEDELs: they
	// hide their SETs from iterators but are in no SST yet. (A commit
	// flushes them when its ingestion overlaps, a reopen may replay them:
	// only the flush step clears the flag for sure.)
	unflushed bool
	// gens writes each table's ops; its rows are the writer's view.
	gens map[uint32]*testutil.Churn
}

type storePending struct {
	epoch uint64
	rows  map[uint32]map[uint64]*string // nil: deleted
}

// write applies n random consistent ops to a table at epoch: the table's
// testutil.Churn toggles pks of [0, pks), seeded from r.
func (m *storeModel) write(t *testing.T, r *rand.Rand, e *storeEnv, table uint32, epoch uint64, n, pks int) {
	if len(m.pending) == 0 || m.pending[len(m.pending)-1].epoch != epoch {
		m.pending = append(m.pending, storePending{epoch: epoch, rows: map[uint32]map[uint64]*string{}})
	}
	p := &m.pending[len(m.pending)-1]
	if p.rows[table] == nil {
		p.rows[table] = map[uint64]*string{}
	}
	gen := m.gens[table]
	if gen == nil {
		def, err := e.s.Table(table)
		require.NoError(t, err)
		gen = testutil.NewChurn(r.Uint64(), def.VnodeOf)
		gen.RowLen = 40
		gen.Reset(m.committed[table])
		if m.gens == nil {
			m.gens = map[uint32]*testutil.Churn{}
		}
		m.gens[table] = gen
	}
	ops, err := gen.Toggle(e.writers[table], epoch, n, pks)
	require.NoError(t, err)
	for _, op := range ops {
		if op.Kind == testutil.OpDelete {
			p.rows[table][op.PK] = nil
		} else {
			p.rows[table][op.PK] = &op.Row
		}
	}
}

func (m *storeModel) commit(epoch uint64) {
	for len(m.pending) > 0 && m.pending[0].epoch <= epoch {
		for table, rows := range m.pending[0].rows {
			for pk, row := range rows {
				if row == nil {
					delete(m.committed[table], pk)
				} else {
					m.committed[table][pk] = *row
				}
			}
		}
		m.pending = m.pending[1:]
	}
}

// drop forgets the epochs that were not committed (a reopen dropped them).
func (m *storeModel) drop() {
	m.pending = nil
	for table, gen := range m.gens {
		gen.Reset(m.committed[table])
	}
}

func (m *storeModel) check(t *testing.T, e *storeEnv, step string) {
	e.verify(step)
	st := e.s.Stats()
	for _, def := range e.s.Tables() {
		want := make([]struct{ rows, bytes int64 }, def.VnodeCount)
		for pk, row := range m.committed[def.ID] {
			v := def.VnodeOf(pk64(pk))
			want[v].rows++
			want[v].bytes += int64(8 + len(row))
		}
		raw := e.rawScan(def.ID)
		var puts, deletes uint64
		for v := range def.VnodeCount {
			live := st.Live.Vnode(def.ID, uint16(v))
			require.Equal(t, want[v].rows, live.Rows, "%s: table %d vnode %d: live rows", step, def.ID, v)
			require.Equal(t, want[v].bytes, live.Bytes, "%s: table %d vnode %d: live bytes", step, def.ID, v)
			// Every SINGLEDEL still in an SST hides exactly one SET that is
			// still in one too: the counts exceed what a Pebble iterator
			// sees by the Pebble tombstones.
			phys := st.Physical.Vnode(def.ID, uint16(v))
			rc := raw[uint16(v)]
			require.GreaterOrEqual(t, phys.Puts, rc.puts, "%s: table %d vnode %d: physical puts", step, def.ID, v)
			require.GreaterOrEqual(t, phys.Deletes, rc.deletes, "%s: table %d vnode %d: physical deletes", step, def.ID, v)
			hidden := (phys.Puts - rc.puts) + (phys.Deletes - rc.deletes)
			msg := fmt.Sprintf("%s: table %d vnode %d: physical puts %d, deletes %d, Pebble tombstones %d; an iterator sees %d puts, %d deletes",
				step, def.ID, v, phys.Puts, phys.Deletes, phys.PebbleTombstones, rc.puts, rc.deletes)
			if m.unflushed {
				require.LessOrEqual(t, phys.PebbleTombstones, hidden, msg)
			} else {
				require.Equal(t, phys.PebbleTombstones, hidden, msg)
			}
			require.Equal(t, phys.Puts+phys.Deletes, phys.Entries, "%s: table %d vnode %d", step, def.ID, v)
			require.GreaterOrEqual(t, rc.puts, uint64(live.Rows), "%s: table %d vnode %d: fewer puts than live rows", step, def.ID, v)
			puts += phys.Puts
			deletes += phys.Deletes
		}
		tot := st.Physical.Table(def.ID)
		require.Equal(t, puts, tot.Counts.Puts, "%s: table %d", step, def.ID)
		require.Equal(t, deletes, tot.Counts.Deletes, "%s: table %d", step, def.ID)
		require.Equal(t, tot.Counts.Entries, tot.TotalKeyCount, "%s: table %d", step, def.ID)
		for v, c := range raw {
			require.Contains(t, st.Physical.Vnodes(def.ID), v, "%s: table %d: vnode %d has %d keys", step, def.ID, v, c.puts+c.deletes)
		}
	}
}

// TestCommitStatsCurrentWithMemtable is a regression test: a commit whose
// ingestion overlaps Pebble's memtable (which holds only what was written
// through store.DB(), here a SINGLEDEL as MVCC GC would write) must still
// leave the physical statistics current when Commit returns. Pebble used to
// queue such an ingestion as a flushable, outside the LSM version until a
// flush, so the refresh at the end of Commit missed the checkpoint's SSTs.
// The checkpoints here are ingested (CommitBatchBytes -1): one committed as
// a batch joins the SINGLEDEL in the memtable, and a write through DB()
// counts from its flush on.
func TestCommitStatsCurrentWithMemtable(t *testing.T) {
	o := uncompacted()
	o.CommitBatchBytes = -1
	e := openStore(t, o)
	def := e.createTable(1, 1)
	w := e.writer(1)
	for i := range uint64(10) {
		require.NoError(t, w.Insert(1, 0, pk64(i), []byte("a")))
	}
	e.commit(1)
	require.NoError(t, w.Update(2, 0, pk64(3), []byte("a"), []byte("b")))
	e.commit(2)
	// GC the shadowed version of pk 3 through the memtable.
	old := keys.AppendVersioned(nil, def.ID, 0, pk64(3), keys.MakeVersion(1, 0), keys.KindPut)
	require.NoError(t, lsminternal.DB(e.s).SingleDelete(old, pebble.Sync))
	for i := range uint64(10) {
		require.NoError(t, w.Update(3, 0, pk64(i), []byte(map[bool]string{true: "b", false: "a"}[i == 3]), []byte("c")))
	}
	e.commit(3)
	_, got, want := e.statsFiles()
	require.Equal(t, want, got, "the statistics describe Pebble's live SSTs when Commit returns")
	phys := e.s.Stats().Physical.Vnode(def.ID, 0)
	require.Equal(t, uint64(10+1+10), phys.Puts, "every committed version is counted")
	require.Equal(t, uint64(1), phys.PebbleTombstones)
	e.verify("after the commit")
}
