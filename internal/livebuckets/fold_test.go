package livebuckets

import (
	"bytes"
	"flag"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

var foldSeed = flag.Uint64("fold-seed", 0, "seed for TestRollingFold (0: the fixed default)")

// TestRollingFold runs the commits of an MV that a backfill fills (a few
// rows appended to every vnode each commit, and now and then an update or
// a delete behind the cursors), persisting each commit's entries, and
// checks that the fold of the logged vnodes is spread over commits: no
// commit rewrites more than a fraction of the bucket rows, the log stays
// within its weight, log rows are deleted as the fold goes, and a reload
// from what is persisted after each deletion is the state itself (no log
// row a vnode needed went).
func TestRollingFold(t *testing.T) {
	seed := testutil.Seed(t, "fold-seed", *foldSeed)
	r := rand.New(rand.NewPCG(seed, 11))
	const table, vnodes, commits = 3, 64, 600
	s := NewState()
	s.SetBucketBudget(1024) // coarse buckets: a light fold, due often
	s.AddTable(table, vnodes)
	m := liveModel{}
	persisted := map[string][]byte{}
	next := make([]uint64, vnodes)
	logPrefix := logKey(0)[:len(logKey(0))-8]
	var maxRows, deletingCommits, deleted, reloads int
	for c := uint64(1); c <= commits; c++ {
		b := s.Begin()
		deltas := 0
		for vn := range uint16(vnodes) {
			if m[vn] == nil {
				m[vn] = map[string]int64{}
			}
			for range 1 + r.IntN(3) {
				deltas++
				next[vn]++
				pk := keys.AppendUint64(nil, next[vn])
				m[vn][string(pk)] = 100
				require.NoError(t, b.Apply(Delta{Table: table, Vnode: vn, PK: pk, Counts: Counts{1, 100}, Live: true}))
			}
			if r.IntN(4) == 0 && next[vn] > 1 {
				// A change behind the cursor: an update or a delete.
				pk := keys.AppendUint64(nil, 1+r.Uint64N(next[vn]))
				deltas++
				if old, live := m[vn][string(pk)]; live && r.IntN(2) == 0 {
					delete(m[vn], string(pk))
					require.NoError(t, b.Apply(Delta{Table: table, Vnode: vn, PK: pk, Counts: Counts{-1, -old}}))
				} else if live {
					m[vn][string(pk)] = 90
					require.NoError(t, b.Apply(Delta{Table: table, Vnode: vn, PK: pk, Counts: Counts{0, 90 - old}, Live: true}))
				}
			}
		}
		b.Normalize()
		rows, deletes := 0, 0
		for _, e := range b.MetaEntries(c) {
			switch {
			case bytes.HasPrefix(e.Key, logPrefix) && e.Delete:
				deletes++
			case !bytes.HasPrefix(e.Key, logPrefix):
				rows++
			}
			if e.Delete {
				delete(persisted, string(e.Key))
			} else {
				persisted[string(e.Key)] = e.Value
			}
		}
		b.Publish()
		// What is persisted is the state until the rescans below (whose
		// changes the next commit persists).
		if deletes > 0 || c%50 == 0 {
			reloads++
			requireReload(t, s, table, vnodes, persisted)
		}
		for _, req := range b.Rescans() {
			require.NoError(t, s.ApplyRescans([]ScannedBucket{m.split(req)}))
		}
		buckets := s.Current().BucketCount()
		if c > 100 {
			// Past the first commits, whose vnodes are new (folded whole)
			// and tiny, a commit folds a sixteenth of the buckets or twice
			// its deltas (foldDue), to within a vnode: each bucket a row
			// and a delete of a bound gone at most. Never half the rows.
			maxRows = max(maxRows, rows)
			widest := 0
			for v := range uint16(vnodes) {
				widest = max(widest, len(s.Current().table(table).vnode(v).buckets))
			}
			quota := max(buckets/foldSpread, 2*deltas)
			require.LessOrEqual(t, rows, 2*(quota+widest), "commit %d of %d deltas rewrote %d bucket rows of %d", c, deltas, rows, buckets)
			require.Less(t, rows, buckets/2, "commit %d rewrote %d bucket rows of %d", c, rows, buckets)
		}
		require.LessOrEqual(t, s.logBytes, 2*(s.imageBuckets+buckets/foldSpread+vnodes)*rowBytesEstimate,
			"commit %d: a log of %d bytes for %d buckets with images", c, s.logBytes, s.imageBuckets)
		if deletes > 0 {
			deletingCommits++
			deleted += deletes
		}
	}
	t.Logf("%d commits: at most %d bucket rows a commit past the first 100 (%d buckets in all); %d log rows deleted by %d commits; %d log rows (%d bytes) left; %d reloads",
		commits, maxRows, s.Current().BucketCount(), deleted, deletingCommits, len(s.logs), s.logBytes, reloads)
	// The fold is spread: log rows go at many commits, not all at one.
	require.Greater(t, deletingCommits, 10)
	require.Positive(t, reloads)
}

// requireReload loads the persisted rows into a new state and requires the
// same statistics as s's, vnode by vnode.
func requireReload(t *testing.T, s *State, table uint32, vnodes int, persisted map[string][]byte) {
	t.Helper()
	re := NewState()
	re.AddTable(table, vnodes)
	ks := make([]string, 0, len(persisted))
	for k := range persisted {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		require.NoError(t, re.Load([]byte(k), persisted[k]))
	}
	re.FinishLoad()
	l := s.Current()
	for v := uint16(0); v < uint16(vnodes); v++ {
		require.Equal(t, Detail(l, table, v), Detail(re.Current(), table, v), "vnode %d reloaded", v)
	}
}
