package ssttracker

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/errors/oserror"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/lsmstats/lsmstats/internal/sstsummary"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// physModel is what the randomized test wrote: every versioned key, whether
// it is an MVCC put, and whether a SINGLEDEL (GC) or an excise removed it.
type physModel struct {
	versions map[string]*physVersion
}

type physVersion struct {
	key     keys.Key
	gced    bool
	excised bool
}

type physVnodeKey struct {
	table uint32
	vnode uint16
}

// physTruth is a count computed without the collector's code.
type physTruth struct {
	puts, deletes, headPuts, prefixes, tombstones, keyBytes uint64
}

// physScanFile counts, per (table, vnode), the point keys of one live file
// within its bounds and with lo <= pk < hi, by reading the file directly.
// It returns false if the file vanished.
func physScanFile(t testing.TB, e *physEnv, f FileInfo, lo, hi []byte, into map[physVnodeKey]*physTruth) bool {
	file, err := e.fs.Open(e.fs.PathJoin(e.dir, fmt.Sprintf("%06d.sst", f.BackingNum)))
	if oserror.IsNotExist(err) {
		return false
	}
	require.NoError(t, err)
	readable, err := sstable.NewSimpleReadable(file)
	require.NoError(t, err)
	r, err := sstable.NewReader(context.Background(), readable, e.opts.MakeReaderOptions())
	require.NoError(t, err)
	defer r.Close()
	it, err := r.NewIter(sstable.NoTransforms, nil, nil, sstable.AssertNoBlobHandles)
	require.NoError(t, err)
	defer it.Close()
	var lastPrefix []byte
	for kv := it.First(); kv != nil; kv = it.Next() {
		uk := kv.K.UserKey
		if keys.Compare(uk, f.Smallest) < 0 {
			continue
		}
		if c := keys.Compare(uk, f.Largest); c > 0 || (c == 0 && f.LargestExclusive) {
			break
		}
		dk, err := keys.Decode(uk)
		if err != nil {
			continue
		}
		if (lo != nil && bytes.Compare(dk.PK, lo) < 0) || (hi != nil && bytes.Compare(dk.PK, hi) >= 0) {
			continue
		}
		vk := physVnodeKey{dk.Table, dk.Vnode}
		tr := into[vk]
		if tr == nil {
			tr = &physTruth{}
			into[vk] = tr
		}
		switch kv.K.Kind() {
		case pebble.InternalKeyKindSet, pebble.InternalKeyKindSetWithDelete:
		case pebble.InternalKeyKindSingleDelete, pebble.InternalKeyKindDelete:
			tr.tombstones++
			continue
		default:
			continue
		}
		prefix := uk[:keys.Split(uk)]
		if !bytes.Equal(prefix, lastPrefix) {
			lastPrefix = slices.Clone(prefix)
			tr.prefixes++
			if dk.Kind == keys.KindPut {
				tr.headPuts++
			}
		}
		if dk.Kind == keys.KindPut {
			tr.puts++
		} else {
			tr.deletes++
		}
		tr.keyBytes += uint64(len(uk))
	}
	require.NoError(t, it.Error())
	return true
}

// physScan sums physScanFile over the files of v; false if one vanished.
func physScan(t testing.TB, e *physEnv, v *Version, lo, hi []byte) (map[physVnodeKey]*physTruth, bool) {
	out := map[physVnodeKey]*physTruth{}
	for _, f := range Files(v) {
		if !physScanFile(t, e, f, lo, hi, out) {
			return nil, false
		}
	}
	return out, true
}

func requireContains(t testing.TB, e sstsummary.Estimate, truth uint64, msg string) {
	t.Helper()
	require.LessOrEqual(t, e.Lo, truth, msg)
	require.GreaterOrEqual(t, e.Hi, truth, msg)
	require.LessOrEqual(t, float64(e.Lo), e.Est, msg)
	require.GreaterOrEqual(t, float64(e.Hi), e.Est, msg)
}

