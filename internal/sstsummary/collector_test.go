package sstsummary

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// physCollect feeds sorted ops to a fresh collector.
func physCollect(t testing.TB, ops []physOp) *FileSummary {
	c := NewScanCollector()
	for _, op := range ops {
		require.NoError(t, c.AddPointKey(pebble.MakeInternalKey(op.key, 1, op.kind), nil))
	}
	return c.Summary()
}

func TestCollectorClassification(t *testing.T) {
	ops := physParseOps(t, `
put 1 0 1 9
put 1 0 1 8
del 1 0 1 7
gcdel 1 0 1 6
pdel 1 0 1 5
del 1 0 2 9
put 1 0 3 9
merge 1 0 4 9
put 1 7 1 9
put 2 3 5 9
meta committed_epoch
meta format_version
foreign \x00\x01
`)
	// A DELSIZED on a table key is a Pebble tombstone too.
	ops = append(ops, physOp{key: physKey(2, 3, 6, 1, keys.KindPut), kind: pebble.InternalKeyKindDeleteSized})
	slices.SortStableFunc(ops, func(a, b physOp) int { return keys.Compare(a.key, b.key) })
	s := physCollect(t, ops)
	require.Equal(t, uint64(2), s.MetaKeys)
	require.Equal(t, uint64(2), s.Foreign) // the foreign key and the MERGE
	require.Len(t, s.Tables, 2)

	v := s.Vnode(1, 0)
	require.NotNil(t, v)
	require.Equal(t, Counts{
		Entries: 5, Puts: 3, Deletes: 2, Prefixes: 3, HeadPuts: 2,
		KeyBytes: 5 * uint64(len(physKey(1, 0, 1, 1, 1))), PebbleTombstones: 2,
	}, v.Counts)
	require.Equal(t, uint64(1), v.Counts.HeadDeletes())
	require.Equal(t, physPK(1), v.Samples()[0].PK)
	require.Equal(t, physPK(3), v.LastPK)
	// Stride 1: every prefix head is a sample, with the counts before it.
	require.Len(t, v.Samples(), 3)
	require.Equal(t, Sample{PK: physPK(2), Puts: 2, Deletes: 1, HeadPuts: 1, Prefixes: 1}, v.Samples()[1])
	require.Equal(t, Sample{PK: physPK(3), Puts: 2, Deletes: 2, HeadPuts: 1, Prefixes: 2}, v.Samples()[2])

	v = s.Vnode(2, 3)
	require.Equal(t, uint64(1), v.Counts.Puts)
	require.Equal(t, uint64(1), v.Counts.PebbleTombstones)
	require.Nil(t, s.Vnode(2, 4))
	require.Equal(t, uint64(len(ops)), s.PointKeys())
}

// TestCollectorTombstoneOnlyVnode: a vnode that only has GC tombstones has
// counts but no samples.
func TestCollectorTombstoneOnlyVnode(t *testing.T) {
	s := physCollect(t, physParseOps(t, "gcdel 5 5 1 1\ngcdel 5 5 2 1\nput 5 6 1 1"))
	v := s.Vnode(5, 5)
	require.Equal(t, Counts{PebbleTombstones: 2}, v.Counts)
	require.Nil(t, v.Samples())
	require.Nil(t, v.LastPK)
	got, err := DecodeSummary(s.Encode())
	require.NoError(t, err)
	require.Equal(t, s, got)
}

// physRandomOps returns sorted MVCC puts/deletes over nVnodes vnodes of
// table 1 with up to maxVersions versions per pk, plus their truth.
func physRandomOps(r *rand.Rand, nVnodes, pksPerVnode, maxVersions int) []physOp {
	var ops []physOp
	for v := range nVnodes {
		for pk := range pksPerVnode {
			n := 1 + r.IntN(maxVersions)
			for e := n; e >= 1; e-- { // newest first, as keys sort
				kind := keys.KindPut
				if r.IntN(4) == 0 {
					kind = keys.KindDelete
				}
				ops = append(ops, physOp{key: physKey(1, uint16(v), uint64(pk)*3, uint64(e), kind), kind: pebble.InternalKeyKindSet})
			}
		}
	}
	slices.SortStableFunc(ops, func(a, b physOp) int { return keys.Compare(a.key, b.key) })
	return ops
}

