package keys

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/internal/testutil"
)

// TestVnodeHash: the vnode hash is crc32.ChecksumIEEE, on every length
// from 0 to 64 bytes (both sides of each eight-byte step) and random bytes.
func TestVnodeHash(t *testing.T) {
	seed := testutil.Seed(t, "seed", *seedFlag)
	rng := rand.New(rand.NewPCG(seed, seed))
	for n := range 65 {
		for range 50 {
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(rng.Uint32())
			}
			if got, want := crc32IEEE(p), crc32.ChecksumIEEE(p); got != want {
				t.Fatalf("crc32IEEE(%x) = %08x, want %08x", p, got, want)
			}
		}
	}
}

// FuzzVnodeHash: any bytes hash as crc32.ChecksumIEEE does.
func FuzzVnodeHash(f *testing.F) {
	f.Add([]byte{})
	f.Add(AppendUint64(nil, 12345))
	f.Fuzz(func(t *testing.T, p []byte) {
		if got, want := crc32IEEE(p), crc32.ChecksumIEEE(p); got != want {
			t.Fatalf("crc32IEEE(%x) = %08x, want %08x", p, got, want)
		}
	})
}

// BenchmarkVnode: the vnode hash of a 9-byte key (an encoded u64 id) by
// eight bytes at a time, beside the standard library's ChecksumIEEE, in
// one run: ns/key each and their ratio (vnode-x-stdlib).
func BenchmarkVnode(b *testing.B) {
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = AppendUint64(nil, uint64(i)*0x9e3779b97f4a7c15)
	}
	var sink uint32
	// Each hash times a million keys, alternately, b.N times.
	measure := func(h func([]byte) uint32) float64 {
		start := time.Now()
		for i := range 1 << 20 {
			sink += h(keys[i&1023])
		}
		return float64(time.Since(start).Nanoseconds()) / (1 << 20)
	}
	var ours, std float64
	for range b.N {
		ours += measure(crc32IEEE)
		std += measure(crc32.ChecksumIEEE)
	}
	b.ReportMetric(ours/float64(b.N), "ns/key")
	b.ReportMetric(std/float64(b.N), "stdlib-ns/key")
	b.ReportMetric(ours/std, "vnode-x-stdlib")
	_ = sink
}
