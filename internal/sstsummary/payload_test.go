package sstsummary

import (
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/cockroachdb/errors"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/lsmstats/lsmstats"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// physPayloadSeeds returns summaries of several shapes, from the collector.
func physPayloadSeeds(t testing.TB) []*FileSummary {
	r := rand.New(rand.NewPCG(7, 7))
	out := []*FileSummary{
		{},
		{MetaKeys: 3, Foreign: 1},
		physCollect(t, physParseOps(t, "gcdel 1 1 1 1")),
		physCollect(t, physParseOps(t, "put 0 0 0 1\nput 4294967294 65535 18446744073709551615 1")),
	}
	for _, shape := range [][3]int{{1, 3, 1}, {2, 100, 2}, {16, 300, 3}, {256, 40, 1}} {
		ops := physRandomOps(r, shape[0], shape[1], shape[2])
		ops = append(ops, physParseOps(t, "meta a\nforeign \\x01\ngcdel 9 1 1 1")...)
		slices.SortStableFunc(ops, func(a, b physOp) int { return keys.Compare(a.key, b.key) })
		out = append(out, physCollect(t, ops))
	}
	return out
}

func TestPayloadRoundTrip(t *testing.T) {
	for i, s := range physPayloadSeeds(t) {
		enc := s.Encode()
		got, err := DecodeSummary(enc)
		require.NoError(t, err, "seed %d", i)
		if len(s.Tables) == 0 {
			s.Tables = nil
		}
		require.Equal(t, s, got, "seed %d", i)
		// Pebble's shortID byte is ignored.
		enc[0] = 7
		_, err = DecodeSummary(enc)
		require.NoError(t, err)
	}
}

// TestDecodedSummaryIsCompact: a decoded summary's samples and last pks lie
// end to end in one allocation, in vnode order, and no longer in the
// decompressed body (which would keep the body alive with the Version).
func TestDecodedSummaryIsCompact(t *testing.T) {
	for i, s := range physPayloadSeeds(t) {
		got, err := DecodeSummary(s.Encode())
		require.NoError(t, err, "seed %d", i)
		var next, n uintptr
		for _, ts := range got.Tables {
			for j := range ts.Vnodes {
				vs := &ts.Vnodes[j]
				for _, part := range [][]byte{vs.samples.data, vs.LastPK} {
					if len(part) == 0 {
						continue
					}
					at := uintptr(unsafe.Pointer(unsafe.SliceData(part)))
					require.True(t, next == 0 || at == next, "seed %d: t%d/v%d does not follow the vnode before it", i, ts.Table, vs.Vnode)
					require.Equal(t, len(part), cap(part), "seed %d: t%d/v%d", i, ts.Table, vs.Vnode)
					next, n = at+uintptr(len(part)), n+uintptr(len(part))
				}
			}
		}
		var want uintptr
		for _, ts := range s.Tables {
			for j := range ts.Vnodes {
				want += uintptr(len(ts.Vnodes[j].samples.data) + len(ts.Vnodes[j].LastPK))
			}
		}
		require.Equal(t, want, n, "seed %d: bytes of samples and last pks", i)
	}
}

func requireCorrupt(t *testing.T, b []byte, msgAndArgs ...interface{}) {
	t.Helper()
	s, err := DecodeSummary(b)
	require.True(t, s == nil, msgAndArgs...)
	require.Error(t, err, msgAndArgs...)
	require.True(t, errors.Is(err, ErrCorruptPayload), "%v", err)
	require.True(t, errors.Is(err, lsmstats.ErrCorruption), "every payload error is a corruption: %v", err)
}

// reseal recomputes the checksum after a test edits the body.
func reseal(b []byte) []byte {
	binary.LittleEndian.PutUint32(b[2:], crc32.Checksum(b[1+headerLen:], castagnoli))
	return b
}

func TestPayloadCorrupt(t *testing.T) {
	seeds := physPayloadSeeds(t)
	big := seeds[len(seeds)-1].Encode()
	require.Equal(t, formatS2, big[1])

	requireCorrupt(t, nil)
	requireCorrupt(t, []byte{0})
	requireCorrupt(t, []byte{0, formatRaw, 0, 0})
	// Every truncation and every single-byte flip fails (checksum).
	for _, enc := range [][]byte{big, seeds[2].Encode()} {
		for n := 0; n < len(enc); n++ {
			requireCorrupt(t, enc[:n], "truncated to %d", n)
		}
		for i := 1; i < len(enc); i++ {
			b := slices.Clone(enc)
			b[i] ^= 0x10
			requireCorrupt(t, b, "flipped byte %d", i)
		}
	}
	// Unknown format.
	b := slices.Clone(big)
	b[1] = 9
	requireCorrupt(t, b)
	// A huge claimed raw length is refused before allocating.
	_, n := binary.Uvarint(big[1+headerLen:])
	b = append([]byte{0, formatS2, 0, 0, 0, 0}, binary.AppendUvarint(nil, 1<<50)...)
	b = append(b, big[1+headerLen+n:]...)
	requireCorrupt(t, reseal(b))
	// Garbage bodies with a valid checksum: structure checks.
	for _, body := range [][]byte{
		{},           // empty
		{0, 0, 0, 0}, // trailing byte
		{0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01}, // huge table count
		{0, 0, 1, 1, 0},                                                                   // table without vnodes
		{0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0},                                           // empty vnode
		{0, 0, 1, 1, 1, 0, 1, 0, 1, 1, 9, 0, 1, 0, 1, 5},                                  // pk suffix longer than the input
		{0, 0, 1, 1, 1, 0, 1, 0, 2, 1, 9, 0, 1, 0, 0, 0, 0},                               // more prefixes than entries
		{0, 0, 2, 5, 1, 0, 1, 0, 1, 1, 9, 0, 1, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F}, // table id overflow
		{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01, 1, 0},                // key count overflow
	} {
		b := append([]byte{0, formatRaw, 0, 0, 0, 0}, body...)
		requireCorrupt(t, reseal(b), "body %x", body)
	}
	// pks must increase: duplicate the first sample of a two-sample vnode.
	s := physCollect(t, physParseOps(t, "put 1 1 5 1\nput 1 1 6 1"))
	samples := s.Tables[0].Vnodes[0].Samples()
	samples[1].PK = samples[0].PK
	s.Tables[0].Vnodes[0].samples = packSamples(nil, samples)
	requireCorrupt(t, s.Encode())
	// Samples per vnode are bounded (so is the work of decoding shared pk
	// prefixes: at most maxPayloadVnodeSamples copies per vnode), but the
	// bound is what earlier collectors wrote, not the current one's.
	s = physCollect(t, physParseOps(t, "put 1 1 5 1"))
	vs := &s.Tables[0].Vnodes[0]
	vs.Counts.Puts, vs.Counts.Entries, vs.Counts.Prefixes = 1<<20, 1<<20, 1<<20
	samples = nil
	for i := range maxPayloadVnodeSamples {
		samples = append(samples, Sample{PK: physPK(uint64(i)), Puts: uint64(i), Prefixes: uint64(i)})
	}
	vs.samples = packSamples(nil, samples)
	vs.LastPK = samples[len(samples)-1].PK
	old, err := DecodeSummary((&FileSummary{Tables: []TableSummary{{Table: 1, Vnodes: []VnodeSummary{*vs}}}}).Encode())
	require.NoError(t, err, "%d samples in a vnode, as collectors wrote before 2026-12-03", maxPayloadVnodeSamples)
	require.Equal(t, maxPayloadVnodeSamples, old.Tables[0].Vnodes[0].NumSamples())
	// More samples per vnode than any collector wrote.
	samples = nil
	for i := range maxPayloadVnodeSamples + 1 {
		samples = append(samples, Sample{PK: physPK(uint64(i)), Puts: uint64(i), Prefixes: uint64(i)})
	}
	vs.samples = packSamples(nil, samples)
	vs.LastPK = samples[len(samples)-1].PK
	requireCorrupt(t, (&FileSummary{Tables: []TableSummary{{Table: 1, Vnodes: []VnodeSummary{*vs}}}}).Encode())
}

// FuzzDecodeSummary: no panic on any input, and decode(encode(x)) == x for
// every x that decodes.
func FuzzDecodeSummary(f *testing.F) {
	for _, s := range physPayloadSeeds(f) {
		enc := s.Encode()
		if len(s.appendBody(nil)) > 4096 {
			// Large inputs make the fuzzer's minimisation crawl.
			continue
		}
		f.Add(enc)
		// Raw-format versions of the same bodies reach the structure checks
		// directly.
		raw := append([]byte{0, formatRaw, 0, 0, 0, 0}, s.appendBody(nil)...)
		f.Add(reseal(raw))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSummary(b)
		if err != nil {
			require.True(t, errors.Is(err, ErrCorruptPayload), "%v", err)
			require.True(t, errors.Is(err, lsmstats.ErrCorruption), "%v", err)
			return
		}
		again, err := DecodeSummary(s.Encode())
		require.NoError(t, err)
		require.Equal(t, s, again)
	})
}