// TestCollectorSamplingInvariants checks, on random SSTs of several shapes,
// that samples sit at prefix heads with exact cumulative counts, that there
// are at most maxVnodeSamples per vnode and about one per entriesPerSample
// entries overall, and the documented gap bound.
func TestCollectorSamplingInvariants(t *testing.T) {
	r := physRand(t)
	for _, shape := range []struct{ vnodes, pks, versions int }{
		{1, 10, 1}, {1, 5000, 1}, {1, 3000, 6}, {4, 20000, 2}, {256, 200, 3}, {300, 3, 2}, {2, 50000, 1},
	} {
		ops := physRandomOps(r, shape.vnodes, shape.pks, shape.versions)
		c := NewScanCollector()
		for _, op := range ops {
			require.NoError(t, c.AddPointKey(pebble.MakeInternalKey(op.key, 1, op.kind), nil))
		}
		strides := map[uint16]uint64{}
		for _, a := range c.vnodes {
			strides[a.vnode] = max(a.stride, c.globalStride)
		}
		s := c.Summary()

		interior := 0
		ref := referenceCollect(ops)
		for _, vs := range s.Tables[0].Vnodes {
			m := requireSamplesAtHeads(t, vs, ref.heads[[2]uint32{s.Tables[0].Table, uint32(vs.Vnode)}])
			require.LessOrEqual(t, len(vs.Samples()), maxVnodeSamples)
			interior += len(vs.Samples()) - 1
			S := strides[vs.Vnode]
			ends := append(vs.Samples(), Sample{Puts: vs.Counts.Puts, Deletes: vs.Counts.Deletes})
			for i := 1; i < len(ends); i++ {
				gap := ends[i].Entries() - ends[i-1].Entries()
				require.Less(t, gap, 2*S+m, "vnode %d gap %d stride %d m %d", vs.Vnode, i, S, m)
			}
		}
		var entries uint64
		for _, vs := range s.Tables[0].Vnodes {
			entries += vs.Counts.Entries
		}
		require.LessOrEqual(t, interior, int(max(minSampleBudget, entries/entriesPerSample)), "shape %+v", shape)
		t.Logf("shape %+v: %d entries, %d samples beyond the first, %d payload bytes",
			shape, entries, interior, len(s.Encode()))
	}
}

// TestCollectorShortIDEndToEnd writes SSTs with the sstable writer, with our
// collector at different positions among the collectors, and checks that the
// stored property starts with Pebble's shortID byte, that DecodeSummary skips
// it, and that the summary equals feeding the keys to a collector directly.
func TestCollectorShortIDEndToEnd(t *testing.T) {
	fs := vfs.NewMem()
	ops := physRandomOps(rand.New(rand.NewPCG(1, 2)), 3, 500, 3)
	ops = append(ops, physParseOps(t, "meta x\ngcdel 2 0 1 1")...)
	slices.SortStableFunc(ops, func(a, b physOp) int { return keys.Compare(a.key, b.key) })
	want := physCollect(t, ops)
	other := func(name string) func() pebble.BlockPropertyCollector {
		return func() pebble.BlockPropertyCollector { return &physNopCollector{name: name} }
	}
	for _, format := range []sstable.TableFormat{sstable.TableFormatPebblev4, sstable.TableFormatMax} {
		for pos, collectors := range [][]func() pebble.BlockPropertyCollector{
			{NewCollector},
			{other("a"), NewCollector},
			{other("a"), other("b"), NewCollector},
		} {
			f, err := fs.Create("t.sst", vfs.WriteCategoryUnspecified)
			require.NoError(t, err)
			w := sstable.NewRawWriter(objstorageprovider.NewFileWritable(f), sstable.WriterOptions{
				Comparer:                keys.Comparer,
				TableFormat:             format,
				BlockPropertyCollectors: collectors,
			})
			for _, op := range ops {
				require.NoError(t, w.Add(pebble.MakeInternalKey(op.key, 0, op.kind), op.val, false))
			}
			require.NoError(t, w.Close())

			rf, err := fs.Open("t.sst")
			require.NoError(t, err)
			readable, err := sstable.NewSimpleReadable(rf)
			require.NoError(t, err)
			opts := (&pebble.Options{Comparer: keys.Comparer})
			opts.EnsureDefaults()
			rd, err := sstable.NewReader(t.Context(), readable, opts.MakeReaderOptions())
			require.NoError(t, err)
			prop := []byte(rd.UserProperties[CollectorName])
			props, err := rd.ReadPropertiesBlock(t.Context(), nil)
			require.NoError(t, err)
			require.NoError(t, rd.Close())

			require.Equal(t, byte(pos), prop[0], "format %s: shortID", format)
			got, err := DecodeSummary(prop)
			require.NoError(t, err)
			require.Equal(t, want, got)
			require.Equal(t, props.NumEntries, got.PointKeys()+props.NumRangeDeletions)
		}
	}
}