// TestPhysicalRandomized runs random batches, GC deletes, ingests,
// flushes, compactions, excises and reopens on a real DB and, after each
// step, checks: incremental Version == recomputation; the NumEntries
// identity of every file; vnode counts == a direct scan of the live files;
// Range bounds contain the scanned truth for random pk ranges; and the
// model: visible puts <= physical puts <= visible puts + Pebble tombstones.
func TestPhysicalRandomized(t *testing.T) {
	base := physRand(t)
	// Several runs, each with its own configuration; all follow from the
	// seed printed above.
	runs := 4
	if physRace {
		runs = 1
	}
	for run := range runs {
		r := rand.New(rand.NewPCG(base.Uint64(), base.Uint64()))
		t.Run(fmt.Sprintf("run=%d", run), func(t *testing.T) { physRandomizedRun(t, r) })
	}
}

func physRandomizedRun(t *testing.T, r *rand.Rand) {
	auto := r.IntN(3) == 0
	format := pebble.FormatNewest
	if r.IntN(3) == 0 {
		format = pebble.FormatVirtualSSTables // row-based tables
	}
	t.Logf("automatic compactions: %t, format: %s", auto, format)
	e := openPhys(t, func(o *pebble.Options) {
		o.FormatMajorVersion = format
		o.DisableAutomaticCompactions = !auto
		o.L0CompactionThreshold = 2
		o.L0StopWritesThreshold = 1000 // no write stalls without compactions
		o.MemTableSize = 1 << 20
	})
	if auto {
		e.tr.Start()
	}
	m := &physModel{versions: map[string]*physVersion{}}
	var epoch uint64
	const nTables, nVnodes, nPKs = 2, 4, 1500

	randKey := func(kind byte) []byte {
		epoch++
		return physKey(uint32(1+r.IntN(nTables)), uint16(r.IntN(nVnodes)), uint64(r.IntN(nPKs)), epoch, kind)
	}
	record := func(k []byte) {
		dk, err := keys.Decode(k)
		require.NoError(t, err)
		m.versions[string(k)] = &physVersion{key: dk}
	}
	gcCandidates := func(n int) [][]byte {
		var out [][]byte
		for k, v := range m.versions {
			if !v.gced && !v.excised && r.IntN(8) == 0 {
				out = append(out, []byte(k))
				if len(out) == n {
					break
				}
			}
		}
		return out
	}

	steps := 60
	if physRace {
		steps = 30
	}
	// Without automatic compactions nothing races the refreshes, so a
	// tracker lists exactly at its first refresh and after each excise;
	// every other refresh follows the changes the events reported.
	listings, refreshed := uint64(1), false
	checkListings := func() {
		c := e.tr.RefreshCounts()
		t.Logf("tracker: %d refreshes, %d listings (%d expected), %d changed files", c.Refreshes, c.Listings, listings, c.ChangedFiles)
		if !auto && c.Refreshes > 0 { // a reopen may come before any
			require.Equal(t, listings, c.Listings, "listings")
		}
	}
	var stepsDone []string
	defer func() {
		v := e.tr.Current()
		t.Logf("steps: %v; %d files, %d + %d entries", stepsDone, v.NumFiles(), tableEntries(v, 1), tableEntries(v, 2))
	}()
	for step := 0; step < steps; step++ {
		var what string
		switch p := r.IntN(100); {
		case p < 40:
			what = "batch"
			b := e.db.NewBatch()
			for range 50 + r.IntN(1000) {
				kind := keys.KindPut
				if r.IntN(4) == 0 {
					kind = keys.KindDelete
				}
				k := randKey(kind)
				val := physValue(100)
				if kind == keys.KindDelete {
					val = nil
				}
				require.NoError(t, b.Set(k, val, nil))
				record(k)
			}
			if r.IntN(3) == 0 {
				require.NoError(t, b.Set(keys.MetaKey([]byte(keys.CommittedEpochName)), []byte{byte(epoch)}, nil))
			}
			for _, k := range gcCandidates(20) {
				require.NoError(t, b.SingleDelete(k, nil))
				m.versions[string(k)].gced = true
			}
			require.NoError(t, b.Commit(pebble.NoSync))
		case p < 55:
			what = "flush"
			require.NoError(t, e.db.Flush())
		case p < 67:
			what = "ingest"
			var ops []physOp
			seen := map[string]bool{}
			for range 20 + r.IntN(300) {
				kind := keys.KindPut
				if r.IntN(5) == 0 {
					kind = keys.KindDelete
				}
				k := randKey(kind)
				if seen[string(k)] {
					continue
				}
				seen[string(k)] = true
				ops = append(ops, physOp{key: k, kind: pebble.InternalKeyKindSet, val: physValue(100)})
				record(k)
			}
			e.ingest(ops, nil)
		case p < 80:
			what = "compact"
			if r.IntN(2) == 0 {
				e.compactAll()
			} else {
				table := uint32(1 + r.IntN(nTables))
				vnode := uint16(r.IntN(nVnodes))
				start := keys.AppendPrefix(nil, table, vnode, physPK(uint64(r.IntN(nPKs))))
				end := keys.AppendVnodeBound(nil, table, vnode+1)
				require.NoError(t, e.db.Compact(context.Background(), start, end, false))
			}
		case p < 90 && format >= pebble.FormatVirtualSSTables:
			what = "excise"
			require.NoError(t, e.db.Flush())
			table := uint32(1 + r.IntN(nTables))
			vnode := uint16(r.IntN(nVnodes))
			lo := uint64(r.IntN(nPKs))
			hi := lo + 1 + uint64(r.IntN(nPKs/10))
			_, err := e.db.IngestAndExcise(context.Background(), nil, nil, nil, pebble.KeyRange{
				Start: keys.AppendPrefix(nil, table, vnode, physPK(lo)),
				End:   keys.AppendPrefix(nil, table, vnode, physPK(hi)),
			})
			require.NoError(t, err)
			// An excise without files fires no event: whoever excises
			// refreshes (a listing).
			require.NoError(t, e.tr.Refresh())
			if refreshed { // else this was the first listing
				listings++
			}
			for _, v := range m.versions {
				pk := physPKNum(v.key.PK)
				if v.key.Table == table && v.key.Vnode == vnode && pk >= lo && pk < hi {
					v.excised = true
				}
			}
		case p < 95:
			what = "reopen"
			checkListings()
			listings, refreshed = 1, false
			e.reopen()
			if auto {
				e.tr.Start()
			}
		default:
			what = "refresh"
		}
		physCheckStep(t, e, m, r, fmt.Sprintf("step %d (%s)", step, what))
		refreshed = true
		stepsDone = append(stepsDone, what)
	}
	checkListings()
}

