package stats_test

// Helpers of the store-level tests of package stats: they drive a real
// lsm.Store (Pebble in t.TempDir()) and compare its statistics with truths
// computed without the statistics code (an in-memory model, a scan, or a raw
// count of Pebble's keys).

import (
	"context"
	"flag"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/lsminternal"
	"github.com/lsmstats/lsmstats/internal/ssttracker"
	"github.com/lsmstats/lsmstats/internal/statsinternal"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// The flag names carry a "stats-" prefix: this test binary also holds the
// internal tests of package stats, which register -seed and -live-seed.
var (
	storeSeedFlag = flag.Uint64("stats-seed", 0, "seed for the store-level randomized tests of package stats (0: time based)")
	largeFlag     = flag.Bool("stats-large", false, "also run the 100k-rows-per-vnode EstimateRows accuracy case")
)

func storeSeed(t testing.TB) uint64 {
	return testutil.Seed(t, "stats-seed", *storeSeedFlag)
}

// storeEnv is a real store in a temporary directory.
type storeEnv struct {
	t    testing.TB
	dir  string
	opts lsm.Options
	s    *lsm.Store
	// writers, one per table, own every vnode of their table.
	writers map[uint32]*lsm.Writer
}

// uncompacted returns store options that keep every checkpoint's SSTs
// apart: no automatic compactions, and no commit stall on L0 depth (which
// would wait for compactions that never come).
func uncompacted() lsm.Options {
	return lsm.Options{
		MemoryWatermark: -1,
		L0StopSublevels: -1,
		Logger:          lsm.QuietLogger(io.Discard),
		Pebble: func(o *pebble.Options) {
			o.DisableAutomaticCompactions = true
			o.L0CompactionThreshold = math.MaxInt32
			o.L0StopWritesThreshold = math.MaxInt32
		},
	}
}

func openStore(t testing.TB, opts lsm.Options) *storeEnv {
	e := &storeEnv{t: t, dir: t.TempDir(), opts: opts, writers: map[uint32]*lsm.Writer{}}
	e.open()
	t.Cleanup(func() {
		if e.s != nil {
			_ = e.s.Close()
			e.s = nil
		}
	})
	return e
}

func (e *storeEnv) open() {
	s, err := lsm.Open(e.dir, &e.opts)
	require.NoError(e.t, err)
	e.s = s
	clear(e.writers)
}

// reopen closes the store (discarding uncommitted data) and opens it again.
func (e *storeEnv) reopen() {
	require.NoError(e.t, e.s.Close())
	e.s = nil
	e.open()
}

func (e *storeEnv) createTable(id uint32, vnodes int) lsm.TableDef {
	require.NoError(e.t, e.s.CreateTable(lsm.TableDef{ID: id, VnodeCount: vnodes, PK: keys.Schema{keys.Uint64}}))
	def, err := e.s.Table(id)
	require.NoError(e.t, err)
	return def
}

func (e *storeEnv) writer(table uint32) *lsm.Writer {
	if w, ok := e.writers[table]; ok {
		return w
	}
	w, err := e.s.NewWriter(table, nil, nil)
	require.NoError(e.t, err)
	e.writers[table] = w
	return w
}

// commit seals epoch for every writer and commits it.
func (e *storeEnv) commit(epoch uint64) {
	for _, w := range e.writers {
		require.NoError(e.t, w.Seal(epoch))
	}
	require.NoError(e.t, e.s.Commit(epoch))
}

// compact runs a manual Pebble compaction of everything and waits until the
// tracker has seen its result.
func (e *storeEnv) compact() {
	require.NoError(e.t, lsminternal.DB(e.s).Compact(context.Background(), []byte{0}, []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF}, false))
	e.waitStats()
}

// flush flushes Pebble's memtable (the store ingests every checkpoint, so it
// holds only what was written to Pebble directly) and waits for the tracker.
func (e *storeEnv) flush() {
	require.NoError(e.t, lsminternal.DB(e.s).Flush())
	e.waitStats()
}