// TestFuzzDecodeRawMutations mutates raw bodies (checksums resealed, so the
// structure checks see every mutation) as a quick fuzz in every test run.
func TestFuzzDecodeRawMutations(t *testing.T) {
	r := physRand(t)
	seeds := physPayloadSeeds(t)
	deadline := time.Now().Add(time.Second)
	for n := 0; time.Now().Before(deadline); n++ {
		s := seeds[r.IntN(len(seeds))]
		b := append([]byte{0, formatRaw, 0, 0, 0, 0}, s.appendBody(nil)...)
		for range 1 + r.IntN(4) {
			switch i := 6 + r.IntN(max(1, len(b)-6)); r.IntN(3) {
			case 0:
				if i < len(b) {
					b[i] = byte(r.Uint32())
				}
			case 1:
				b = b[:i]
			case 2:
				b = slices.Insert(b, min(i, len(b)), byte(r.Uint32()))
			}
		}
		got, err := DecodeSummary(reseal(b))
		if err != nil {
			require.True(t, errors.Is(err, ErrCorruptPayload))
			require.True(t, errors.Is(err, lsmstats.ErrCorruption))
			continue
		}
		again, err := DecodeSummary(got.Encode())
		require.NoError(t, err)
		require.Equal(t, got, again)
	}
}