type physNopCollector struct{ name string }

func (c physNopCollector) Name() string                                         { return "lsmstats.test." + c.name }
func (physNopCollector) AddPointKey(sstable.InternalKey, []byte) error          { return nil }
func (physNopCollector) AddRangeKeys(sstable.Span) error                        { return nil }
func (physNopCollector) AddCollectedWithSuffixReplacement(_, _, _ []byte) error { return nil }
func (physNopCollector) SupportsSuffixReplacement() bool                        { return false }
func (physNopCollector) FinishDataBlock(b []byte) ([]byte, error)               { return b, nil }
func (physNopCollector) AddPrevDataBlockToIndexBlock()                          {}
func (physNopCollector) FinishIndexBlock(b []byte) ([]byte, error)              { return b, nil }
func (physNopCollector) FinishTable(b []byte) ([]byte, error)                   { return append(b, 'n'), nil }

// TestCollectorShapeChecks: the collector counts as an MVCC entry of a
// (table, vnode) exactly the keys keys.Decode accepts outside the metadata
// table, with Decode's table, vnode, pk and kind (the reference's counts and
// last pk), and everything else as metadata or foreign — on valid keys,
// damaged and truncated ones, metadata-table bytes and random bytes, one
// key per SST. add reads those fields in place instead of calling
// keys.Decode, which cost a third of the collector's time.
func TestCollectorShapeChecks(t *testing.T) {
	r := physRand(t)
	alphabet := []byte{0x00, 0x01, 0x0A, 0xFF, 0x7F}
	for range 200000 {
		var uk []byte
		switch r.IntN(3) {
		case 0: // a valid key, maybe damaged
			uk = physKey(uint32(r.IntN(3)), uint16(r.IntN(3)), uint64(r.IntN(5)), uint64(r.IntN(5)), byte(r.IntN(2)))
			if r.IntN(2) == 0 {
				uk[r.IntN(len(uk))] = alphabet[r.IntN(len(alphabet))]
			}
			if r.IntN(4) == 0 {
				uk = uk[:r.IntN(len(uk)+1)]
			}
		case 1: // metadata-table bytes
			uk = append([]byte{0xFF, 0xFF, 0xFF, 0xFF}, physKey(1, 1, 1, 1, 1)[r.IntN(10):]...)
		default: // random bytes from a small alphabet
			for range r.IntN(24) {
				uk = append(uk, alphabet[r.IntN(len(alphabet))])
			}
		}
		requireMatchesReference(t, []physOp{{key: uk, kind: pebble.InternalKeyKindSet}})
	}
}

// collectorTestKeys returns sorted, distinct point keys of every shape the
// collector classifies: MVCC entries with pks of 0 to 40 bytes that share
// long prefixes and differ at any position (so that each of the word and
// byte paths of lastPrefix meets prefixes that differ in one byte only),
// Pebble tombstones, MERGEs, metadata keys, and foreign keys.
func collectorTestKeys(r *rand.Rand, n int) []physOp {
	alphabet := []byte{0x00, 0x01, 0x0A, 0xFF, 'a'}
	randPK := func() []byte {
		// Half of them short and from two letters, so that neighbours
		// often differ in one early byte only.
		pk := make([]byte, r.IntN(41))
		letters := alphabet
		if r.IntN(2) == 0 {
			pk, letters = pk[:len(pk)%12], alphabet[:2]
		}
		for i := range pk {
			pk[i] = letters[r.IntN(len(letters))]
		}
		return pk
	}
	var pks [][]byte
	var ops []physOp
	for len(ops) < n {
		switch x := r.IntN(100); {
		case x < 2:
			ops = append(ops, physOp{key: keys.MetaKey(randPK()), kind: pebble.InternalKeyKindSet})
		case x < 4:
			ops = append(ops, physOp{key: randPK(), kind: pebble.InternalKeyKindSet})
		default:
			var pk []byte
			switch {
			case len(pks) == 0 || r.IntN(3) == 0:
				pk = randPK()
			case r.IntN(3) == 0:
				// The same pk in another (table, vnode): prefixes that
				// differ in their header only.
				pk = pks[r.IntN(len(pks))]
			default:
				// A neighbour of an earlier pk: one byte changed, or one
				// appended or dropped.
				pk = slices.Clone(pks[r.IntN(len(pks))])
				switch {
				case len(pk) > 0 && r.IntN(2) == 0:
					pk[r.IntN(len(pk))] = alphabet[r.IntN(len(alphabet))]
				case len(pk) > 0 && r.IntN(2) == 0:
					pk = pk[:len(pk)-1]
				default:
					pk = append(pk, alphabet[r.IntN(len(alphabet))])
				}
			}
			pks = append(pks, pk)
			table, vnode := uint32(r.IntN(3)), uint16(r.IntN(4))
			for e := 1 + r.IntN(3); e >= 1; e-- {
				kind := pebble.InternalKeyKindSet
				switch y := r.IntN(20); {
				case y == 0:
					kind = pebble.InternalKeyKindSetWithDelete
				case y == 1:
					kind = pebble.InternalKeyKindDelete
				case y == 2:
					kind = pebble.InternalKeyKindSingleDelete
				case y == 3:
					kind = pebble.InternalKeyKindMerge
				}
				mvcc := keys.KindPut
				if r.IntN(4) == 0 {
					mvcc = keys.KindDelete
				}
				uk := keys.AppendVersioned(nil, table, vnode, pk, keys.MakeVersion(uint64(e), 0), mvcc)
				ops = append(ops, physOp{key: uk, kind: kind})
			}
		}
	}
	slices.SortStableFunc(ops, func(a, b physOp) int { return keys.Compare(a.key, b.key) })
	return slices.CompactFunc(ops, func(a, b physOp) bool { return keys.Compare(a.key, b.key) == 0 })
}

