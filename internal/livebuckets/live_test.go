package livebuckets

import (
	"bytes"
	"cmp"
	"flag"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"unsafe"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/lsmstats/lsmstats"
	"github.com/lsmstats/lsmstats/internal/pkpos"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

var liveSeed = flag.Uint64("live-seed", 0, "seed for TestLiveRandom (0: time based)")

// liveModel is the truth: the live pks of each vnode with their bytes.
type liveModel map[uint16]map[string]int64

func (m liveModel) count(vnode uint16, lo, hi []byte) Counts {
	var c Counts
	for pk, b := range m[vnode] {
		if (lo == nil || pk >= string(lo)) && (hi == nil || pk < string(hi)) {
			c.Rows++
			c.Bytes += b
		}
	}
	return c
}

// rows returns the sorted live pks of a vnode in [lo, hi) (nil unbounded).
func (m liveModel) rows(vnode uint16, lo, hi []byte) []string {
	var pks []string
	for pk := range m[vnode] {
		if (lo == nil || pk >= string(lo)) && (hi == nil || pk < string(hi)) {
			pks = append(pks, pk)
		}
	}
	sort.Strings(pks)
	return pks
}

// split plays the store's part: scan the model for the bucket's rows.
func (m liveModel) split(r Rescan) ScannedBucket {
	sc := NewBucketScan(r)
	for _, pk := range m.rows(r.Vnode, r.Lower, r.Upper) {
		sc.Add([]byte(pk), m[r.Vnode][pk])
	}
	return sc.Finish()
}

// recount plays the store's part in a recount: scan the model's vnode.
func (m liveModel) recount(vnode uint16, bounds [][]byte) VnodeRecount {
	sc := NewVnodeScan(bounds)
	for _, pk := range m.rows(vnode, nil, nil) {
		sc.Add([]byte(pk), m[vnode][pk])
	}
	return sc.Recount()
}

// TestLiveRandom applies random commits of inserts, updates and deletes,
// splits oversized buckets like the store does, and checks after each commit
// that every count is exact, every EstimateRows bound contains the truth,
// bounds stay within 2 buckets, and a reload from the persisted entries
// reproduces the state.
func TestLiveRandom(t *testing.T) {
	seed := testutil.Seed(t, "live-seed", *liveSeed)
	r := rand.New(rand.NewPCG(seed, 3))
	const table, vnodes = 7, 4
	s := NewState()
	s.AddTable(table, vnodes)
	m := liveModel{}
	persisted := map[string][]byte{}
	var notLive, unknown int // NotLive's answers on pks that are not live
	// Commits after which log rows were persisted, commits that deleted log rows, reloads.
	var logged, folds, lastLogs, reloads int
	for commit := 0; commit < 60; commit++ {
		b := s.Begin()
		type op struct {
			vnode uint16
			pk    []byte
			d     Counts
		}
		var ops []op
		for range r.IntN(400) {
			v := uint16(r.IntN(vnodes))
			pk := livePK(r.IntN(5000))
			if m[v] == nil {
				m[v] = map[string]int64{}
			}
			old, live := m[v][string(pk)]
			switch {
			case !live && r.IntN(4) > 0 || !live && commit < 5:
				nb := int64(8 + r.IntN(50))
				m[v][string(pk)] = nb
				ops = append(ops, op{v, pk, Counts{1, nb}})
			case live && r.IntN(2) == 0:
				delete(m[v], string(pk))
				ops = append(ops, op{v, pk, Counts{-1, -old}})
			case live:
				nb := int64(8 + r.IntN(50))
				m[v][string(pk)] = nb
				ops = append(ops, op{v, pk, Counts{0, nb - old}})
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
			// live is the row's state once the commit lands, whatever
			// this op did.
			_, live := m[o.vnode][string(o.pk)]
			require.NoError(t, b.Apply(Delta{Table: table, Vnode: o.vnode, PK: o.pk, Counts: o.d, Live: live}))
		}
		b.Normalize()
		entries := b.MetaEntries(uint64(commit + 1))
		for i, e := range entries {
			// An SST takes them as they come: strictly in key order.
			require.True(t, i == 0 || bytes.Compare(entries[i-1].Key, e.Key) < 0, "entry %d %x after %x", i, e.Key, entries[max(i-1, 0)].Key)
			if e.Delete {
				delete(persisted, string(e.Key))
			} else {
				persisted[string(e.Key)] = e.Value
			}
		}
		b.Publish()
		for v := uint16(0); v < vnodes; v++ {
			requireIndexed(t, s.Current().table(table).vnode(v))
		}
		for _, req := range b.Rescans() {
			require.NoError(t, s.ApplyRescans([]ScannedBucket{m.split(req)}))
		}
		l := s.Current()
		for v := uint16(0); v < vnodes; v++ {
			require.Equal(t, m.count(v, nil, nil), l.Vnode(table, v), "vnode %d", v)
			total := l.Vnode(table, v).Rows
			requireIndexed(t, l.table(table).vnode(v))
			var qs []RangeQuery
			for range 50 {
				lo, hi := livePK(r.IntN(5000)), livePK(r.IntN(5000))
				if bytes.Compare(lo, hi) > 0 {
					lo, hi = hi, lo
				}
				switch r.IntN(8) {
				case 0, 1:
					lo = nil
				case 2:
					hi = nil
				case 3:
					lo = slices.Clone(hi) // an empty range
				}
				qs = append(qs, RangeQuery{Vnode: v, Lo: lo, Hi: hi})
				truth := m.count(v, lo, hi).Rows
				est := l.EstimateRows(table, v, lo, hi)
				require.LessOrEqual(t, est.Lower, truth, "vnode %d [%x, %x)", v, lo, hi)
				require.GreaterOrEqual(t, est.Upper, truth, "vnode %d [%x, %x)", v, lo, hi)
				require.LessOrEqual(t, float64(est.Lower), est.Rows)
				require.GreaterOrEqual(t, float64(est.Upper), est.Rows)
				require.LessOrEqual(t, est.Upper-est.Lower, 2*splitLimit(total, l.Table(table).Rows, TableBucketBudget), "bounds wider than two buckets")
			}
			// NotLive never says so of a live row, and says so of most
			// pks that are not live in a vnode of few buckets' rows.
			for range 50 {
				pk := livePK(r.IntN(6000))
				_, live := m[v][string(pk)]
				if l.NotLive(table, v, pk) {
					require.False(t, live, "NotLive of a live pk %x in vnode %d", pk, v)
					notLive++
				} else if !live {
					unknown++
				}
			}
			// Answered together, in lockstep, the queries get the same
			// answers.
			all := l.AppendEstimates(nil, table, qs)
			require.Len(t, all, len(qs))
			for i, q := range qs {
				require.Equal(t, l.EstimateRows(table, q.Vnode, q.Lo, q.Hi), all[i], "query %d", i)
			}
		}
		// Reload from what was persisted (the dirty set of the splits is
		// persisted with the next commit, so compare before splits only
		// when nothing is dirty).
		if len(s.logs) > 0 {
			logged++
		}
		if len(s.logs) < lastLogs {
			folds++
		}
		lastLogs = len(s.logs)
		if len(s.pending) == 0 {
			reloads++
			re := NewState()
			re.AddTable(table, vnodes)
			var ks []string
			for k := range persisted {
				ks = append(ks, k)
			}
			sort.Strings(ks)
			for _, k := range ks {
				require.NoError(t, re.Load([]byte(k), persisted[k]))
			}
			// Until FinishLoad builds the index, queries sum the
			// buckets; they must answer the same.
			var probes []RangeQuery
			for v := uint16(0); v < vnodes; v++ {
				for range 10 {
					probes = append(probes, RangeQuery{Vnode: v, Lo: livePK(r.IntN(5000)), Hi: livePK(r.IntN(5000))})
				}
			}
			loading := re.Current().AppendEstimates(nil, table, probes)
			re.FinishLoad()
			require.Equal(t, loading, re.Current().AppendEstimates(nil, table, probes), "estimates before and after FinishLoad")
			for v := uint16(0); v < vnodes; v++ {
				require.Equal(t, l.Vnode(table, v), re.Current().Vnode(table, v))
				require.Equal(t, Detail(l, table, v), Detail(re.Current(), table, v))
				// The calibrations too, exactly: the log carries the
				// changes of the position sums in units of their grid.
				was, now := l.table(table).vnode(v), re.Current().table(table).vnode(v)
				for i := range was.buckets {
					require.Equal(t, was.buckets[i].calibrated, now.buckets[i].calibrated, "vnode %d bucket %d", v, i)
					require.Equal(t, was.buckets[i].sumPos, now.buckets[i].sumPos, "vnode %d bucket %d", v, i)
				}
				if lv := re.Current().table(table).vnodes[v]; lv != nil {
					requireIndexed(t, lv)
					require.Equal(t, len(lv.buckets), cap(lv.buckets), "no slack after FinishLoad")
				}
			}
		}
	}
	l := s.Current()
	t.Logf("buckets: %d for %d rows; NotLive proved %d of %d pks that were not live", l.BucketCount(), l.Table(table).Rows, notLive, notLive+unknown)
	require.Positive(t, notLive, "NotLive's answers")
	t.Logf("%d reloads; log rows persisted after %d commits, folded %d times", reloads, logged, folds)
	require.Positive(t, logged)
	require.Positive(t, folds)
	require.Positive(t, reloads)
	require.Greater(t, len(Detail(l, table, 0).Buckets), 1, "buckets must split")
}

// livePK returns the pk of TestLiveRandom's row n, in one of three shapes
// that exercise both ways of the bucket index: keys wide apart in their
// first six bytes (searched and interpolated by their 8-byte keys alone),
// keys differing only in their last bytes (interpolated on their bytes), and
// 16-byte keys that all share their first 8 bytes with the 8-byte key of
// row 2500 (searched by their bytes).
func livePK(n int) []byte {
	switch n % 3 {
	case 0:
		return keys.AppendUint64(nil, uint64(n)<<40)
	case 1:
		return keys.AppendUint64(nil, uint64(n))
	default:
		return keys.AppendUint64(keys.AppendUint64(nil, 2500), uint64(n))
	}
}

// requireIndexed checks a published vnode's index against its buckets.
func requireIndexed(t *testing.T, v *liveVnode) {
	t.Helper()
	require.Len(t, v.keys, len(v.buckets))
	require.Len(t, v.cum, len(v.buckets)+1)
	var sum int64
	for i, b := range v.buckets {
		require.Equal(t, key8(b.lower()), v.keys[i], "key of bucket %d", i)
		before, rows, aux := v.rows(i)
		require.Equal(t, sum, before, "rows before bucket %d", i)
		require.Equal(t, b.Rows, rows, "rows of bucket %d", i)
		require.Equal(t, v.aux(i, int(v.q.skip)), aux, "aux of bucket %d", i)
		sum += b.Rows
	}
	require.Equal(t, sum, int64(v.cum[len(v.buckets)])>>auxBits)
	require.Equal(t, key8(v.minPK), v.minKey)
	require.Equal(t, key8(v.maxPK), v.maxKey)
	// The query view: keys past the bytes that the anchors and every
	// bound share, or the vnode's own keys.
	skip := int(v.q.skip)
	require.Equal(t, querySkipOf(v), skip)
	require.Len(t, v.q.keys, len(v.buckets))
	for i, b := range v.buckets[1:] {
		require.Equal(t, key8(b.lower()[skip:]), v.q.keys[i+1], "query key of bucket %d", i+1)
	}
	if skip > 0 {
		require.Equal(t, key8(v.minPK[skip:]), v.q.minKey)
		require.Equal(t, key8(v.maxPK[skip:]), v.q.maxKey)
	}
}

// querySkipOf is querySkip the slow way: the longest prefix, of at least
// 8 bytes, of minPK that maxPK and every bucket bound start with.
func querySkipOf(v *liveVnode) int {
	if v.minPK == nil || v.maxPK == nil {
		return 0
	}
	for n := len(v.minPK); n >= 8; n-- {
		ok := bytes.HasPrefix(v.maxPK, v.minPK[:n])
		for _, b := range v.buckets[1:] {
			ok = ok && bytes.HasPrefix(b.lower(), v.minPK[:n])
		}
		if ok {
			return n
		}
	}
	return 0
}

// TestLivePartition: parts claim exactly the rows in their ranges, and
// differ from the ideal size by at most two buckets.
func TestLivePartition(t *testing.T) {
	const table, vnodes = 3, 8
	s := NewState()
	s.AddTable(table, vnodes)
	m := liveModel{}
	b := s.Begin()
	for v := uint16(0); v < vnodes; v++ {
		m[v] = map[string]int64{}
		for i := range 500 * (int(v) + 1) {
			pk := keys.AppendUint64(nil, uint64(i))
			m[v][string(pk)] = 10
			require.NoError(t, b.Apply(Delta{Table: table, Vnode: v, PK: pk, Counts: Counts{1, 10}, Live: true}))
		}
	}
	b.Normalize()
	b.Publish()
	for _, req := range b.Rescans() {
		require.NoError(t, s.ApplyRescans([]ScannedBucket{m.split(req)}))
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
			require.InDelta(t, ideal, float64(p.Rows), float64(2*splitLimit(4000, l.Table(table).Rows, TableBucketBudget)), "n=%d %+v", n, p)
			sum += p.Rows
		}
		require.Equal(t, l.Table(table).Rows, sum)
	}
}

func TestLiveLoadRejectsCorrupt(t *testing.T) {
	s := NewState()
	s.AddTable(1, 4)
	for _, kv := range [][2][]byte{
		{keys.MetaKey([]byte("live/")), nil},
		{BucketKey(1, 9, nil, true), []byte{2, 2, 0, 0}},  // vnode out of range
		{BucketKey(1, 0, nil, true), []byte{2}},           // truncated
		{BucketKey(1, 0, nil, true), []byte{2, 2, 50, 1}}, // hint longer than value
		{BucketKey(2, 0, nil, true), []byte{2, 2, 0, 0}},  // unknown table
		{keys.MetaKey([]byte("live_est/\x00\x00")), {1}},  // short table id
	} {
		err := s.Load(kv[0], kv[1])
		require.ErrorIs(t, err, ErrCorruptLive, "%x", kv[0])
		require.ErrorIs(t, err, lsmstats.ErrCorruption, "%x", kv[0])
	}
}

// TestLiveRecount: counts built from ops that lie (as unchecked writers'
// may) are wrong and flagged; Recount with a scan of the truth makes every
// bucket exact, clears the flag, persists both (a reload agrees), and a
// second Recount changes nothing.
func TestLiveRecount(t *testing.T) {
	r := seededRand(t)
	const table, vnodes = 3, 4
	s := NewState()
	s.AddTable(table, vnodes)
	m := liveModel{}
	persisted := map[string][]byte{}
	epoch := uint64(0)
	persist := func(b *Batch) {
		epoch++
		for _, e := range b.MetaEntries(epoch) {
			if e.Delete {
				delete(persisted, string(e.Key))
			} else {
				persisted[string(e.Key)] = e.Value
			}
		}
	}
	for range 20 {
		b := s.Begin()
		require.NoError(t, b.MarkEstimates(table))
		for range 300 {
			v := uint16(r.IntN(vnodes - 1)) // the last vnode never has a row
			pk := keys.AppendUint64(nil, uint64(r.IntN(3000)))
			if m[v] == nil {
				m[v] = map[string]int64{}
			}
			nb := int64(8 + r.IntN(50))
			m[v][string(pk)] = nb
			// An insert whether or not the pk was live: wrong when it was.
			require.NoError(t, b.Apply(Delta{Table: table, Vnode: v, PK: pk, Counts: Counts{1, nb}, Live: true}))
		}
		b.Normalize()
		persist(b)
		b.Publish()
		for v := uint16(0); v < vnodes; v++ {
			requireIndexed(t, s.Current().table(table).vnode(v))
		}
		for _, req := range b.Rescans() {
			require.NoError(t, s.ApplyRescans([]ScannedBucket{m.split(req)}))
		}
	}
	l := s.Current()
	require.True(t, l.ContainsEstimates(table))
	wrong := 0
	for v := uint16(0); v < vnodes; v++ {
		if l.Vnode(table, v) != m.count(v, nil, nil) {
			wrong++
		}
	}
	require.Positive(t, wrong, "lying ops must leave wrong counts")

	scan := func(vnode uint16, bounds [][]byte) (VnodeRecount, error) {
		return m.recount(vnode, bounds), nil
	}
	b, err := s.Recount(table, scan)
	require.NoError(t, err)
	require.True(t, s.Current().ContainsEstimates(table), "nothing visible before Publish")
	b.Normalize()
	persist(b)
	b.Publish()
	for _, req := range b.Rescans() {
		require.NoError(t, s.ApplyRescans([]ScannedBucket{m.split(req)}))
	}
	l = s.Current()
	require.False(t, l.ContainsEstimates(table))
	var total Counts
	for v := uint16(0); v < vnodes; v++ {
		require.Equal(t, m.count(v, nil, nil), l.Vnode(table, v), "vnode %d", v)
		total = total.Add(m.count(v, nil, nil))
		bs := Detail(l, table, v).Buckets
		for i, bk := range bs {
			var hi []byte
			if i+1 < len(bs) {
				hi = bs[i+1].Lower
			}
			require.Equal(t, m.count(v, bk.Lower, hi), bk.Counts, "vnode %d bucket %d", v, i)
			_, live := m[v][string(bk.Lower)]
			require.Equal(t, i > 0 && live, bk.LowerLive, "vnode %d bucket %d: lower bound live", v, i)
		}
		for range 50 {
			lo, hi := keys.AppendUint64(nil, uint64(r.IntN(3000))), keys.AppendUint64(nil, uint64(r.IntN(3000)))
			if bytes.Compare(lo, hi) > 0 {
				lo, hi = hi, lo
			}
			truth := m.count(v, lo, hi).Rows
			est := l.EstimateRows(table, v, lo, hi)
			require.LessOrEqual(t, est.Lower, truth)
			require.GreaterOrEqual(t, est.Upper, truth)
		}
	}
	require.Equal(t, total, l.Table(table))

	// Persisted: a reload has the exact counts and no flag (splits after
	// the recount are persisted with the next commit: persist them now).
	flush := s.Begin()
	persist(flush)
	flush.Publish()
	re := NewState()
	re.AddTable(table, vnodes)
	ks := slices.Sorted(maps.Keys(persisted))
	for _, k := range ks {
		require.NoError(t, re.Load([]byte(k), persisted[k]))
	}
	require.False(t, re.Current().ContainsEstimates(table))
	for v := uint16(0); v < vnodes; v++ {
		require.Equal(t, Detail(l, table, v), Detail(re.Current(), table, v))
	}

	// The counts are exact now: a second recount changes nothing.
	b, err = s.Recount(table, scan)
	require.NoError(t, err)
	require.Empty(t, b.MetaEntries(epoch))

	_, err = s.Recount(table+1, scan)
	require.Error(t, err, "unknown table")
	_, err = s.Recount(table, func(uint16, [][]byte) (VnodeRecount, error) { return VnodeRecount{}, nil })
	require.Error(t, err, "a scan must count every bucket")
}

// TestBucketKeyOrder: the 8-byte key of a bucket's lower bound orders pks
// as bytes.Compare does whenever it decides (bucket.above), and with the
// lengths (compareByKey) it decides all but two pks longer than 8 bytes
// with equal keys; on strings of 0 to 12 bytes from an alphabet rich in
// zero bytes.
func TestBucketKeyOrder(t *testing.T) {
	r := seededRand(t)
	alphabet := []byte{0x00, 0x01, 0x7F, 0xFF}
	gen := func() []byte {
		b := make([]byte, r.IntN(13))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return b
	}
	for range 100000 {
		lower, pk := gen(), gen()
		v := &liveVnode{}
		v.setBuckets([]bucket{{}, bucketAt(lower, Counts{})})
		require.Equal(t, bytes.Compare(lower, pk) > 0, v.above(1, pk, key8(pk)), "lower %x pk %x", lower, pk)
		if key8(lower) != key8(pk) {
			require.Equal(t, bytes.Compare(lower, pk), cmp.Compare(key8(lower), key8(pk)), "lower %x pk %x", lower, pk)
		}
		// Where keys and lengths decide, they agree with the bytes;
		// they leave undecided only two pks longer than 8 bytes.
		c, ok := compareByKey(key8(pk), lenClass(pk), key8(lower), lenClass(lower))
		require.Equal(t, !ok, key8(lower) == key8(pk) && len(lower) > 8 && len(pk) > 8, "lower %x pk %x", lower, pk)
		if ok {
			require.Equal(t, bytes.Compare(pk, lower), c, "lower %x pk %x", lower, pk)
		}
	}
}

// TestFractionAgrees: fraction interpolates by the bounds' 8-byte keys
// alone where they are exact (bounds of at most 8 bytes) or at least 2⁸
// apart, and must then agree with the interpolation of the bytes to within
// the keys' resolution; elsewhere it must be that interpolation. Bounds of
// 1 to 16 bytes, some sharing long prefixes, in the middle, first and last
// buckets.
func TestFractionAgrees(t *testing.T) {
	r := seededRand(t)
	gen := func(prefix []byte, maxLen int) []byte {
		b := slices.Clone(prefix)
		if r.IntN(4) == 0 {
			b = b[:r.IntN(len(b)+1)]
		}
		for range 1 + r.IntN(max(1, maxLen-len(b))) {
			b = append(b, byte(r.IntN(256)))
		}
		return b
	}
	// check compares a fraction with the interpolation of the bytes.
	var keyed, exact int
	check := func(got float64, lo, x, hi []byte, short bool) {
		t.Helper()
		want := pkpos.Interpolate(lo, x, hi)
		span := key8(hi) - key8(lo)
		if key8(hi) > key8(lo) && (short || span >= 1<<8) {
			keyed++
			// Truncating x, and lo and hi unless short, moves the
			// fraction by less than one key unit each.
			require.InDelta(t, want, got, 2/float64(span)+1e-12, "lo %x x %x hi %x", lo, x, hi)
			return
		}
		exact++
		require.Equal(t, want, got, "lo %x x %x hi %x", lo, x, hi)
	}
	for range 100000 {
		prefix := make([]byte, r.IntN(13))
		for i := range prefix {
			prefix[i] = byte(r.IntN(3))
		}
		maxLen := []int{8, 16}[r.IntN(2)]
		ks := [][]byte{gen(prefix, maxLen), gen(prefix, 16), gen(prefix, maxLen)}
		slices.SortFunc(ks, bytes.Compare)
		lo, x, hi := ks[0], ks[1], ks[2]
		if bytes.Equal(lo, hi) {
			continue
		}
		short := len(lo) <= 8 && len(hi) <= 8
		v := &liveVnode{}
		v.setBuckets([]bucket{{}, bucketAt(lo, Counts{}), bucketAt(hi, Counts{})})
		v.setHints(nil, nil)
		check(v.fraction(1, x, key8(x)), lo, x, hi, short)
		// The first bucket interpolates from the smallest pk, the last
		// to the largest.
		v.setBuckets([]bucket{{}, bucketAt(hi, Counts{})})
		v.setHints(lo, nil)
		check(v.fraction(0, x, key8(x)), lo, x, hi, short)
		v.setBuckets([]bucket{{}, bucketAt(lo, Counts{})})
		v.setHints(nil, hi)
		check(v.fraction(1, x, key8(x)), lo, x, hi, short)
		v.setHints(nil, nil)
		require.Equal(t, 0.5, v.fraction(1, x, key8(x)), "the last bucket without a largest pk")
		require.Equal(t, 0.5, v.fraction(0, x, key8(x)), "the first bucket without a smallest pk")
	}
	t.Logf("%d fractions by keys, %d by bytes", keyed, exact)
	require.Greater(t, keyed, 30000, "fractions decided by the keys")
	require.Greater(t, exact, 30000, "fractions decided by the bytes")
}

// TestFindSkewed: find, whose search starts from a guess that assumes the
// bucket bounds spread evenly between the pk hints, agrees with a binary
// search of the bounds' bytes on vnodes whose bounds bunch up at the low
// end, the high end or in the middle, whose hints are stale (wider than
// the bounds), and whose bounds share their first 8 bytes.
func TestFindSkewed(t *testing.T) {
	r := seededRand(t)
	for range 300 {
		n := 1 + r.IntN(400)
		skew := r.IntN(4)
		point := func() []byte {
			u := r.Float64()
			switch skew {
			case 1:
				u = u * u * u * u // bunched at the low end
			case 2:
				u = 1 - u*u*u*u // at the high end
			case 3:
				u = 0.5 + (u-0.5)*(u-0.5)*(u-0.5) // in the middle
			}
			pk := keys.AppendUint64(nil, uint64(u*(1<<63)))
			if r.IntN(8) == 0 {
				pk = keys.AppendUint64(keys.AppendUint64(nil, 1<<62), uint64(u*(1<<63))) // a long pk
			}
			return pk
		}
		var lowers [][]byte
		for range n - 1 {
			lowers = append(lowers, point())
		}
		slices.SortFunc(lowers, bytes.Compare)
		lowers = slices.CompactFunc(lowers, bytes.Equal)
		bs := []bucket{{}}
		for _, l := range lowers {
			bs = append(bs, bucketAt(l, Counts{Rows: 1}))
		}
		v := newLiveVnode()
		v.setBuckets(bs)
		lo, hi := point(), point()
		if bytes.Compare(lo, hi) > 0 {
			lo, hi = hi, lo
		}
		if r.IntN(2) == 0 {
			lo, hi = keys.AppendUint64(nil, 0), keys.AppendUint64(nil, math.MaxUint64) // stale, wide hints
		}
		v.setHints(lo, hi)
		v.seal()
		for range 200 {
			x := point()
			want := sort.Search(len(bs), func(i int) bool { return i > 0 && bytes.Compare(bs[i].lower(), x) > 0 }) - 1
			require.Equal(t, want, v.find(x), "skew %d, %d buckets, x %x", skew, len(bs), x)
		}
	}
}

// TestAuxPacking: a bucket's flags and calibration offset ride in the low
// bits of its prefix sum, and both come back out, negative sums (unchecked
// writers' counts) and offsets beyond the packed range included.
func TestAuxPacking(t *testing.T) {
	r := seededRand(t)
	for range 10000 {
		v := &liveVnode{minLive: r.IntN(2) == 0, maxLive: r.IntN(2) == 0}
		bs := make([]bucket, 1+r.IntN(5))
		for i := range bs {
			bs[i] = bucket{Counts: Counts{Rows: int64(r.IntN(1<<20)) - 1<<10}, lowerLive: i > 0 && r.IntN(2) == 0}
			if r.IntN(4) > 0 {
				bs[i].calibrated = true
				bs[i].sumPos = quantize(r.NormFloat64() * float64(int64(1)<<r.IntN(40)) / float64(max(bs[i].Rows, 1)))
			}
			if i > 0 {
				bs[i].setLower(append(bytes.Repeat([]byte{byte(i)}, r.IntN(12)), byte(i)))
			}
		}
		v.setBuckets(bs)
		v.seal()
		var sum int64
		for i, b := range bs {
			before, rows, aux := v.rows(i)
			require.Equal(t, sum, before)
			require.Equal(t, b.Rows, rows)
			require.Equal(t, b.lowerLive, aux&auxLowerLive != 0)
			require.Equal(t, lenClass(b.lower()[int(v.q.skip):]), auxLen(aux))
			require.Equal(t, lenClass(b.lower()[int(v.q.skip):]), v.boundLen(i, int(v.q.skip)))
			loLive, hiLive := b.lowerLive, i == len(bs)-1 && v.maxLive
			if i == 0 {
				loLive = v.minLive
			}
			off, ok := b.offset(loLive, hiLive)
			require.Equal(t, ok, aux&auxCalibrated != 0)
			if ok {
				lim := float64(int64(1)<<(auxOffsetBits-1)) / auxOffsetUnit
				want := min(max(off, -lim), lim-1.0/auxOffsetUnit)
				require.InDelta(t, want, auxOffset(aux), 0.5/auxOffsetUnit+1e-9, "offset %v", off)
			}
			sum += b.Rows
		}
	}
}

// TestCalibrationFollowsOps: the calibration sums that inserts and deletes
// update equal those of a scan of the bucket's rows after them, whatever
// the rows and their order.
func TestCalibrationFollowsOps(t *testing.T) {
	r := seededRand(t)
	for round := range 200 {
		lo, hi := uint64(1000), uint64(1000+1+r.IntN(1<<20))
		rows := map[uint64]bool{}
		if r.IntN(2) == 0 {
			rows[lo] = true // a live lower bound
		}
		pkOf := func(x uint64) []byte { return keys.AppendUint64(nil, x) }
		scan := func() bucket {
			var arena []byte
			var ends []int
			for _, x := range slices.Sorted(maps.Keys(rows)) {
				arena = append(arena, pkOf(x)...)
				ends = append(ends, len(arena))
			}
			b := bucket{Counts: Counts{Rows: int64(len(rows))}, calibrated: true}
			b.sumPos = calibrate(pkOf(lo), pkOf(hi), arena, ends)
			return b
		}
		b := scan()
		for range 1 + r.IntN(50) {
			x := lo + uint64(r.IntN(int(hi-lo)))
			u := position(pkOf(lo), pkOf(x), pkOf(hi))
			if rows[x] {
				b.remove(u)
				b.Rows--
				delete(rows, x)
			} else {
				b.insert(u)
				b.Rows++
				rows[x] = true
			}
		}
		want := scan()
		// Positions are quantized: the sums agree exactly.
		require.Equal(t, want.sumPos, b.sumPos, "round %d", round)
		require.Equal(t, want.sumResid(), b.sumResid(), "round %d", round)
	}
}

// TestAnchorsMoveWithoutRescans: rows appended above a vnode's largest pk
// (a timeseries, an MV a backfill fills in pk order) and inserted below its
// smallest move the end buckets' anchors. Their calibrations follow into
// the new frames, so that commits do not ask to rescan end buckets for it
// (only to split them, or after a merge), and each equals what a scan of
// its rows gives. Both
// pk forms are tried: 8-byte keys, and keys sharing a long prefix.
func TestAnchorsMoveWithoutRescans(t *testing.T) {
	r := seededRand(t)
	for _, prefix := range []string{"", "tenant-0042/events/"} {
		const table = 1
		s := NewState()
		s.AddTable(table, 1)
		m := liveModel{0: map[string]int64{}}
		high, low := uint64(1<<40), uint64(1<<40)
		pkOf := func(x uint64) []byte { return keys.AppendUint64([]byte(prefix), x) }
		endRescans := 0 // rescans of an end bucket that split nothing
		for commit := range 40 {
			b := s.Begin()
			for range 20 + r.IntN(100) {
				var x uint64
				if r.IntN(10) == 0 {
					low -= 1 + uint64(r.IntN(1000))
					x = low
				} else {
					high += 1 + uint64(r.IntN(1000))
					x = high
				}
				pk := pkOf(x)
				m[0][string(pk)] = 10
				require.NoError(t, b.Apply(Delta{Table: table, Vnode: 0, PK: pk, Counts: Counts{1, 10}, Live: true}))
			}
			b.Normalize()
			b.Publish()
			for _, req := range b.Rescans() {
				if commit > 0 && (req.Lower == nil || req.Upper == nil) && req.Target == 0 {
					endRescans++
				}
				require.NoError(t, s.ApplyRescans([]ScannedBucket{m.split(req)}))
			}
			v := s.Current().table(table).vnode(0)
			for i := range v.buckets {
				bk := v.buckets[i]
				req := Rescan{Table: table, Lower: bk.lower()}
				if i+1 < len(v.buckets) {
					req.Upper = v.buckets[i+1].lower()
				}
				want := m.split(req).Pieces[0]
				require.True(t, bk.calibrated, "prefix %q commit %d bucket %d", prefix, commit, i)
				n := float64(bk.Rows)
				require.InDelta(t, want.SumPos, bk.sumPos, (n+1)/posUnit, "prefix %q commit %d bucket %d of %d", prefix, commit, i, len(v.buckets))
				require.InDelta(t, n*(n+1)/2-n*want.SumPos, bk.sumResid(), (n+1)*(n+1)/posUnit, "prefix %q commit %d bucket %d", prefix, commit, i)
			}
		}
		// A small end bucket merged into its neighbour is rescanned; an
		// anchor that moved is not: every commit moved one.
		t.Logf("prefix %q: %d rescans of an end bucket over 39 commits", prefix, endRescans)
		require.LessOrEqual(t, endRescans, 4, "prefix %q: end buckets rescanned for their anchors", prefix)
	}
}

// TestMergesWithoutRescans grows a vnode from a few hundred rows to tens
// of thousands with random inserts and some deletes: its split limit grows
// with it, so its early buckets keep merging. A merge carries its parts'
// calibrations into the merged bucket's frame, so after every commit every
// bucket is calibrated, its sums agree with a scan of its rows, and no
// bucket is rescanned for a stale calibration (before merges carried them,
// each merge was rescanned).
func TestMergesWithoutRescans(t *testing.T) {
	r := seededRand(t)
	for _, prefix := range []string{"", "tenant-0042/events/"} {
		const table = 1
		s := NewState()
		s.AddTable(table, 1)
		m := liveModel{0: map[string]int64{}}
		pkOf := func(x uint64) []byte { return keys.AppendUint64([]byte(prefix), x) }
		var live []string
		staleRescans, merged := 0, 0
		for commit := range 30 {
			b := s.Begin()
			for range 200 + commit*commit*10 {
				if len(live) > 0 && r.IntN(10) == 0 {
					i := r.IntN(len(live))
					pk := live[i]
					live[i] = live[len(live)-1]
					live = live[:len(live)-1]
					delete(m[0], pk)
					require.NoError(t, b.Apply(Delta{Table: table, Vnode: 0, PK: []byte(pk), Counts: Counts{-1, -10}, Live: false}))
					continue
				}
				pk := pkOf(r.Uint64())
				if _, ok := m[0][string(pk)]; ok {
					continue
				}
				m[0][string(pk)] = 10
				live = append(live, string(pk))
				require.NoError(t, b.Apply(Delta{Table: table, Vnode: 0, PK: pk, Counts: Counts{1, 10}, Live: true}))
			}
			before := len(s.Current().table(table).vnode(0).buckets)
			b.Normalize()
			b.Publish()
			v := s.Current().table(table).vnode(0)
			if len(v.buckets) < before {
				merged += before - len(v.buckets)
			}
			for _, req := range b.Rescans() {
				if commit > 0 && req.Target == 0 {
					staleRescans++
				}
				require.NoError(t, s.ApplyRescans([]ScannedBucket{m.split(req)}))
			}
			// Every bucket's sums are those of its rows in its own frame,
			// whose end anchors are the vnode's pk hints (a deleted row's
			// pk stays a hint, where a scan would take the live rows').
			v = s.Current().table(table).vnode(0)
			sorted := slices.Sorted(maps.Keys(m[0]))
			for i := range v.buckets {
				bk := v.buckets[i]
				lo, hi := bk.lower(), v.maxPK
				if i == 0 {
					lo = v.minPK
				}
				end := len(sorted)
				if i+1 < len(v.buckets) {
					hi = v.buckets[i+1].lower()
					end, _ = slices.BinarySearch(sorted, string(hi))
				}
				start, _ := slices.BinarySearch(sorted, string(bk.lower()))
				rows := sorted[start:end]
				var wantResid, wantPos float64
				for j, pk := range rows {
					u := position(lo, []byte(pk), hi)
					wantResid += float64(j+1) - float64(len(rows))*u
					wantPos += u
				}
				require.True(t, bk.calibrated, "prefix %q commit %d bucket %d", prefix, commit, i)
				require.EqualValues(t, len(rows), bk.Rows)
				n := float64(bk.Rows)
				require.InDelta(t, wantPos, bk.sumPos, (n+1)/posUnit, "prefix %q commit %d bucket %d of %d", prefix, commit, i, len(v.buckets))
				require.InDelta(t, wantResid, bk.sumResid(), (n+1)*(n+1)/posUnit, "prefix %q commit %d bucket %d", prefix, commit, i)
			}
		}
		t.Logf("prefix %q: %d rows, %d buckets merged away, %d stale rescans", prefix, len(live), merged, staleRescans)
		require.Positive(t, merged, "prefix %q: no merges to test", prefix)
		require.Zero(t, staleRescans, "prefix %q: merged buckets rescanned for their calibration", prefix)
	}
}

// TestPackedPrefixes: a publish lays the query prefixes of its vnodes out
// together, one shared by neighbours whose prefixes are equal, and the
// estimates of the packed vnodes are those of the same vnodes sealed on
// their own, for pks inside, below and above each vnode's prefix.
func TestPackedPrefixes(t *testing.T) {
	r := seededRand(t)
	tenants := []string{"tenant-0001/orders/", "tenant-0001/orders/", "tenant-0002/orders/", "", "tenant-0002/orders/", "tenant-0003/"}
	const vnodes = 24
	alone := make([]*liveVnode, vnodes)
	var ps []placed
	pkOf := func(tenant string, x uint64) []byte { return keys.AppendUint64([]byte(tenant), x) }
	for vn := range vnodes {
		tenant := tenants[vn*len(tenants)/vnodes]
		bs := []bucket{{Counts: Counts{Rows: 1 + r.Int64N(50)}}}
		x := uint64(1000)
		for range r.IntN(20) {
			x += 1 + uint64(r.IntN(1000))
			bs = append(bs, bucketAt(pkOf(tenant, x), Counts{Rows: 1 + r.Int64N(50)}))
		}
		v := newLiveVnode()
		v.setBuckets(bs)
		v.setHints(pkOf(tenant, 1000), pkOf(tenant, x+1+uint64(r.IntN(1000))))
		v.total.Rows = 0
		for _, b := range bs {
			v.total.Rows += b.Rows
		}
		a := *v
		a.buckets, a.keys = slices.Clone(v.buckets), slices.Clone(v.keys)
		a.seal()
		alone[vn] = &a
		ps = append(ps, placed{vn: uint16(vn), v: v})
	}
	r.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	tab := &liveTable{vnodes: make([]*liveVnode, vnodes)}
	pack(tab, ps)

	var shared int
	for vn := 1; vn < vnodes; vn++ {
		p, q := tab.vnodes[vn-1].q.prefix, tab.vnodes[vn].q.prefix
		require.Equal(t, alone[vn].q.prefix, q, "vnode %d", vn)
		if len(q) > 0 && bytes.Equal(p, q) {
			require.Same(t, &p[0], &q[0], "vnodes %d and %d: equal prefixes not shared", vn-1, vn)
			shared++
		}
	}
	require.Positive(t, shared, "no prefix shared")

	var qs []RangeQuery
	for vn := range vnodes {
		for _, tenant := range tenants {
			for range 8 {
				qs = append(qs, RangeQuery{Vnode: uint16(vn), Hi: pkOf(tenant, 900+uint64(r.IntN(30000))), HiInclusive: r.IntN(2) == 0})
			}
		}
	}
	got := (&Snapshot{tables: map[uint32]*liveTable{1: tab}}).AppendEstimates(nil, 1, qs)
	want := make([]RowEstimate, 0, len(qs))
	for _, q := range qs {
		solo := &liveTable{vnodes: make([]*liveVnode, vnodes)}
		solo.vnodes[q.Vnode] = alone[q.Vnode]
		want = (&Snapshot{tables: map[uint32]*liveTable{1: solo}}).AppendEstimates(want, 1, []RangeQuery{q})
	}
	require.Equal(t, want, got)
}

// bucketAt returns a bucket with lower bound lower and counts c.
func bucketAt(lower []byte, c Counts) bucket {
	b := bucket{Counts: c}
	b.setLower(lower)
	return b
}

// TestBucketSize holds the bucket to the size the design's memory account
// gives (docs/design.md, "What the statistics hold in memory").
func TestBucketSize(t *testing.T) {
	require.EqualValues(t, 40, unsafe.Sizeof(bucket{}))
}

// TestLiveBucketBudget fills the same table, commit by commit, into a state
// with the default bucket budget and into one with a small budget, once
// with every commit spread over all vnodes and once vnode after vnode (as
// an MV fills): the small budget keeps fewer than 8·budget + vnodes
// buckets, no two neighbours that its last coarsening would have merged,
// estimates whose bounds hold the truth and span at most two buckets, and
// fewer buckets than the default.
func TestLiveBucketBudget(t *testing.T) {
	seed := testutil.Seed(t, "live-seed", *liveSeed)
	for _, inOrder := range []bool{false, true} {
		r := rand.New(rand.NewPCG(seed, 11))
		const table, vnodes, budget, commits = 3, 64, 64, 64
		small, dflt := NewState(), NewState()
		small.SetBucketBudget(budget)
		small.AddTable(table, vnodes)
		dflt.AddTable(table, vnodes)
		m := liveModel{}
		for c := range commits {
			ops := map[uint16]map[string]Counts{}
			for range 500 {
				v := uint16(r.IntN(vnodes))
				if inOrder {
					v = uint16(c * vnodes / commits)
				}
				pk := livePK(r.IntN(1 << 20))
				if m[v] == nil {
					m[v] = map[string]int64{}
				}
				if ops[v] == nil {
					ops[v] = map[string]Counts{}
				}
				if _, ok := m[v][string(pk)]; ok {
					continue // inserts only
				}
				nb := int64(8 + r.IntN(50))
				m[v][string(pk)] = nb
				ops[v][string(pk)] = Counts{Rows: 1, Bytes: nb}
			}
			for _, s := range []*State{small, dflt} {
				b := s.Begin()
				for v, byPK := range ops {
					for pk, d := range byPK {
						require.NoError(t, b.Apply(Delta{Table: table, Vnode: v, PK: []byte(pk), Counts: d, Live: true}))
					}
				}
				b.Normalize()
				b.MetaEntries(uint64(c + 1))
				b.Publish()
				for _, req := range b.Rescans() {
					require.NoError(t, s.ApplyRescans([]ScannedBucket{m.split(req)}))
				}
			}
		}
		l := small.Current()
		lt := l.table(table)
		rows := lt.total.Rows
		limit := splitLimit(0, rows, budget)
		require.Positive(t, lt.coarsened, "in order %v: the table was never coarsened", inOrder)
		for v := uint16(0); v < vnodes; v++ {
			require.Equal(t, m.count(v, nil, nil), l.Vnode(table, v), "vnode %d", v)
			bs := lt.vnode(v).buckets
			for i := 1; i < len(bs); i++ {
				require.False(t, mergesLeft(&bs[i-1], &bs[i], lt.coarsened), "in order %v: vnode %d buckets %d and %d (%d and %d rows) merge under the last coarsening's limit %d",
					inOrder, v, i-1, i, bs[i-1].Rows, bs[i].Rows, lt.coarsened)
			}
			for range 20 {
				lo, hi := livePK(r.IntN(1<<20)), livePK(r.IntN(1<<20))
				if bytes.Compare(lo, hi) > 0 {
					lo, hi = hi, lo
				}
				truth := m.count(v, lo, hi).Rows
				est := l.EstimateRows(table, v, lo, hi)
				require.LessOrEqual(t, est.Lower, truth, "vnode %d [%x, %x)", v, lo, hi)
				require.GreaterOrEqual(t, est.Upper, truth, "vnode %d [%x, %x)", v, lo, hi)
				require.LessOrEqual(t, est.Upper-est.Lower, 2*lt.splitLimit(l.Vnode(table, v).Rows), "bounds wider than two buckets")
			}
		}
		n, n0 := l.BucketCount(), dflt.Current().BucketCount()
		t.Logf("in order %v: %d rows in %d vnodes: %d buckets with a budget of %d (limit %d rows, last coarsened at %d), %d with the default",
			inOrder, rows, vnodes, n, budget, limit, lt.coarsened, n0)
		require.LessOrEqual(t, n, 8*budget+vnodes, "in order %v", inOrder)
		require.Less(t, n, n0, "in order %v: the budget must bind here", inOrder)
	}
}

// TestNotLive: what NotLive proves, case by case, and what it leaves to a
// read: a vnode without rows, pks outside its anchors, anchors and bucket
// bounds by their live flags, empty buckets while the counts are exact,
// and nothing once an unchecked writer may have made them estimates.
func TestNotLive(t *testing.T) {
	const table = 1
	s := NewState()
	s.AddTable(table, 2)
	pk := func(n uint64) []byte { return keys.AppendUint64(nil, n) }
	m := liveModel{0: {}}
	apply := func(n uint64, rows int64) {
		if rows > 0 {
			m[0][string(pk(n))] = 10
		} else {
			delete(m[0], string(pk(n)))
		}
		b := s.Begin()
		require.NoError(t, b.Apply(Delta{Table: table, Vnode: 0, PK: pk(n), Counts: Counts{rows, 10 * rows}, Live: rows > 0}))
		b.Normalize()
		b.Publish()
		for _, r := range b.Rescans() {
			require.NoError(t, s.ApplyRescans([]ScannedBucket{m.split(r)}))
		}
	}
	require.True(t, s.Current().NotLive(table, 0, pk(5)), "a vnode that never had a row")
	require.False(t, s.Current().NotLive(table+1, 0, pk(5)), "a table the statistics do not know")
	require.False(t, s.Current().NotLive(table, 2, pk(5)), "a vnode beyond the table's")
	for _, n := range []uint64{10, 20, 30, 40} {
		apply(n, 1)
	}
	l := s.Current()
	require.Len(t, Detail(l, table, 0).Buckets, 4, "a bucket per row in a small vnode")
	for n, want := range map[uint64]bool{
		5: true, 45: true, // outside the anchors
		10: false, 40: false, // live anchors
		20: false, 30: false, // live bucket bounds
		15: true, 25: true, 35: true, // in buckets of one row, at their bounds: not live
	} {
		require.Equal(t, want, l.NotLive(table, 0, pk(n)), "pk %d", n)
	}
	require.True(t, l.NotLive(table, 1, pk(10)), "the other vnode has no row")
	// Deleting the largest row clears its anchor's flag: its pk is not
	// live, and the anchor stays where it was.
	apply(40, -1)
	require.True(t, s.Current().NotLive(table, 0, pk(40)))
	require.False(t, s.Current().NotLive(table, 0, pk(30)))
	// After an unchecked writer's commit, a bucket's count may be wrong:
	// only the anchors and the flags still prove anything.
	b := s.Begin()
	require.NoError(t, b.MarkEstimates(table))
	b.Publish()
	l = s.Current()
	require.True(t, l.NotLive(table, 0, pk(5)))
	require.True(t, l.NotLive(table, 0, pk(20)) == false)
	require.False(t, l.NotLive(table, 0, pk(25)), "an empty bucket of estimated counts proves nothing")
}

// TestSplitLimit holds the bucket sizes: 1/SplitDivisor of a vnode in a
// table of 256 equal vnodes or more, finer in a table of fewer (to
// 1/MaxSplitDivisor of the vnode, or 1/TableTargetBuckets of the table),
// never below MinSplitRows, and never finer than the budget allows.
func TestSplitLimit(t *testing.T) {
	for _, c := range []struct {
		vnode, table, budget, want int64
	}{
		{0, 0, 0, MinSplitRows},
		{64, 64, 0, 1},                     // a bucket per row
		{10_000, 10_000, 0, 40},            // one vnode: 1/256 of it
		{1_000_000, 1_000_000, 0, 3907},    // one vnode: 1/256, not 1/16,384 of the table
		{25_000, 100_000, 0, 98},           // four vnodes: 1/256 of each
		{4_000, 256 * 4_000, 0, 63},        // 256 equal vnodes: 1/64 of each, as before
		{8_000, 256 * 4_000, 0, 63},        // a vnode twice the mean: 1/16,384 of the table
		{250, 4096 * 250, 0, 16},           // 4,096 vnodes: the default budget, 1/65,536 of the table
		{10_000, 10_000, 256, 40},          // one vnode, a budget of 256: 1/256 of the table
		{4_000, 256 * 4_000, 256, 4000},    // 256 vnodes, a budget of 256: a vnode a bucket
		{1_000_000, 1_000_000, 1024, 3907}, // the budget does not bind
	} {
		require.Equal(t, c.want, splitLimit(c.vnode, c.table, c.budget), "vnode %d rows, table %d, budget %d", c.vnode, c.table, c.budget)
	}
}

// TestSealReusesIndex: a vnode sealed from a copy of a sealed one shares
// the index words of their common first buckets, and gives every other
// word its own: after an append at its end, after the old last bucket
// stops being the last (its aux read maxLive), after minLive changes (the
// first bucket's aux reads it), and after a change in the middle.
func TestSealReusesIndex(t *testing.T) {
	const table = 1
	s := NewState()
	s.AddTable(table, 1)
	m := liveModel{0: map[string]int64{}}
	for commit := range 8 {
		b := s.Begin()
		for i := range 200 {
			pk := keys.AppendUint64(nil, uint64(commit*200+i)*7919%100003)
			m[0][string(pk)] = 20
			require.NoError(t, b.Apply(Delta{Table: table, Vnode: 0, PK: pk, Counts: Counts{1, 20}, Live: true}))
		}
		b.Normalize()
		b.MetaEntries(uint64(commit + 1))
		b.Publish()
		for _, req := range b.Rescans() {
			require.NoError(t, s.ApplyRescans([]ScannedBucket{m.split(req)}))
		}
	}
	pub := s.Current().table(table).vnode(0)
	requireIndexed(t, pub)
	// A copy whose first bucket's rows sit low in its frame, so that its
	// calibration offset moves by far more than its grid when minLive
	// does, sealed on its own.
	was := &liveVnode{}
	*was = *pub
	was.buckets, was.keys = slices.Clone(pub.buckets), slices.Clone(pub.keys)
	was.buckets[0].sumPos = 0.5
	was.seal()
	n := len(was.buckets)
	require.Greater(t, n, 4, "buckets")
	last := &was.buckets[n-1]
	require.True(t, last.calibrated && was.maxLive && was.minLive, "the end buckets must be calibrated, the anchors live")
	copyOf := func() *liveVnode {
		v := *was
		v.buckets, v.keys, v.cum = slices.Clone(was.buckets), slices.Clone(was.keys), nil
		return &v
	}
	// Sealed with the shared buckets compared, and with their number
	// given (as a commit's batch knows it from its log), each index must
	// be the one a fresh seal builds.
	seal := func(v *liveVnode, what string) {
		fresh := *v
		fresh.seal()
		known := *v
		known.sealInto(make([]uint64, 2*len(v.buckets)+1), was, sameBuckets(was.buckets, v.buckets))
		require.Equal(t, fresh.cum, known.cum, what+" (shared buckets known)")
		v.sealInto(make([]uint64, 2*len(v.buckets)+1), was, -1)
		requireIndexed(t, v)
		require.Equal(t, fresh.cum, v.cum, what)
	}

	// The old last bucket unchanged, a new one above it.
	v := copyOf()
	top := keys.AppendUint64(nil, 1<<40)
	v.replaceBucket(n-1, []bucket{*last, bucketAt(top, Counts{1, 20})})
	v.buckets[n].calibrated, v.buckets[n].lowerLive = true, true
	v.setHints(v.minPK, top)
	seal(v, "a bucket appended")

	// The anchors' flags flip, nothing else.
	v = copyOf()
	v.minLive = false
	seal(v, "minLive cleared")
	require.NotEqual(t, was.cum[0], v.cum[0], "the first bucket's aux must read minLive")
	v = copyOf()
	v.maxLive = false
	seal(v, "maxLive cleared")

	// A bucket in the middle gains a row.
	v = copyOf()
	v.buckets[n/2].Rows++
	require.Equal(t, n/2, v.sealedPrefix(was, int(was.q.skip), -1), "the buckets before the change are shared")
	require.Equal(t, n/2, sameBuckets(was.buckets, v.buckets), "the buckets before the change are equal")
	seal(v, "a middle bucket changed")
	require.Equal(t, was.cum[:n/2], v.cum[:n/2], "the words before the change")
}
