package stats

import (
	"bytes"
	"flag"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

var liveSeed = flag.Uint64("live-seed", 0, "seed for TestLiveRandom (0: time based)")

// liveModel is the truth: the live pks of each vnode with their bytes.
type liveModel map[uint16]map[string]int64

func (m liveModel) count(vnode uint16, lo, hi []byte) LiveCounts {
	var c LiveCounts
	for pk, b := range m[vnode] {
		if (lo == nil || pk >= string(lo)) && (hi == nil || pk < string(hi)) {
			c.Rows++
			c.Bytes += b
		}
	}
	return c
}

// split plays the store's part: scan the model for the bucket's rows.
func (m liveModel) split(r SplitRequest) []Piece {
	var pks []string
	for pk := range m[r.Vnode] {
		if (r.Lower == nil || pk >= string(r.Lower)) && (r.Upper == nil || pk < string(r.Upper)) {
			pks = append(pks, pk)
		}
	}
	sort.Strings(pks)
	pieces := []Piece{{Lower: r.Lower}}
	for _, pk := range pks {
		if pieces[len(pieces)-1].Rows >= r.Target {
			pieces = append(pieces, Piece{Lower: []byte(pk)})
		}
		p := &pieces[len(pieces)-1]
		p.Rows++
		p.Bytes += m[r.Vnode][pk]
	}
	return pieces
}

// TestLiveRandom applies random commits of inserts, updates and deletes,
// splits oversized buckets like the store does, and checks after each commit
// that every count is exact, every EstimateRows bound contains the truth,
// bounds stay within 2 buckets, and a reload from the persisted entries
// reproduces the state.
func TestLiveRandom(t *testing.T) {
	seed := *liveSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed: %d (rerun with -live-seed=%d)", seed, seed)
	r := rand.New(rand.NewPCG(seed, 3))
	const table, vnodes = 7, 4
	s := NewLiveState()
	s.AddTable(table, vnodes)
	m := liveModel{}
	persisted := map[string][]byte{}
	for commit := 0; commit < 60; commit++ {
		b := s.Begin()
		type op struct {
			vnode uint16
			pk    []byte
			d     LiveCounts
			live  bool
		}
		var ops []op
		for range r.IntN(400) {
			v := uint16(r.IntN(vnodes))
			pk := keys.AppendUint64(nil, uint64(r.IntN(5000)))
			if m[v] == nil {
				m[v] = map[string]int64{}
			}
			old, live := m[v][string(pk)]
			switch {
			case !live && r.IntN(4) > 0 || !live && commit < 5:
				nb := int64(8 + r.IntN(50))
				m[v][string(pk)] = nb
				ops = append(ops, op{v, pk, LiveCounts{1, nb}, true})
			case live && r.IntN(2) == 0:
				delete(m[v], string(pk))
				ops = append(ops, op{v, pk, LiveCounts{-1, -old}, false})
			case live:
				nb := int64(8 + r.IntN(50))
				m[v][string(pk)] = nb
				ops = append(ops, op{v, pk, LiveCounts{0, nb - old}, true})
			}
		}
		// Commits feed deltas in key order, but any order must work.
		if r.IntN(2) == 0 {
			slices.SortFunc(ops, func(a, b op) int {
				if a.vnode != b.vnode {
					return int(a.vnode) - int(b.vnode)
				}
				return bytes.Compare(a.pk, b.pk)
			})
		}
		for _, o := range ops {
			require.NoError(t, b.Apply(table, o.vnode, o.pk, o.d, o.live))
		}
		b.Normalize()
		for _, e := range b.MetaEntries() {
			if e.Delete {
				delete(persisted, string(e.Key))
			} else {
				persisted[string(e.Key)] = e.Value
			}
		}
		b.Publish()
		for _, req := range b.Oversized() {
			require.NoError(t, s.ApplySplit(req, m.split(req)))
		}
		l := s.Current()
		for v := uint16(0); v < vnodes; v++ {
			require.Equal(t, m.count(v, nil, nil), l.Vnode(table, v), "vnode %d", v)
			total := l.Vnode(table, v).Rows
			for range 50 {
				lo := keys.AppendUint64(nil, uint64(r.IntN(5000)))
				hi := keys.AppendUint64(nil, uint64(r.IntN(5000)))
				if bytes.Compare(lo, hi) > 0 {
					lo, hi = hi, lo
				}
				if r.IntN(4) == 0 {
					lo = nil
				}
				truth := m.count(v, lo, hi).Rows
				est := l.EstimateRows(table, v, lo, hi)
				require.LessOrEqual(t, est.Lower, truth, "vnode %d [%x, %x)", v, lo, hi)
				require.GreaterOrEqual(t, est.Upper, truth, "vnode %d [%x, %x)", v, lo, hi)
				require.LessOrEqual(t, float64(est.Lower), est.Rows)
				require.GreaterOrEqual(t, float64(est.Upper), est.Rows)
				require.LessOrEqual(t, est.Upper-est.Lower, 2*splitLimit(total), "bounds wider than two buckets")
			}
		}
		// Reload from what was persisted (the dirty set of the splits is
		// persisted with the next commit, so compare before splits only
		// when nothing is dirty).
		if len(s.dirty) == 0 {
			re := NewLiveState()
			re.AddTable(table, vnodes)
			var ks []string
			for k := range persisted {
				ks = append(ks, k)
			}
			sort.Strings(ks)
			for _, k := range ks {
				require.NoError(t, re.Load([]byte(k), persisted[k]))
			}
			for v := uint16(0); v < vnodes; v++ {
				require.Equal(t, l.Vnode(table, v), re.Current().Vnode(table, v))
				require.Equal(t, l.Buckets(table, v), re.Current().Buckets(table, v))
			}
		}
	}
	l := s.Current()
	t.Logf("buckets: %d for %d rows", l.BucketCount(), l.Table(table).Rows)
	require.Greater(t, l.Buckets(table, 0), 1, "buckets must split")
}

func TestLivePartition(t *testing.T) {
	const table, vnodes = 3, 8
	s := NewLiveState()
	s.AddTable(table, vnodes)
	m := liveModel{}
	b := s.Begin()
	for v := uint16(0); v < vnodes; v++ {
		m[v] = map[string]int64{}
		for i := range 500 * (int(v) + 1) {
			pk := keys.AppendUint64(nil, uint64(i))
			m[v][string(pk)] = 10
			require.NoError(t, b.Apply(table, v, pk, LiveCounts{1, 10}, true))
		}
	}
	b.Normalize()
	b.Publish()
	for _, req := range b.Oversized() {
		require.NoError(t, s.ApplySplit(req, m.split(req)))
	}
	all := roaring.New()
	all.AddRange(0, vnodes)
	l := s.Current()
	for _, n := range []int{1, 3, 7, 16} {
		parts := l.Partition(table, all, n)
		require.Len(t, parts, n)
		var sum int64
		ideal := float64(l.Table(table).Rows) / float64(n)
		for _, p := range parts {
			// The rows a part claims are exactly the rows in its range.
			var truth int64
			for v := p.StartVnode; v <= p.EndVnode; v++ {
				var lo, hi []byte
				if v == p.StartVnode {
					lo = p.StartPK
				}
				if v == p.EndVnode {
					hi = p.EndPK
				}
				truth += m.count(v, lo, hi).Rows
			}
			require.Equal(t, truth, p.Rows, "%+v", p)
			require.InDelta(t, ideal, float64(p.Rows), float64(2*splitLimit(4000)), "n=%d %+v", n, p)
			sum += p.Rows
		}
		require.Equal(t, l.Table(table).Rows, sum)
	}
}

func TestLiveLoadRejectsCorrupt(t *testing.T) {
	s := NewLiveState()
	s.AddTable(1, 4)
	for _, kv := range [][2][]byte{
		{keys.MetaKey([]byte("live/")), nil},
		{BucketKey(1, 9, nil, true), []byte{2, 2, 0, 0}},  // vnode out of range
		{BucketKey(1, 0, nil, true), []byte{2}},           // truncated
		{BucketKey(1, 0, nil, true), []byte{2, 2, 50, 1}}, // hint longer than value
		{BucketKey(2, 0, nil, true), []byte{2, 2, 0, 0}},  // unknown table
		{keys.MetaKey([]byte("live_est/\x00\x00")), {1}},  // short table id
	} {
		require.ErrorIs(t, s.Load(kv[0], kv[1]), ErrCorruptLive, "%x", kv[0])
	}
}
