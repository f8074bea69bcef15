package lsm

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/stats"
	"github.com/stretchr/testify/require"
)

var (
	seedFlag  = flag.Uint64("seed", 0, "seed for randomized tests (0: testutil.DefaultSeed, or time based with -random-seeds)")
	stepsFlag = flag.Int("model-steps", 1500, "steps of TestModel")
)

func testSeed(t testing.TB) uint64 { return testutil.Seed(t, "seed", *seedFlag) }

// modelVersion is one committed version of a pk.
type modelVersion struct {
	epoch uint64
	live  bool
	row   string
}

type modelRow struct {
	live bool
	row  string
}

// model is the in-memory truth the store is checked against.
type model struct {
	history map[uint32]map[uint64][]modelVersion // committed versions, by ascending epoch
	pending []map[uint64][]modelVersion          // per writer: its uncommitted versions
}

func (m *model) at(table uint32, pk uint64, epoch uint64) modelRow {
	var r modelRow
	for _, v := range m.history[table][pk] {
		if v.epoch > epoch {
			break
		}
		r = modelRow{v.live, v.row}
	}
	return r
}

type modelWriter struct {
	table  uint32
	vnodes *roaring.Bitmap
	opts   WriterOptions
	w      *Writer
}

// TestModel drives the store with random ops, spills, seals, commits,
// crashes, reopens and reads, and compares it with a small model after every
// step: rows at random epochs, each writer's view, and the live statistics.
func TestModel(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	open := func() *Store {
		s, err := Open(dir, &Options{MemoryWatermark: int64(2048 + r.IntN(8192)), Logger: QuietLogger(nil)})
		require.NoError(t, err)
		return s
	}
	s := open()
	defer func() { _ = s.Close() }()
	defs := []TableDef{
		{ID: 1, VnodeCount: 8, PK: keys.Schema{keys.Uint64}},
		{ID: 2, VnodeCount: 16, PK: keys.Schema{keys.Uint64}},
	}
	for _, d := range defs {
		require.NoError(t, s.CreateTable(d))
	}
	vn := func(lo, hi uint64) *roaring.Bitmap {
		b := roaring.New()
		b.AddRange(lo, hi)
		return b
	}
	mws := []*modelWriter{
		{table: 1, vnodes: vn(0, 4)},
		{table: 1, vnodes: vn(4, 8), opts: WriterOptions{Unchecked: true}},
		{table: 2, vnodes: vn(0, 16)},
	}
	m := &model{history: map[uint32]map[uint64][]modelVersion{1: {}, 2: {}}}
	newWriters := func() {
		m.pending = make([]map[uint64][]modelVersion, len(mws))
		for i, mw := range mws {
			var err error
			mw.w, err = s.NewWriter(mw.table, mw.vnodes, &mw.opts)
			require.NoError(t, err)
			m.pending[i] = map[uint64][]modelVersion{}
		}
	}
	newWriters()
	epoch := s.EpochFloor() + 1
	var sealedUncommitted, uncheckedCommitted bool

	view := func(i int, pk uint64) modelRow {
		if vs := m.pending[i][pk]; len(vs) > 0 {
			return modelRow{vs[len(vs)-1].live, vs[len(vs)-1].row}
		}
		return m.at(mws[i].table, pk, s.CommittedEpoch())
	}
	record := func(i int, pk uint64, live bool, row string) {
		vs := m.pending[i][pk]
		if n := len(vs); n > 0 && vs[n-1].epoch == epoch {
			vs = vs[:n-1]
		}
		m.pending[i][pk] = append(vs, modelVersion{epoch, live, row})
	}
	// pksOf returns the pks of the domain owned by writer i.
	pksOf := func(i int) []uint64 {
		var out []uint64
		def := defs[mws[i].table-1]
		for pk := uint64(0); pk < 64; pk++ {
			if mws[i].vnodes.Contains(uint32(def.VnodeOf(keys.AppendUint64(nil, pk)))) {
				out = append(out, pk)
			}
		}
		return out
	}
	domains := make([][]uint64, len(mws))
	for i := range mws {
		domains[i] = pksOf(i)
	}

	checkRead := func(at uint64) {
		sn, err := s.Pin(at)
		require.NoError(t, err)
		defer sn.Close()
		for _, d := range defs {
			want := map[uint64]string{}
			for pk := range m.history[d.ID] {
				if r := m.at(d.ID, pk, at); r.live {
					want[pk] = r.row
				}
			}
			got := map[uint64]string{}
			for v := 0; v < d.VnodeCount; v++ {
				it, err := sn.NewIter(d.ID, uint16(v), nil, nil)
				require.NoError(t, err)
				var last []byte
				for ok := it.First(); ok; ok = it.Next() {
					require.True(t, last == nil || string(last) < string(it.PK()), "pk order")
					last = slices.Clone(it.PK())
					pk, _, _ := keys.DecodeUint64(it.PK())
					got[pk] = string(it.Row())
				}
				require.NoError(t, it.Close())
			}
			require.Equal(t, want, got, "table %d at epoch %d (committed %d)", d.ID, at, s.CommittedEpoch())
			pk := uint64(r.IntN(64))
			key := keys.AppendUint64(nil, pk)
			row, ok, err := sn.Get(d.ID, d.VnodeOf(key), key)
			require.NoError(t, err)
			w := m.at(d.ID, pk, at)
			require.Equal(t, w.live, ok, "get table %d pk %d at %d", d.ID, pk, at)
			require.Equal(t, w.row, string(row))
		}
	}
	checkLive := func() {
		l := s.Stats().Live
		for _, d := range defs {
			want := make([]stats.LiveCounts, d.VnodeCount)
			for pk := range m.history[d.ID] {
				if r := m.at(d.ID, pk, s.CommittedEpoch()); r.live {
					v := d.VnodeOf(keys.AppendUint64(nil, pk))
					want[v].Rows++
					want[v].Bytes += int64(8 + len(r.row))
				}
			}
			for v := range want {
				require.Equal(t, want[v], l.Vnode(d.ID, uint16(v)), "live stats of table %d vnode %d", d.ID, v)
			}
		}
		require.Equal(t, uncheckedCommitted, l.ContainsEstimates(1), "table 1 has an unchecked writer")
		require.False(t, l.ContainsEstimates(2))
		if r.IntN(4) == 0 {
			rep, err := s.Verify()
			require.NoError(t, err)
			require.Empty(t, rep.Differences)
		}
	}

	for step := 0; step < *stepsFlag; step++ {
		switch p := r.IntN(100); {
		case p < 70: // a row op
			i := r.IntN(len(mws))
			mw := mws[i]
			def := defs[mw.table-1]
			pk := domains[i][r.IntN(len(domains[i]))]
			key := keys.AppendUint64(nil, pk)
			cur := view(i, pk)
			row := fmt.Sprintf("r%d.%d", epoch, step)
			var err error
			if !mw.opts.Unchecked && r.IntN(20) == 0 {
				// A checked writer refuses an op that contradicts the state.
				if cur.live {
					err = mw.w.Insert(epoch, def.VnodeOf(key), key, []byte(row))
				} else {
					err = mw.w.Delete(epoch, def.VnodeOf(key), key, []byte("x"))
				}
				require.True(t, errors.Is(err, ErrInconsistentOp), "%v", err)
				continue
			}
			switch {
			case !cur.live:
				err = mw.w.Insert(epoch, def.VnodeOf(key), key, []byte(row))
				record(i, pk, true, row)
			case r.IntN(2) == 0:
				err = mw.w.Delete(epoch, def.VnodeOf(key), key, []byte(cur.row))
				record(i, pk, false, "")
			default:
				err = mw.w.Update(epoch, def.VnodeOf(key), key, []byte(cur.row), []byte(row))
				record(i, pk, true, row)
			}
			require.NoError(t, err)
			if r.IntN(10) == 0 {
				got, ok, err := mw.w.Get(def.VnodeOf(key), key)
				require.NoError(t, err)
				want := view(i, pk)
				require.Equal(t, want.live, ok)
				require.Equal(t, want.row, string(got))
			}
		case p < 74:
			_, err := s.spillAll()
			require.NoError(t, err)
		case p < 88: // a barrier: seal everywhere, commit if checkpoint
			for _, mw := range mws {
				require.NoError(t, mw.w.Seal(epoch))
			}
			sealedUncommitted = true
			if r.IntN(3) > 0 {
				require.NoError(t, s.Commit(epoch))
				for i, mw := range mws {
					if mw.opts.Unchecked && len(m.pending[i]) > 0 {
						uncheckedCommitted = true
					}
					for pk, vs := range m.pending[i] {
						h := m.history[mw.table]
						h[pk] = append(h[pk], vs...)
					}
					m.pending[i] = map[uint64][]modelVersion{}
				}
				sealedUncommitted = false
				checkLive()
			}
			epoch++
		case p < 91: // crash or clean reopen: uncommitted work is lost
			if r.IntN(2) == 0 {
				crashForTest(s)
			} else {
				require.NoError(t, s.Close())
			}
			s = open()
			require.LessOrEqual(t, s.CommittedEpoch(), epoch)
			newWriters()
			epoch = s.EpochFloor() + 1
			sealedUncommitted = false
			checkRead(s.CommittedEpoch())
			checkLive()
		case p < 93: // recount the unchecked table: exact counts, flag cleared
			before, after, err := s.RecomputeLiveStats(1)
			require.NoError(t, err)
			require.Equal(t, before, after, "the ops were consistent: the counts were exact")
			uncheckedCommitted = false
			checkLive()
		default:
			committed := s.CommittedEpoch()
			checkRead(uint64(r.Int64N(int64(committed) + 1)))
		}
	}
	_ = sealedUncommitted
}