// collectorReference is the collector's counting spelled out with
// keys.Decode and byte comparisons: per (table, vnode) the Counts and the
// prefix heads in order, each with the counts before it (a sample taken
// there must carry them); and the keys counted apart.
type collectorReference struct {
	metaKeys, foreign uint64
	counts            map[[2]uint32]*Counts
	heads             map[[2]uint32][]prefixHead
}

// prefixHead is the first entry of an MVCC prefix of a vnode.
type prefixHead struct {
	pk      []byte
	before  Sample // the vnode's counts before the prefix
	entries uint64 // the prefix's versions
}

func referenceCollect(ops []physOp) collectorReference {
	ref := collectorReference{counts: map[[2]uint32]*Counts{}, heads: map[[2]uint32][]prefixHead{}}
	var lastPrefix []byte
	var lastID [2]uint32
	for _, op := range ops {
		if _, ok := keys.MetaName(op.key); ok {
			ref.metaKeys++
			continue
		}
		dk, err := keys.Decode(op.key)
		if err != nil {
			ref.foreign++
			continue
		}
		if op.kind == pebble.InternalKeyKindMerge {
			ref.foreign++
			continue
		}
		id := [2]uint32{dk.Table, uint32(dk.Vnode)}
		c := ref.counts[id]
		if c == nil {
			c = &Counts{}
			ref.counts[id] = c
		}
		if op.kind != pebble.InternalKeyKindSet && op.kind != pebble.InternalKeyKindSetWithDelete {
			c.PebbleTombstones++
			continue
		}
		prefix := keys.AppendPrefix(nil, dk.Table, dk.Vnode, dk.PK)
		if id != lastID || !bytes.Equal(prefix, lastPrefix) {
			before := Sample{Puts: c.Puts, Deletes: c.Deletes, HeadPuts: c.HeadPuts, Prefixes: c.Prefixes}
			ref.heads[id] = append(ref.heads[id], prefixHead{pk: dk.PK, before: before})
			c.Prefixes++
			if dk.Kind == keys.KindPut {
				c.HeadPuts++
			}
			lastPrefix, lastID = prefix, id
		}
		hs := ref.heads[id]
		hs[len(hs)-1].entries++
		c.Entries++
		if dk.Kind == keys.KindPut {
			c.Puts++
		} else {
			c.Deletes++
		}
		c.KeyBytes += uint64(len(op.key))
	}
	return ref
}

