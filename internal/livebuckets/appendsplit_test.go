package livebuckets

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// TestAppendsSplitWithoutScans fills vnodes in pk order, as a backfill
// fills its MV, for 8-byte pks and pks sharing a long prefix, some commits
// also deleting, updating or inserting below the vnode's largest pk.
// After every commit each bucket's counts, lower-bound flag and
// calibration equal a scan of its rows, and no bucket is larger than its
// split limit once the commit's rescans are applied; a commit that only
// appended asks for no rescan to split a bucket, and a reload from the
// persisted entries gives the same buckets.
func TestAppendsSplitWithoutScans(t *testing.T) {
	r := seededRand(t)
	for _, prefix := range []string{"", "tenant-0042/events/"} {
		const table, vnodes = 1, 4
		s := NewState()
		s.AddTable(table, vnodes)
		m := liveModel{}
		next := make([]uint64, vnodes)
		pkOf := func(x uint64) []byte { return keys.AppendUint64([]byte(prefix), x) }
		persisted := map[string][]byte{}
		persist := func(es []MetaEntry) {
			for _, e := range es {
				if e.Delete {
					delete(persisted, string(e.Key))
				} else {
					persisted[string(e.Key)] = e.Value
				}
			}
		}
		appendOnly, rescansAfterAppends, splits := 0, 0, 0
		for commit := range 60 {
			b := s.Begin()
			mixed := commit%5 == 4
			for vn := range uint16(vnodes) {
				if m[vn] == nil {
					m[vn] = map[string]int64{}
				}
				// Deltas of one vnode in pk order, as a commit applies
				// them: the changes below the largest pk, then the appends.
				type op struct {
					pk   []byte
					d    Counts
					live bool
				}
				var ops []op
				if mixed && len(m[vn]) > 0 {
					old := m[vn]
					sorted := slices.Sorted(maps.Keys(old))
					for range 1 + r.IntN(4) {
						pk := sorted[r.IntN(len(sorted))]
						if slices.ContainsFunc(ops, func(o op) bool { return string(o.pk) == pk || string(o.pk) == pk+"\x00" }) {
							continue
						}
						switch r.IntN(3) {
						case 0:
							ops = append(ops, op{[]byte(pk), Counts{-1, -old[pk]}, false})
						case 1:
							ops = append(ops, op{[]byte(pk), Counts{0, 5}, true})
						default: // an insert just above a live row, below the largest
							x := []byte(pk + "\x00")
							if _, ok := old[string(x)]; !ok {
								ops = append(ops, op{x, Counts{1, int64(len(x)) + 7}, true})
							}
						}
					}
					slices.SortFunc(ops, func(a, b op) int { return bytes.Compare(a.pk, b.pk) })
				}
				for range r.IntN(40) {
					next[vn] += 1 + uint64(r.IntN(1000))
					pk := pkOf(next[vn]<<8 | uint64(vn))
					ops = append(ops, op{pk, Counts{1, int64(len(pk)) + 10}, true})
				}
				for _, o := range ops {
					if o.live {
						m[vn][string(o.pk)] += o.d.Bytes
					} else {
						delete(m[vn], string(o.pk))
					}
					require.NoError(t, b.Apply(Delta{Table: table, Vnode: vn, PK: o.pk, Counts: o.d, Live: o.live}))
				}
			}
			before := s.Current().BucketCount()
			b.Normalize()
			splits += max(0, b.next.BucketCount()-before)
			persist(b.MetaEntries(uint64(commit + 1)))
			b.Publish()
			for vn := range uint16(vnodes) {
				requireIndexed(t, s.Current().table(table).vnode(vn))
			}
			rescans := b.Rescans()
			if !mixed {
				appendOnly++
				for _, req := range rescans {
					// A merge whose parts' frames do not compare (9-byte
					// bounds beside 8-byte ones) is rescanned with target
					// 0; a split has a target.
					if req.Target > 0 {
						rescansAfterAppends++
					}
				}
			}
			for _, req := range rescans {
				require.NoError(t, s.ApplyRescans([]ScannedBucket{m.split(req)}))
			}
			checkBucketsAgainstScans(t, s.Current(), table, m, fmt.Sprintf("prefix %q commit %d", prefix, commit))
			for vn := range uint16(vnodes) {
				requireIndexed(t, s.Current().table(table).vnode(vn))
			}
		}
		t.Logf("prefix %q: %d buckets, %d from splits without a scan; %d rescans after %d append-only commits",
			prefix, s.Current().BucketCount(), splits, rescansAfterAppends, appendOnly)
		require.Positive(t, splits, "prefix %q: no split to test", prefix)
		require.Zero(t, rescansAfterAppends, "prefix %q: append-only commits asked for split rescans", prefix)

		// The last rescans are persisted by the next commit.
		b := s.Begin()
		b.Normalize()
		persist(b.MetaEntries(1 << 20))
		b.Publish()
		re := NewState()
		re.AddTable(table, vnodes)
		for _, k := range slices.Sorted(maps.Keys(persisted)) {
			require.NoError(t, re.Load([]byte(k), persisted[k]))
		}
		re.FinishLoad()
		for vn := range uint16(vnodes) {
			require.Equal(t, Detail(s.Current(), table, vn), Detail(re.Current(), table, vn), "prefix %q vnode %d after a reload", prefix, vn)
		}
	}
}