// BenchmarkPayloadCodec compares s2 (used; see "Why s2" in payload.go) with
// zstd on the raw bodies of payloads of SSTs with 100-byte values: stored
// bytes and encode/decode speed, with warm tables.
func BenchmarkPayloadCodec(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, shape := range [][3]int{{256, 400, 1}, {256, 100, 4}, {8, 20000, 1}} {
		ops := physRandomOps(r, shape[0], shape[1], shape[2])
		s := physCollect(b, ops)
		raw := s.appendBody(nil)
		name := func(codec string) string {
			return "vnodes=" + strconv.Itoa(shape[0]) + "/entries=" + strconv.Itoa(len(ops)) + "/codec=" + codec
		}
		b.Run(name("s2"), func(b *testing.B) {
			c := s2.Encode(nil, raw)
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				c = s2.Encode(c[:cap(c)], raw)
				if _, err := s2.Decode(nil, c); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(c))/float64(len(raw))*100, "stored-%")
			b.ReportMetric(float64(len(raw)), "raw-bytes")
		})
		for _, level := range []zstd.EncoderLevel{zstd.SpeedFastest, zstd.SpeedDefault} {
			b.Run(name("zstd-"+level.String()), func(b *testing.B) {
				enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithEncoderCRC(false))
				require.NoError(b, err)
				dec, err := zstd.NewReader(nil)
				require.NoError(b, err)
				defer dec.Close()
				c := enc.EncodeAll(raw, nil)
				b.SetBytes(int64(len(raw)))
				for b.Loop() {
					c = enc.EncodeAll(raw, c[:0])
					if _, err := dec.DecodeAll(c, make([]byte, 0, len(raw))); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(c))/float64(len(raw))*100, "stored-%")
				b.ReportMetric(float64(len(raw)), "raw-bytes")
			})
		}
	}
}