// waitStats waits until the physical statistics describe Pebble's current
// set of live SSTs: the tracker follows flushes, compactions and the
// metadata-only ingestions of CreateTable in the background.
func (e *storeEnv) waitStats() *ssttracker.Version {
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, got, want := e.statsFiles()
		if slices.Equal(got, want) {
			return v
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("statistics still describe files %v, Pebble has %v", got, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// statsFiles returns the current physical statistics, the file numbers they
// describe and those of Pebble's live SSTs.
func (e *storeEnv) statsFiles() (v *ssttracker.Version, got, want []uint64) {
	v = statsinternal.VersionOf(e.s.Stats().Physical)
	levels, err := lsminternal.DB(e.s).SSTables()
	require.NoError(e.t, err)
	for _, l := range levels {
		for _, f := range l {
			want = append(want, uint64(f.FileNum))
		}
	}
	slices.Sort(want)
	for _, f := range ssttracker.Files(v) {
		got = append(got, f.FileNum)
	}
	return v, got, want
}

// verify runs the store's Verify and fails on any difference.
func (e *storeEnv) verify(step string) lsm.VerifyReport {
	rep, err := e.s.Verify()
	require.NoError(e.t, err, step)
	require.True(e.t, rep.OK(), "%s: Verify found differences:\n%v", step, rep.Differences)
	return rep
}

func pk64(v uint64) []byte { return keys.AppendUint64(nil, v) }

func pkNum(pk []byte) uint64 {
	v, _, err := keys.DecodeUint64(pk)
	if err != nil {
		panic(err)
	}
	return v
}

// rawCounts counts a table's readable Pebble keys per vnode, by MVCC kind:
// the physical truth, computed without the collector.
type rawCounts struct {
	puts, deletes uint64
}

func (e *storeEnv) rawScan(table uint32) map[uint16]rawCounts {
	lo, hi := keys.TableSpan(table)
	// A Pebble iterator hides the tombstones and what they delete: the scan
	// sees the SETs that are still readable. The physical counts hold the
	// deleted ones too until a compaction drops them with their tombstones.
	it, err := lsminternal.DB(e.s).NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	require.NoError(e.t, err)
	defer func() { require.NoError(e.t, it.Close()) }()
	out := map[uint16]rawCounts{}
	for valid := it.First(); valid; valid = it.Next() {
		k, err := keys.Decode(it.Key())
		require.NoError(e.t, err)
		c := out[k.Vnode]
		if k.Kind == keys.KindPut {
			c.puts++
		} else {
			c.deletes++
		}
		out[k.Vnode] = c
	}
	require.NoError(e.t, it.Error())
	return out
}

// fenwick counts live pks of one vnode by position in the sorted list of
// every pk the vnode ever held.
type fenwick []int64

func (f fenwick) add(i int, d int64) {
	for i++; i < len(f); i += i & -i {
		f[i] += d
	}
}

// prefix returns the sum over positions < i.
func (f fenwick) prefix(i int) int64 {
	var s int64
	for ; i > 0; i -= i & -i {
		s += f[i]
	}
	return s
}

// vnodeModel is the exact live state of one vnode over a fixed universe of
// pks (sorted): which are live, and their rows.
type vnodeModel struct {
	pks  []uint64
	live []bool
	rows [][]byte
	bit  fenwick
	n    int64
}

func newVnodeModel(pks []uint64) *vnodeModel {
	slices.Sort(pks)
	return &vnodeModel{pks: pks, live: make([]bool, len(pks)), rows: make([][]byte, len(pks)), bit: make(fenwick, len(pks)+1)}
}

func (m *vnodeModel) set(i int, live bool, row []byte) {
	if m.live[i] != live {
		d := int64(1)
		if !live {
			d = -1
		}
		m.bit.add(i, d)
		m.n += d
	}
	m.live[i], m.rows[i] = live, row
}

// below returns the live rows with pk < x (x nil: none).
func (m *vnodeModel) below(x []byte) int64 {
	if x == nil {
		return 0
	}
	v := pkNum(x)
	i, _ := slices.BinarySearch(m.pks, v)
	return m.bit.prefix(i)
}

// count returns the live rows with lo <= pk < hi (nil: unbounded).
func (m *vnodeModel) count(lo, hi []byte) int64 {
	upTo := m.n
	if hi != nil {
		upTo = m.below(hi)
	}
	return max(0, upTo-m.below(lo))
}

// percentile returns the p-th percentile (0..100) of xs (sorted here).
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	i := int(math.Ceil(p/100*float64(len(xs)))) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

func randRow(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(r.IntN(26))
	}
	return b
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }
