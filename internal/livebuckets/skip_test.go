package livebuckets

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/stretchr/testify/require"
)

// TestQuerySkip: on vnodes whose pks share a long prefix (8 to 20 bytes,
// then suffixes of 0 to 12 bytes rich in zero bytes), a query by the keys
// past the shared prefix (a sealed vnode's query view) answers as the
// vnode's own keys do (the same vnode before it is sealed, which sums its
// buckets): the same bounds, and a Mean within what the keys' rounding can
// move it (a 2⁻⁷ of a bucket). Queries at live pks, at other pks with the
// prefix, at proper prefixes of it, below and above it, and unbounded;
// the bounds hold the truth.
func TestQuerySkip(t *testing.T) {
	seed := testutil.Seed(t, "live-seed", *liveSeed)
	r := rand.New(rand.NewPCG(seed, 9))
	const table, vnodes = 5, 6
	prefixes := make([][]byte, vnodes)
	for v := range prefixes {
		prefixes[v] = make([]byte, 8+r.IntN(13))
		for i := range prefixes[v] {
			prefixes[v][i] = byte(1 + r.IntN(3))
		}
	}
	suffix := func() []byte {
		if r.IntN(3) == 0 {
			// Suffixes that share 7 more bytes: keys past the shared
			// prefix less than 2⁸ apart.
			b := []byte{0x7f, 0, 0, 0, 0, 0, byte(r.IntN(2))}
			for range 1 + r.IntN(4) {
				b = append(b, byte(r.IntN(256)))
			}
			return b
		}
		b := make([]byte, r.IntN(13))
		for i := range b {
			b[i] = []byte{0, 0, 1, 0x7f, 0xff, byte(r.IntN(256))}[r.IntN(6)]
		}
		return b
	}
	pkOf := func(v uint16) []byte { return append(slices.Clone(prefixes[v]), suffix()...) }
	s := NewState()
	s.AddTable(table, vnodes)
	m := liveModel{}
	var skipped, queries int
	for commit := range 40 {
		b := s.Begin()
		for range r.IntN(300) {
			v := uint16(r.IntN(vnodes))
			if m[v] == nil {
				m[v] = map[string]int64{}
			}
			pk := pkOf(v)
			if rows := m.rows(v, nil, nil); len(rows) > 0 && r.IntN(3) == 0 {
				pk = []byte(rows[r.IntN(len(rows))])
			}
			d := Delta{Table: table, Vnode: v, PK: pk}
			if old, live := m[v][string(pk)]; live && (r.IntN(2) == 0 || commit > 30) {
				delete(m[v], string(pk))
				d.Counts = Counts{-1, -old}
			} else if !live {
				m[v][string(pk)] = 10
				d.Counts, d.Live = Counts{1, 10}, true
			} else {
				continue
			}
			require.NoError(t, b.Apply(d))
		}
		b.Normalize()
		b.Publish()
		for _, req := range b.Rescans() {
			require.NoError(t, s.ApplyRescans([]ScannedBucket{m.split(req)}))
		}
		l := s.Current()
		for v := uint16(0); v < vnodes; v++ {
			sealed := l.table(table).vnode(v)
			if sealed == emptyVnode {
				continue
			}
			requireIndexed(t, sealed)
			if sealed.q.skip > 0 {
				skipped++
			}
			// The same vnode before sealing: the vnode's own keys.
			unsealed := *sealed
			unsealed.cum, unsealed.q = nil, unsealed.fullView()
			own := &liveTable{vnodes: make([]*liveVnode, vnodes)}
			own.vnodes[v] = &unsealed
			var widest int64
			for _, bk := range sealed.buckets {
				widest = max(widest, bk.Rows)
			}
			rows := m.rows(v, nil, nil)
			at := func() []byte {
				p := prefixes[v]
				switch r.IntN(7) {
				case 0:
					if len(rows) > 0 {
						return []byte(rows[r.IntN(len(rows))])
					}
				case 1:
					return p[:r.IntN(len(p))] // a proper prefix: below
				case 2:
					q := slices.Clone(p)
					q[r.IntN(len(q))]-- // below
					return append(q, suffix()...)
				case 3:
					q := slices.Clone(p)
					q[r.IntN(len(q))]++ // above
					return append(q, suffix()...)
				case 4:
					return nil
				}
				return pkOf(v)
			}
			for range 40 {
				q := RangeQuery{Vnode: v, Lo: at(), Hi: at(), HiInclusive: r.IntN(2) == 0}
				if q.Lo != nil && q.Hi != nil && bytes.Compare(q.Lo, q.Hi) > 0 {
					q.Lo, q.Hi = q.Hi, q.Lo
				}
				var a, o [1]RowEstimate
				var ps [2]probe
				got := estimate(l.table(table), []RangeQuery{q}, ps[:], a[:0])[0]
				want := estimate(own, []RangeQuery{q}, ps[:], o[:0])[0]
				require.Equal(t, want.Lower, got.Lower, "commit %d vnode %d skip %d query %x..%x", commit, v, sealed.q.skip, q.Lo, q.Hi)
				require.Equal(t, want.Upper, got.Upper, "commit %d vnode %d skip %d query %x..%x", commit, v, sealed.q.skip, q.Lo, q.Hi)
				require.InDelta(t, want.Mean, got.Mean, 2*float64(widest)/128+1e-9, "commit %d vnode %d skip %d query %x..%x", commit, v, sealed.q.skip, q.Lo, q.Hi)
				hi := q.Hi
				if q.HiInclusive && hi != nil {
					hi = append(slices.Clone(hi), 0) // the next pk
				}
				truth := m.count(v, q.Lo, hi).Rows
				require.LessOrEqual(t, got.Lower, truth)
				require.GreaterOrEqual(t, got.Upper, truth)
				require.False(t, math.IsNaN(got.Mean))
				queries++
			}
		}
	}
	t.Logf("%d queries; %d vnode checks with a query skip", queries, skipped)
	require.Greater(t, skipped, 100, "vnodes queried past a shared prefix")
}