// checkBucketsAgainstScans requires every bucket of the table to hold
// exactly the model's rows in its range, with its lower-bound flag and a
// calibration equal to a scan's, and no more rows than its split limit.
func checkBucketsAgainstScans(t *testing.T, l *Snapshot, table uint32, m liveModel, at string) {
	t.Helper()
	lt := l.table(table)
	for vn := range lt.vnodes {
		v := lt.vnode(uint16(vn))
		limit := lt.splitLimit(v.total.Rows)
		for i := range v.buckets {
			bk := v.buckets[i]
			req := Rescan{Table: table, Vnode: uint16(vn), Lower: bk.lower()}
			if i+1 < len(v.buckets) {
				req.Upper = v.buckets[i+1].lower()
			}
			want := m.split(req).Pieces[0]
			msg := fmt.Sprintf("%s vnode %d bucket %d of %d", at, vn, i, len(v.buckets))
			require.Equal(t, want.Counts, bk.Counts, msg)
			require.Equal(t, want.LowerLive && i > 0, bk.lowerLive, msg)
			require.LessOrEqual(t, bk.Rows, limit, msg)
			if i == len(v.buckets)-1 && bk.Rows > 0 {
				// maxPK bounds the live rows, and is the largest when
				// flagged live; a delete of the largest leaves it a bound.
				largest := m.rows(uint16(vn), nil, nil)[len(m[uint16(vn)])-1]
				if v.maxLive {
					require.Equal(t, largest, string(v.maxPK), msg)
				} else {
					require.GreaterOrEqual(t, string(v.maxPK), largest, msg)
				}
			}
			if !bk.calibrated {
				continue // uncalibrated buckets are rescanned: counted by the caller
			}
			n := float64(bk.Rows)
			// The scan calibrates in the bucket's frame, whose end
			// anchors are the vnode's hints.
			lo, hi := bk.lower(), v.maxPK
			if i == 0 {
				lo = v.minPK
			}
			if i+1 < len(v.buckets) {
				hi = v.buckets[i+1].lower()
			}
			rows := m.rows(uint16(vn), bk.lower(), req.Upper)
			var wantResid, wantPos float64
			for j, pk := range rows {
				u := position(lo, []byte(pk), hi)
				wantResid += float64(j+1) - float64(len(rows))*u
				wantPos += u
			}
			require.InDelta(t, wantPos, bk.sumPos, (n+1)/posUnit, msg)
			require.InDelta(t, wantResid, bk.sumResid(), (n+1)*(n+1)/posUnit, msg)
		}
	}
}
