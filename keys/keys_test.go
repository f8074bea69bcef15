package keys

import (
	"bytes"
	"cmp"
	"flag"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/stretchr/testify/require"
)

var seedFlag = flag.Uint64("seed", 0, "seed for randomized tests (0: testutil.DefaultSeed, or time based with -random-seeds)")

func testRand(t testing.TB) *rand.Rand {
	seed := testutil.Seed(t, "seed", *seedFlag)
	return rand.New(rand.NewPCG(seed, seed))
}

type tuple struct {
	u uint64
	i int64
	b []byte
}

var tupleSchema = Schema{Uint64, Int64, Bytes}

func (a tuple) compare(b tuple) int {
	return cmp.Or(cmp.Compare(a.u, b.u), cmp.Compare(a.i, b.i), bytes.Compare(a.b, b.b))
}

func (a tuple) encode(t testing.TB) []byte {
	pk, err := tupleSchema.Encode(nil, a.u, a.i, a.b)
	require.NoError(t, err)
	return pk
}

func randTuple(r *rand.Rand) tuple {
	// Small alphabets make ties and escapes likely.
	tu := tuple{u: uint64(r.IntN(4)), i: int64(r.IntN(5)) - 2}
	if r.IntN(8) == 0 {
		tu.u = math.MaxUint64 - uint64(r.IntN(2))
		tu.i = math.MinInt64 + int64(r.IntN(2))
	}
	n := r.IntN(5)
	for range n {
		tu.b = append(tu.b, []byte{0x00, 0x01, 0xFF, 'a'}[r.IntN(4)])
	}
	return tu
}

// TestPKOrderAndPrefixFree checks the two properties the comparer relies on:
// byte order of encodings is tuple order, and no encoding is a proper prefix
// of another.
func TestPKOrderAndPrefixFree(t *testing.T) {
	r := testRand(t)
	for range 20000 {
		a, b := randTuple(r), randTuple(r)
		ea, eb := a.encode(t), b.encode(t)
		require.Equal(t, a.compare(b), bytes.Compare(ea, eb), "%+v vs %+v", a, b)
		if a.compare(b) != 0 {
			require.False(t, bytes.HasPrefix(ea, eb) || bytes.HasPrefix(eb, ea), "%x / %x", ea, eb)
		}
		vals, err := tupleSchema.Decode(ea)
		require.NoError(t, err)
		require.Equal(t, a.u, vals[0])
		require.Equal(t, a.i, vals[1])
		require.Equal(t, string(a.b), string(vals[2].([]byte)))
	}
}

func TestPKValidateRejects(t *testing.T) {
	for _, tc := range []struct {
		schema Schema
		pk     []byte
	}{
		{Schema{Uint64}, []byte{1, 2, 3}},                    // short
		{Schema{Uint64}, make([]byte, 9)},                    // trailing byte
		{Schema{Bytes}, []byte("abc")},                       // no terminator
		{Schema{Bytes}, []byte{'a', 0x00}},                   // ends inside escape
		{Schema{Bytes}, []byte{'a', 0x00, 0x07, 0x00, 0x01}}, // bad escape
		{Schema{Bytes, Uint64}, AppendBytes(nil, []byte("x"))},
	} {
		err := tc.schema.Validate(tc.pk)
		require.Error(t, err, "%s %x", tc.schema, tc.pk)
		require.True(t, errors.Is(err, ErrInvalidPK), "%v", err)
	}
	s, err := ParseSchema("u64,i64,bytes")
	require.NoError(t, err)
	require.Equal(t, tupleSchema, s)
	require.Equal(t, "u64,i64,bytes", s.String())
	_, err = ParseSchema("u64,float")
	require.ErrorContains(t, err, "float")
}