// physCheckStep flushes, then runs every check of TestPhysicalRandomized.
// With automatic compactions the file set may change under the checks: they
// retry until one file set holds still.
func physCheckStep(t *testing.T, e *physEnv, m *physModel, r *rand.Rand, step string) {
	require.NoError(t, e.db.Flush())
	for attempt := 0; ; attempt++ {
		require.Less(t, attempt, 50, "%s: the file set never held still", step)
		if attempt > 0 {
			time.Sleep(5 * time.Millisecond)
		}
		// From the changes the events reported (a listing only if they do
		// not add up).
		require.NoError(t, e.tr.RefreshSignalled(), step)
		v := e.tr.Current()
		rv, err := e.tr.Recompute()
		require.NoError(t, err)
		if !physSameFiles(v, rv) {
			continue
		}
		require.NoError(t, DiffVersions(v, rv), step)
		for _, f := range Files(v) {
			require.NoError(t, CheckFile(f), step)
		}
		require.Empty(t, Rebuilt(v), step)
		if !physMatchesScan(t, e, v, step) {
			continue
		}

		// Range bounds contain the truth.
		for range 8 {
			table := uint32(1 + r.IntN(2))
			vnode := uint16(r.IntN(4))
			var lo, hi []byte
			if r.IntN(4) != 0 {
				lo = physPK(uint64(r.IntN(1600)))
			}
			if r.IntN(4) != 0 {
				hi = physPK(uint64(r.IntN(1600)))
			}
			if r.IntN(5) == 0 {
				// A pk that is not a u64 encoding: any bytes are bounds.
				lo = []byte{0, 0, 0, 0, 0, 0, byte(r.IntN(8))}
			}
			rt, ok := physScan(t, e, v, lo, hi)
			if !ok {
				break
			}
			var tr physTruth
			if x := rt[physVnodeKey{table, vnode}]; x != nil && (lo == nil || hi == nil || bytes.Compare(lo, hi) < 0) {
				tr = *x
			}
			rc := CountRange(v, table, vnode, lo, hi)
			msg := fmt.Sprintf("%s: t%d/v%d [%x, %x)", step, table, vnode, lo, hi)
			requireContains(t, rc.Puts, tr.puts, msg+" puts")
			requireContains(t, rc.Deletes, tr.deletes, msg+" deletes")
			requireContains(t, rc.HeadPuts, tr.headPuts, msg+" head puts")
			requireContains(t, rc.Prefixes, tr.prefixes, msg+" prefixes")
			requireContains(t, rc.Entries, tr.puts+tr.deletes, msg+" entries")
		}

		// The model: visible puts (a Pebble iterator; SINGLEDEL hides
		// versions) <= physical puts <= visible + Pebble tombstones.
		visible := map[physVnodeKey]uint64{}
		it, err := e.db.NewIter(nil)
		require.NoError(t, err)
		for it.First(); it.Valid(); it.Next() {
			dk, err := keys.Decode(it.Key())
			if err != nil {
				continue
			}
			if dk.Kind == keys.KindPut {
				visible[physVnodeKey{dk.Table, dk.Vnode}]++
			}
		}
		require.NoError(t, it.Close())
		model := map[physVnodeKey]uint64{}
		for _, mv := range m.versions {
			if mv.key.Kind == keys.KindPut && !mv.gced && !mv.excised {
				model[physVnodeKey{mv.key.Table, mv.key.Vnode}]++
			}
		}
		require.Equal(t, model, visible, "%s: model vs iterator", step)
		for vk, vis := range visible {
			c := v.Vnode(vk.table, vk.vnode)
			require.LessOrEqual(t, vis, c.Puts, "%s: %v", step, vk)
			require.LessOrEqual(t, c.Puts, vis+c.PebbleTombstones, "%s: %v", step, vk)
		}
		return
	}
}

// physMatchesScan checks that every vnode's counts equal a direct scan of
// the live files; false if a file vanished.
func physMatchesScan(t testing.TB, e *physEnv, v *Version, step string) bool {
	truth, ok := physScan(t, e, v, nil, nil)
	if !ok {
		return false
	}
	var n int
	for _, id := range v.Tables() {
		for _, vn := range v.Vnodes(id) {
			c := v.Vnode(id, vn)
			tr := truth[physVnodeKey{id, vn}]
			require.NotNil(t, tr, "%s: t%d/v%d", step, id, vn)
			require.Equal(t, *tr, physTruth{c.Puts, c.Deletes, c.HeadPuts, c.Prefixes, c.PebbleTombstones, c.KeyBytes},
				"%s: t%d/v%d", step, id, vn)
			n++
		}
	}
	require.Len(t, truth, n, step)
	return true
}

func physSameFiles(a, b *Version) bool {
	fa, fb := Files(a), Files(b)
	if len(fa) != len(fb) {
		return false
	}
	for i := range fa {
		if fa[i].FileNum != fb[i].FileNum || fa[i].Level != fb[i].Level {
			return false
		}
	}
	return true
}
