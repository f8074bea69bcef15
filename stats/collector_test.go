package stats

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
	c := newCollector()
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
		c := newCollector()
		for _, op := range ops {
			require.NoError(t, c.AddPointKey(pebble.MakeInternalKey(op.key, 1, op.kind), nil))
		}
		strides := map[uint16]uint64{}
		for _, a := range c.vnodes {
			strides[a.vnode] = max(a.stride, c.globalStride)
		}
		s := c.Summary()

		interior := 0
		byVnode := map[uint16][]keys.Key{}
		for _, op := range ops {
			dk, err := keys.Decode(op.key)
			require.NoError(t, err)
			byVnode[dk.Vnode] = append(byVnode[dk.Vnode], dk)
		}
		for _, vs := range s.Tables[0].Vnodes {
			// Truth per prefix, in order.
			type prefixTruth struct {
				pk      []byte
				before  Sample
				entries uint64
			}
			var prefixes []prefixTruth
			var cum Sample
			var m uint64
			for _, dk := range byVnode[vs.Vnode] {
				if len(prefixes) == 0 || !bytes.Equal(prefixes[len(prefixes)-1].pk, dk.PK) {
					prefixes = append(prefixes, prefixTruth{pk: dk.PK, before: cum})
					cum.Prefixes++
					if dk.Kind == keys.KindPut {
						cum.HeadPuts++
					}
				}
				p := &prefixes[len(prefixes)-1]
				p.entries++
				m = max(m, p.entries)
				if dk.Kind == keys.KindPut {
					cum.Puts++
				} else {
					cum.Deletes++
				}
			}
			require.LessOrEqual(t, len(vs.Samples()), maxVnodeSamples)
			require.Equal(t, prefixes[len(prefixes)-1].pk, vs.LastPK)
			require.Equal(t, prefixes[0].pk, vs.Samples()[0].PK)
			interior += len(vs.Samples()) - 1
			k := 0
			for _, sm := range vs.Samples() {
				for !bytes.Equal(prefixes[k].pk, sm.PK) {
					k++
				}
				want := prefixes[k].before
				want.PK = sm.PK
				require.Equal(t, want, sm, "vnode %d sample at prefix %d", vs.Vnode, k)
			}
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

// TestDecodeTableKeyAgrees: the collector's shape checks accept exactly the
// keys keys.Decode accepts, and decodeTableKey returns Decode's fields.
func TestDecodeTableKeyAgrees(t *testing.T) {
	r := physRand(t)
	check := func(uk []byte) {
		table, ok := keys.TableOf(uk)
		p := keys.Split(uk)
		accepted := ok && table != keys.MetaTable && p < len(uk) && p > vnodeHeaderLen
		dk, err := keys.Decode(uk)
		require.Equal(t, err == nil, accepted, "%x", uk)
		if accepted {
			got := decodeTableKey(uk, p)
			dk.Version = 0
			require.Equal(t, dk, got, "%x", uk)
		}
	}
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
		check(uk)
	}
}

// decodeTableKey returns what keys.Decode returns (but the version) for a
// key that passed add's checks, which are exactly the conditions under
// which keys.Decode succeeds; add reads the same fields in place
// (TestDecodeTableKeyAgrees checks both on random bytes). Calling
// keys.Decode itself cost a third of the collector's time (a 64-byte result
// and an error per key), and building this struct per key still cost a
// tenth; the layout is the normative one of design §3: table u32 | vnode
// u16 | pk | 0x00 | suffix, and the kind is the byte before the final 0x0A.
func decodeTableKey(uk []byte, p int) keys.Key {
	table, vnode, _ := keys.Header(uk)
	return keys.Key{Table: table, Vnode: vnode, PK: uk[vnodeHeaderLen : p-1], Kind: uk[len(uk)-2]}
}