func TestVersionedKeyRoundTrip(t *testing.T) {
	r := testRand(t)
	for range 5000 {
		table := uint32(r.IntN(5))
		vnode := uint16(r.IntN(MaxVnodeCount))
		pk := randTuple(r).encode(t)
		v := MakeVersion(uint64(r.Int64N(MaxEpoch+1)), uint16(r.Uint32()))
		kind := byte(r.IntN(2))
		k := AppendVersioned(nil, table, vnode, pk, v, kind)
		require.Equal(t, len(k)-SuffixLen, Split(k))
		dk, err := Decode(k)
		require.NoError(t, err)
		require.Equal(t, Key{Table: table, Vnode: vnode, PK: pk, Version: v, Kind: kind}, dk)
		require.Equal(t, k[:Split(k)], dk.Prefix())
		require.NoError(t, Validate(k))
		require.NoError(t, Validate(dk.Prefix()))
	}
}

// TestSeekKey checks that the seek key of epoch e sorts after every version of
// a later epoch and at or before every version of e or earlier, both kinds.
func TestSeekKey(t *testing.T) {
	prefix := AppendPrefix(nil, 1, 2, AppendUint64(nil, 7))
	for _, e := range []uint64{0, 1, 5, 1 << 40, MaxEpoch} {
		seek := AppendSeekKey(nil, prefix, e)
		require.Equal(t, len(prefix), Split(seek))
		for _, ve := range []uint64{0, 1, 4, 5, 6, 1 << 40, MaxEpoch} {
			for _, spill := range []uint16{0, 1, math.MaxUint16} {
				for _, kind := range []byte{KindDelete, KindPut} {
					k := AppendSuffix(slices.Clone(prefix), MakeVersion(ve, spill), kind)
					if ve <= e {
						require.LessOrEqual(t, bytes.Compare(seek, k), 0, "e=%d v=%d.%d", e, ve, spill)
					} else {
						require.Positive(t, bytes.Compare(seek, k), "e=%d v=%d.%d", e, ve, spill)
					}
				}
			}
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	for _, k := range [][]byte{
		nil,
		{1, 2},
		AppendPrefix(nil, 1, 1, AppendUint64(nil, 3)),
		MetaKey([]byte(CommittedEpochName)),
		AppendSuffix(AppendTableBound(nil, MetaTable), MakeVersion(1, 0), KindPut), // versioned metadata
		AppendSuffix([]byte{0x00}, MakeVersion(1, 0), KindPut),                     // too short for a table key
	} {
		_, err := Decode(k)
		require.True(t, errors.Is(err, ErrMalformedKey), "%x: %v", k, err)
	}
}

func TestMetaAndCatalogKeys(t *testing.T) {
	k := CatalogKey(0x01020304)
	id, ok := ParseCatalogKey(k)
	require.True(t, ok)
	require.Equal(t, uint32(0x01020304), id)
	require.False(t, IsVersioned(k))
	require.NoError(t, Validate(k))
	start, end := MetaSpan(CatalogPrefix)
	require.Negative(t, bytes.Compare(start, k))
	require.Negative(t, bytes.Compare(k, end))
	require.Positive(t, bytes.Compare(MetaKey([]byte("tablf")), end)-1+1)
	_, ok = ParseCatalogKey(MetaKey([]byte(CommittedEpochName)))
	require.False(t, ok)
}

func TestVnode(t *testing.T) {
	dk := AppendUint64(nil, 12345)
	for _, n := range []int{1, 16, 256, MaxVnodeCount} {
		v := Vnode(dk, n)
		require.Less(t, int(v), n)
	}
	require.Error(t, CheckVnodeCount(0))
	require.Error(t, CheckVnodeCount(MaxVnodeCount+1))
	require.NoError(t, CheckVnodeCount(MaxVnodeCount))
}

// TestCheckComparer runs Pebble's own comparer test suite.
func TestCheckComparer(t *testing.T) {
	var prefixes, suffixes [][]byte
	for _, pk := range [][]byte{nil, AppendUint64(nil, 0), AppendUint64(nil, 9), AppendBytes(nil, []byte{0, 1})} {
		prefixes = append(prefixes, AppendPrefix(nil, 3, 7, pk), AppendPrefix(nil, 4, 0, pk))
	}
	for _, v := range []Version{0, 1, MakeVersion(5, 0), MakeVersion(5, 3), MakeVersion(MaxEpoch, math.MaxUint16)} {
		for _, kind := range []byte{KindDelete, KindPut} {
			suffixes = append(suffixes, AppendSuffix(nil, v, kind))
		}
	}
	require.NoError(t, pebble.CheckComparer(Comparer, prefixes, suffixes))
}

// assertComparer mirrors the checks of Pebble's internal assert comparer
// (base.MakeAssertComparer, which Pebble's Open applies under the invariants
// and race build tags) and adds ours: Compare agrees with "prefix, then
// suffix"; Separator, Successor and ImmediateSuccessor return keys in the
// right place, and valid keys when given valid keys.
func assertComparer(t testing.TB, a, b []byte) {
	t.Helper()
	if Compare(a, b) > 0 {
		a, b = b, a
	}
	valid := Validate(a) == nil && Validate(b) == nil
	assertPrefixOrder(t, a, b)
	require.Equal(t, Compare(a, b) == 0, Comparer.Equal(a, b))
	if Compare(a, b) < 0 && len(a) > 0 && len(b) > 0 {
		sep := Comparer.Separator(nil, a, b)
		require.LessOrEqual(t, Compare(a, sep), 0, "Separator(%s, %s) = %s", fmtKey(a), fmtKey(b), fmtKey(sep))
		require.Negative(t, Compare(sep, b), "Separator(%s, %s) = %s", fmtKey(a), fmtKey(b), fmtKey(sep))
		if valid {
			require.NoError(t, Validate(sep), "Separator(%s, %s)", fmtKey(a), fmtKey(b))
		}
	}
	succ := Comparer.Successor(nil, a)
	require.LessOrEqual(t, Compare(a, succ), 0)
	if valid {
		require.NoError(t, Validate(succ), "Successor(%s)", fmtKey(a))
	}
	if p := a[:Split(a)]; valid && len(p) < len(a) {
		is := Comparer.ImmediateSuccessor(nil, p)
		require.NoError(t, Validate(is))
		require.Equal(t, len(is), Split(is))
		require.Positive(t, Compare(is, a), "ImmediateSuccessor(%s) must pass every version", fmtKey(p))
	}
	require.LessOrEqual(t, Comparer.AbbreviatedKey(a), Comparer.AbbreviatedKey(b))
}

// assertPrefixOrder checks Compare = "prefix, then suffix" on a pair.
func assertPrefixOrder(t testing.TB, a, b []byte) {
	an, bn := Split(a), Split(b)
	want := cmp.Or(bytes.Compare(a[:an], b[:bn]), bytes.Compare(a[an:], b[bn:]))
	require.Equal(t, want, Comparer.Compare(a, b), "%s vs %s", fmtKey(a), fmtKey(b))
}

func fmtKey(k []byte) string {
	var buf bytes.Buffer
	keyFormatter(k).Format(&fmtState{&buf}, 's')
	return buf.String()
}

type fmtState struct{ *bytes.Buffer }

func (fmtState) Width() (int, bool)     { return 0, false }
func (fmtState) Precision() (int, bool) { return 0, false }
func (fmtState) Flag(int) bool          { return false }

func randKey(r *rand.Rand, t testing.TB) []byte {
	table := uint32(r.IntN(3))
	vnode := uint16(r.IntN(3))
	pk := randTuple(r).encode(t)
	switch r.IntN(6) {
	case 0:
		return AppendTableBound(nil, table)
	case 1:
		return AppendVnodeBound(nil, table, vnode)
	case 2:
		return AppendPrefix(nil, table, vnode, pk)
	case 3:
		return MetaKey([]byte{byte(r.IntN(3)), 0x0A})
	default:
		return AppendVersioned(nil, table, vnode, pk, MakeVersion(uint64(r.IntN(3)), uint16(r.IntN(2))), byte(r.IntN(2)))
	}
}

// TestComparerAssertions checks the comparer on keys built from real pk
// schemas, where Compare must also be plain byte order (the design's claim).
func TestComparerAssertions(t *testing.T) {
	r := testRand(t)
	for range 50000 {
		a, b := randKey(r, t), randKey(r, t)
		assertComparer(t, a, b)
		require.Equal(t, bytes.Compare(a, b), Compare(a, b), "%s vs %s", fmtKey(a), fmtKey(b))
	}
}

// FuzzComparer feeds arbitrary byte strings: nothing may panic, and pairs of
// valid keys must satisfy the assert comparer's contract.
func FuzzComparer(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 32 {
		f.Add(randKey(r, f), randKey(r, f))
	}
	f.Add([]byte{}, []byte{0x0A})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		_ = Split(a)
		_ = Validate(a)
		_, _ = Decode(a)
		_ = fmtKey(a)
		_ = Comparer.ImmediateSuccessor(nil, a[:Split(a)])
		assertComparer(t, a, b)
	})
}