// requireSamplesAtHeads checks a vnode's samples against its prefix heads:
// the first sample is at the first head, every sample is at a head (in
// order) and carries the counts before it, and the last pk is the last
// head's. It returns the largest number of versions of a prefix.
func requireSamplesAtHeads(t *testing.T, vs VnodeSummary, heads []prefixHead) (maxEntries uint64) {
	t.Helper()
	require.NotEmpty(t, heads, "v%d", vs.Vnode)
	require.Equal(t, heads[len(heads)-1].pk, vs.LastPK, "v%d last pk", vs.Vnode)
	samples := vs.Samples()
	require.NotEmpty(t, samples, "v%d has prefixes but no sample", vs.Vnode)
	require.True(t, bytes.Equal(heads[0].pk, samples[0].PK), "v%d: the first sample is at %x, the first prefix at %x", vs.Vnode, samples[0].PK, heads[0].pk)
	k := 0
	for _, sm := range samples {
		for k < len(heads) && !bytes.Equal(heads[k].pk, sm.PK) {
			k++
		}
		require.Less(t, k, len(heads), "v%d: sample at %x is not a prefix head, in order", vs.Vnode, sm.PK)
		want := heads[k].before
		want.PK = sm.PK
		require.Equal(t, want, sm, "v%d sample at prefix %d", vs.Vnode, k)
	}
	for _, h := range heads {
		maxEntries = max(maxEntries, h.entries)
	}
	return maxEntries
}

// TestCollectorMatchesReference checks the collector's summary against the
// reference on random keys of every shape and pk length.
func TestCollectorMatchesReference(t *testing.T) {
	r := physRand(t)
	for range 300 {
		// Sizes log-uniform in [1, 4096]: in small SSTs the last pk of a
		// vnode is often the first of the next.
		requireMatchesReference(t, collectorTestKeys(r, 1<<r.IntN(13)+r.IntN(1<<r.IntN(12))))
	}
}

// requireMatchesReference feeds ops to the collector and checks its summary
// against referenceCollect's, and its payload's round trip.
func requireMatchesReference(t *testing.T, ops []physOp) {
	t.Helper()
	ref := referenceCollect(ops)
	s := physCollect(t, ops)
	require.Equal(t, ref.metaKeys, s.MetaKeys)
	require.Equal(t, ref.foreign, s.Foreign)
	n := 0
	for _, ts := range s.Tables {
		for _, vs := range ts.Vnodes {
			n++
			id := [2]uint32{ts.Table, uint32(vs.Vnode)}
			require.NotNil(t, ref.counts[id], "t%d/v%d", ts.Table, vs.Vnode)
			require.Equal(t, *ref.counts[id], vs.Counts, "t%d/v%d", ts.Table, vs.Vnode)
			if heads := ref.heads[id]; len(heads) > 0 {
				requireSamplesAtHeads(t, vs, heads)
			} else {
				require.Empty(t, vs.Samples(), "t%d/v%d: samples without a prefix", ts.Table, vs.Vnode)
			}
		}
	}
	require.Len(t, ref.counts, n)
	require.Equal(t, uint64(len(ops)), s.PointKeys())
	got, err := DecodeSummary(s.Encode())
	require.NoError(t, err)
	require.Equal(t, s, got)
}

// TestCollectorReuse: a collector reset for another SST, and collectors
// from the pool used by concurrent writers, produce exactly the payload of
// a fresh collector, whatever the SSTs before them held.
func TestCollectorReuse(t *testing.T) {
	r := physRand(t)
	var ssts [][]physOp
	for range 12 {
		if r.IntN(2) == 0 {
			ssts = append(ssts, collectorTestKeys(r, 1+r.IntN(2000)))
		} else {
			ssts = append(ssts, physRandomOps(r, 1+r.IntN(40), 1+r.IntN(300), 1+r.IntN(3)))
		}
	}
	want := make([][]byte, len(ssts))
	for i, ops := range ssts {
		want[i] = physCollect(t, ops).Encode()
	}
	finish := func(c pebble.BlockPropertyCollector, ops []physOp) []byte {
		for _, op := range ops {
			require.NoError(t, c.AddPointKey(pebble.MakeInternalKey(op.key, 1, op.kind), nil))
		}
		b, err := c.FinishTable([]byte{0})
		require.NoError(t, err)
		return b
	}

	c := NewScanCollector()
	for i, ops := range ssts {
		require.Equal(t, want[i], finish(c, ops), "sst %d after reset", i)
		c.reset()
	}

	done := make(chan struct{})
	for g := range 2 {
		go func() {
			defer func() { done <- struct{}{} }()
			for k := range 3 * len(ssts) {
				i := (k + g) % len(ssts)
				if got := finish(NewCollector(), ssts[i]); !bytes.Equal(want[i], got) {
					t.Errorf("goroutine %d, sst %d: pooled collector's payload differs", g, i)
					return
				}
			}
		}()
	}
	<-done
	<-done
}
