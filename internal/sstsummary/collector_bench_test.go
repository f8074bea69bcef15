package sstsummary

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// physBenchValue returns a 100-byte row of lowercase letters and digits
// (about 5.2 bits of entropy per byte: compresses like text, not like
// zeros).
func physBenchValue(r *rand.Rand, buf []byte) []byte {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	buf = buf[:0]
	for range 100 {
		buf = append(buf, alphabet[r.IntN(len(alphabet))])
	}
	return buf
}

// physBenchKeys returns sorted MVCC keys over 256 vnodes of one table, with
// versions per pk, and one value per key.
func physBenchKeys(r *rand.Rand, n, vnodes, versions int) ([][]byte, [][]byte) {
	var ks [][]byte
	perVnode := n / vnodes / versions
	for v := range vnodes {
		for pk := range perVnode {
			pkBytes := keys.AppendUint64(nil, uint64(pk)*1000+uint64(r.IntN(1000)))
			for e := versions; e >= 1; e-- {
				kind := keys.KindPut
				if e < versions && r.IntN(3) == 0 {
					kind = keys.KindDelete
				}
				ks = append(ks, keys.AppendVersioned(nil, 7, uint16(v), pkBytes, keys.MakeVersion(uint64(e), 0), kind))
			}
		}
	}
	slices.SortFunc(ks, keys.Compare)
	ks = slices.CompactFunc(ks, func(a, b []byte) bool { return keys.Compare(a, b) == 0 })
	// Contiguous, in order, as keys sit in Pebble's blocks and memtables.
	var total int
	for _, k := range ks {
		total += len(k)
	}
	buf := make([]byte, 0, total)
	for i, k := range ks {
		buf = append(buf, k...)
		ks[i] = buf[len(buf)-len(k) : len(buf) : len(buf)]
	}
	vals := make([][]byte, len(ks))
	for i := range ks {
		vals[i] = physBenchValue(r, nil)
	}
	return ks, vals
}

// BenchmarkCollector measures, in the same run, the sstable writer's CPU per
// key without our collector, the collector's own CPU per key (keys fed to it
// directly), their ratio (writer-overhead-%), and the payload's share of the
// SST bytes for 100-byte values (payload-%). The ratio is to the writer
// alone — encoding and compressing blocks of keys already in memory — so it
// is larger than acceptance 5's overhead-% (BenchmarkCollectorOverhead),
// which is to the whole of a flush or compaction.
func BenchmarkCollector(b *testing.B) {
	big := testutil.BenchSize(200_000, 20_000)
	for _, shape := range []struct{ keys, vnodes, versions int }{
		{big, 256, 1}, {big, 256, 3}, {big, 16, 1}, {20_000, 256, 1},
	} {
		b.Run(fmt.Sprintf("keys=%d/vnodes=%d/versions=%d", shape.keys, shape.vnodes, shape.versions), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, uint64(shape.versions)))
			ks, vals := physBenchKeys(r, shape.keys, shape.vnodes, shape.versions)
			opts := &pebble.Options{Comparer: keys.Comparer, FormatMajorVersion: pebble.FormatNewest}
			opts.EnsureDefaults()
			fs := vfs.NewMem()
			write := func(collectors []func() pebble.BlockPropertyCollector) (time.Duration, int64, int) {
				f, err := fs.Create("b.sst", vfs.WriteCategoryUnspecified)
				require.NoError(b, err)
				wo := opts.MakeWriterOptions(6, pebble.FormatNewest.MaxTableFormat())
				wo.BlockPropertyCollectors = collectors
				start := time.Now()
				w := sstable.NewRawWriter(objstorageprovider.NewFileWritable(f), wo)
				for i, k := range ks {
					if err := w.Add(pebble.MakeInternalKey(k, 0, pebble.InternalKeyKindSet), vals[i], false); err != nil {
						b.Fatal(err)
					}
				}
				require.NoError(b, w.Close())
				d := time.Since(start)
				st, err := fs.Stat("b.sst")
				require.NoError(b, err)
				propLen := 0
				if collectors != nil {
					rf, err := fs.Open("b.sst")
					require.NoError(b, err)
					readable, err := sstable.NewSimpleReadable(rf)
					require.NoError(b, err)
					rd, err := sstable.NewReader(context.Background(), readable, opts.MakeReaderOptions())
					require.NoError(b, err)
					propLen = len(rd.UserProperties[CollectorName])
					require.NoError(b, rd.Close())
				}
				return d, st.Size(), propLen
			}
			var writerNs, withNs, collNs time.Duration
			var sstBytes int64
			var payload int
			for b.Loop() {
				d, _, _ := write([]func() pebble.BlockPropertyCollector{})
				writerNs += d

				start := time.Now()
				c := NewCollector() // pooled, as Pebble gets it
				for _, k := range ks {
					if err := c.AddPointKey(pebble.MakeInternalKey(k, 0, pebble.InternalKeyKindSet), nil); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := c.FinishTable([]byte{0}); err != nil {
					b.Fatal(err)
				}
				collNs += time.Since(start)

				d, sstBytes, payload = write([]func() pebble.BlockPropertyCollector{NewCollector})
				withNs += d
			}
			n := float64(b.N) * float64(len(ks))
			b.ReportMetric(float64(writerNs.Nanoseconds())/n, "writer-ns/key")
			b.ReportMetric(float64(collNs.Nanoseconds())/n, "collector-ns/key")
			b.ReportMetric(float64(withNs.Nanoseconds())/n, "writer+collector-ns/key")
			b.ReportMetric(float64(collNs)/float64(writerNs)*100, "writer-overhead-%")
			b.ReportMetric(float64(payload)/float64(sstBytes)*100, "payload-%")
			b.ReportMetric(float64(payload), "payload-bytes")
		})
	}
}
