package lsm

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// BenchmarkOpen opens a store of about files SSTs, read-only and writable,
// and reports beside the time of one Open and Close (open-µs) what the
// checks against a silent rollback add to it, timed on their own in the
// same run (check-µs): reading the checkpoint mark and checking the
// MANIFEST before Pebble reads it (a writable store rewrites the mark only
// when it is not current, and follows the MANIFEST into its copy from its
// first commit on). (The listing of
// Pebble's directory they use is left out: Open made it before, for the
// OPTIONS file.) The goal: at
// most 1 ms at 1,000 SSTs. manifest-KB is the MANIFEST they read.
func BenchmarkOpen(b *testing.B) {
	sizes := []int{100, 1000}
	if testing.Short() {
		sizes = sizes[:1] // make bench-smoke
	}
	for _, files := range sizes {
		dir := filepath.Join(b.TempDir(), "store")
		manySSTs(b, dir, files)
		m, err := filepath.Glob(filepath.Join(dir, pebbleDir, "MANIFEST-*"))
		require.NoError(b, err)
		require.Len(b, m, 1)
		st, err := os.Stat(m[0])
		require.NoError(b, err)
		for _, readOnly := range []bool{true, false} {
			b.Run(fmt.Sprintf("files=%d/read-only=%t", files, readOnly), func(b *testing.B) {
				o := &Options{ReadOnly: readOnly, Logger: QuietLogger(io.Discard)}
				var open, check time.Duration
				for range b.N {
					start := time.Now()
					s, err := Open(dir, o)
					require.NoError(b, err)
					require.NoError(b, s.Close())
					open += time.Since(start)

					c := &Store{dir: dir, opts: o.withDefaults(), fs: vfs.Default}
					c.popts = &pebble.Options{Logger: o.Logger}
					names, err := listPebbleDir(c.fs, dir)
					require.NoError(b, err)
					start = time.Now()
					mk, ok, err := c.openMark(c.popts.Logger)
					require.NoError(b, err)
					require.True(b, ok)
					num, err := c.checkManifest(names, mk, ok)
					require.NoError(b, err)
					if !readOnly {
						c.committed.Store(mk.epoch)             // as Pebble recovered it
						require.NoError(b, c.checkMark(mk, ok)) // writes nothing: the mark is current
						c.manifestNum.Store(num)
					}
					check += time.Since(start)
					c.closeMark()
				}
				n := float64(b.N)
				b.ReportMetric(float64(open.Microseconds())/n, "open-µs")
				b.ReportMetric(float64(check.Microseconds())/n, "check-µs")
				b.ReportMetric(float64(check)/float64(open), "check/open")
				b.ReportMetric(float64(st.Size())/1024, "manifest-KB")
			})
		}
	}
}

// manySSTs writes a store of about files SSTs: one ingested checkpoint per
// two files (its rows, its metadata), no compactions.
func manySSTs(b *testing.B, dir string, files int) {
	s, err := Open(dir, &Options{Logger: QuietLogger(io.Discard), CommitBatchBytes: -1, Pebble: func(o *pebble.Options) {
		o.DisableAutomaticCompactions = true
	}})
	require.NoError(b, err)
	def := TableDef{ID: 1, VnodeCount: 1, PK: keys.Schema{keys.Uint64}}
	require.NoError(b, s.CreateTable(def))
	w, err := s.NewWriter(1, nil, nil)
	require.NoError(b, err)
	for e := uint64(1); e <= uint64(files/2); e++ {
		for i := range uint64(20) {
			pk := keys.AppendUint64(nil, e*100+i)
			require.NoError(b, w.Insert(e, 0, pk, []byte("row")))
		}
		require.NoError(b, w.Seal(e))
		require.NoError(b, s.Commit(e))
	}
	require.NoError(b, w.Close())
	n := 0
	levels, err := s.db.SSTables()
	require.NoError(b, err)
	for _, l := range levels {
		n += len(l)
	}
	require.InDelta(b, files, n, float64(files)/10, "SSTs")
	require.NoError(b, s.Close())
}