// TestPebbleMVCCIteration checks our assumptions about Pebble with this
// comparer: NextPrefix skips all older versions, and SeekPrefixGE on a seek
// key finds the newest visible version.
func TestPebbleMVCCIteration(t *testing.T) {
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Comparer: Comparer})
	require.NoError(t, err)
	defer db.Close()
	b := db.NewBatch()
	var prefixes [][]byte
	for pk := uint64(0); pk < 50; pk++ {
		p := AppendPrefix(nil, 1, 0, AppendUint64(nil, pk))
		prefixes = append(prefixes, p)
		for e := uint64(1); e <= 3; e++ {
			kind := KindPut
			if pk%5 == 0 && e == 3 {
				kind = KindDelete
			}
			require.NoError(t, b.Set(AppendSuffix(slices.Clone(p), MakeVersion(e<<8, 0), kind), []byte{byte(e)}, nil))
		}
	}
	require.NoError(t, b.Commit(pebble.Sync))
	require.NoError(t, db.Flush())
	lo, hi := VnodeSpan(1, 0)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	require.NoError(t, err)
	n := 0
	for valid := it.First(); valid; valid = it.NextPrefix() {
		dk, err := Decode(it.Key())
		require.NoError(t, err)
		require.Equal(t, uint64(3<<8), dk.Version.Epoch(), "newest version first")
		require.Equal(t, prefixes[n], dk.Prefix())
		n++
	}
	require.NoError(t, it.Close())
	require.Equal(t, 50, n)

	it, err = db.NewIter(nil)
	require.NoError(t, err)
	defer it.Close()
	for _, e := range []uint64{2 << 8, 2<<8 + 7} {
		require.True(t, it.SeekPrefixGE(AppendSeekKey(nil, prefixes[7], e)))
		dk, err := Decode(it.Key())
		require.NoError(t, err)
		require.Equal(t, uint64(2<<8), dk.Version.Epoch())
	}
	require.False(t, it.SeekPrefixGE(AppendSeekKey(nil, prefixes[7], 0)), "no version at epoch 0")
}

func TestPKPrefixLen(t *testing.T) {
	s := Schema{Bytes, Uint64, Int64}
	a := AppendBytes(nil, []byte("a\x00b"))
	pk := AppendInt64(AppendUint64(slices.Clone(a), 7), -3)
	for n, want := range []int{0, len(a), len(a) + 8, len(pk)} {
		got, err := s.PrefixLen(pk, n)
		require.NoError(t, err)
		require.Equal(t, want, got, "%d columns", n)
	}
	_, err := s.PrefixLen(pk[:len(a)+3], 2)
	require.ErrorIs(t, err, ErrInvalidPK)
	_, err = s.PrefixLen(pk, 4)
	require.Error(t, err)
}
