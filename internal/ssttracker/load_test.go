package ssttracker

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/lsmstats/lsmstats/internal/faultfs"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/stretchr/testify/require"
)

// overlapFS counts the SSTs of its directory open through it at once
// (from Open to the file's Close) with an Overlap: loads that run at once
// meet there, loads one at a time never do.
type overlapFS struct {
	vfs.FS
	dir string
	testutil.Overlap
}

func (fs *overlapFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.Open(name, opts...)
	if err != nil || filepath.Dir(name) != fs.dir || !strings.HasSuffix(name, ".sst") || !fs.Enter() {
		return f, err
	}
	return &overlapFile{File: f, fs: fs}, nil
}

type overlapFile struct {
	vfs.File
	fs   *overlapFS
	once sync.Once
}

func (f *overlapFile) Close() error {
	f.once.Do(f.fs.Leave)
	return f.File.Close()
}

// TestParallelLoads fills a DB with many SSTs, some without a usable
// payload (rebuilt from their keys, with a line logged each), and loads
// them all with a fresh tracker: up to LoadParallelism at once, and no
// more; the Version, the rebuilt files and the lines logged equal those of
// loads one at a time, and the incremental Version of the DB's own
// tracker.
func TestParallelLoads(t *testing.T) {
	rng := physRand(t)
	ofs := &overlapFS{FS: vfs.Default}
	e := &physEnv{t: t, dir: t.TempDir(), scratch: t.TempDir(), fs: ofs, log: &physLogger{}}
	ofs.dir = e.dir
	e.open()
	t.Cleanup(e.close)
	const files = 40
	for i := range files {
		ops := physRandomOps(rng, 1+rng.IntN(6), 1+rng.IntN(20), 3)
		switch {
		case i%9 == 4:
			e.ingest(ops, []func() pebble.BlockPropertyCollector{}) // no payload
		case i%3 == 0:
			e.applyBatch(ops)
			require.NoError(t, e.db.Flush())
		default:
			e.ingest(ops, nil)
		}
	}
	want := e.check()
	require.GreaterOrEqual(t, want.NumFiles(), files/2)
	require.NotEmpty(t, Rebuilt(want))
	e.log.statsErrors()

	load := func(parallelism int) (*Version, []string) {
		log := &physLogger{}
		tr := NewTracker(TrackerConfig{DB: e.db, Dir: e.dir, FS: ofs, ReaderOptions: e.opts.MakeReaderOptions(),
			Logger: log, LoadParallelism: parallelism})
		defer func() { require.NoError(t, tr.Close()) }()
		require.NoError(t, tr.Refresh())
		return tr.Current(), log.statsErrors()
	}
	seq, seqLog := load(1)
	require.Len(t, seqLog, len(Rebuilt(want)), "a line per rebuilt file: %q", seqLog)
	for _, n := range []int{8, 3} {
		ofs.Arm(n, 10*time.Second)
		par, parLog := load(n)
		most := ofs.Disarm()
		require.Equal(t, n, most, "SSTs open at once with LoadParallelism %d", n)
		require.NoError(t, DiffVersions(seq, par), "LoadParallelism %d", n)
		require.NoError(t, DiffVersions(want, par), "LoadParallelism %d", n)
		require.Equal(t, rebuiltText(seq), rebuiltText(par))
		require.Equal(t, seqLog, parLog, "lines logged, in order")
	}
	// One at a time: the loads never meet.
	ofs.Arm(2, 0) // no waiting
	load(1)
	require.Equal(t, 1, ofs.Disarm())
}

// TestParallelLoadErrors fails the reads of two SSTs: a fresh tracker that
// loads many SSTs at once returns the error of the first of them by file
// number, naming it, every time, as loads one at a time do; publishes
// nothing; and once the fault is gone loads what loads one at a time do.
func TestParallelLoadErrors(t *testing.T) {
	rng := physRand(t)
	sw := &faultfs.Switch{}
	e := openFaultPhys(t, sw)
	for range 30 {
		e.ingest(physRandomOps(rng, 1+rng.IntN(4), 1+rng.IntN(10), 2), nil)
	}
	v := e.check()
	nums := make([]uint64, 0, v.NumFiles())
	for _, f := range Files(v) {
		nums = append(nums, f.FileNum)
	}
	bad := []uint64{nums[len(nums)/2], nums[len(nums)/4]} // the second sorts first
	path := func(num uint64) string { return e.fs.PathJoin(e.dir, fmt.Sprintf("%06d.sst", num)) }
	for _, op := range []errorfs.OpKind{errorfs.OpFileReadAt, errorfs.OpOpen} {
		sw.Set(errorfs.ErrInjected.If(opOn{op, []string{path(bad[0]), path(bad[1])}}))
		for _, parallelism := range []int{1, 16, 16, 16, 16} {
			tr := NewTracker(TrackerConfig{DB: e.db, Dir: e.dir, FS: e.fs, ReaderOptions: e.opts.MakeReaderOptions(),
				Logger: e.log, LoadParallelism: parallelism})
			before := tr.Current()
			err := tr.Refresh()
			require.Error(t, err)
			require.True(t, errors.Is(err, errorfs.ErrInjected), "%v", err)
			require.ErrorContains(t, err, fmt.Sprintf("sst %06d", bad[1]), "LoadParallelism %d: the first failing SST by number", parallelism)
			require.NotContains(t, err.Error(), fmt.Sprintf("%06d", bad[0]))
			require.True(t, before == tr.Current(), "a failed refresh published a Version")
			require.Equal(t, err, tr.Err())
			require.NoError(t, tr.Close())
		}
	}
	sw.Set(nil)
	tr := NewTracker(TrackerConfig{DB: e.db, Dir: e.dir, FS: e.fs, ReaderOptions: e.opts.MakeReaderOptions(), Logger: e.log})
	require.NoError(t, tr.Refresh())
	require.NoError(t, DiffVersions(v, tr.Current()))
	require.NoError(t, tr.Close())
	require.Empty(t, e.log.statsErrors())
	require.True(t, slices.IsSorted(nums))
}

// opOn is an errorfs predicate: an operation of one kind on one of paths.
type opOn struct {
	kind  errorfs.OpKind
	paths []string
}

func (p opOn) Evaluate(op errorfs.Op) bool {
	return op.Kind == p.kind && slices.Contains(p.paths, op.Path)
}

func (p opOn) String() string { return fmt.Sprintf("(op %d %q)", p.kind, p.paths) }

// rebuiltText returns the rebuilt files of v with their reasons, as text.
func rebuiltText(v *Version) []string {
	var out []string
	for _, e := range Rebuilt(v) {
		out = append(out, e.Error())
	}
	return out
}
