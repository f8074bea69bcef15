package ssttracker

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats/internal/sstsummary"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// The randomized tests accept -seed. Another file of this package may
// register the flag first; then it is shared.
var _ = func() bool {
	if flag.Lookup("seed") == nil {
		flag.Uint64("seed", 0, "seed for randomized tests (0 = time based)")
	}
	return true
}()

func physRand(t testing.TB) *rand.Rand {
	var seed uint64
	if f := flag.Lookup("seed"); f != nil {
		seed, _ = strconv.ParseUint(f.Value.String(), 10, 64)
	}
	seed = testutil.Seed(t, "seed", seed)
	return rand.New(rand.NewPCG(seed, seed^0x5DEECE66D))
}

// physLogger is a pebble.Logger that keeps every line.
type physLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *physLogger) Infof(format string, args ...interface{}) {
	l.add("I " + fmt.Sprintf(format, args...))
}

func (l *physLogger) Errorf(format string, args ...interface{}) {
	l.add("E " + fmt.Sprintf(format, args...))
}

func (l *physLogger) Fatalf(format string, args ...interface{}) {
	panic(fmt.Sprintf(format, args...))
}

func (l *physLogger) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
}

// errors returns (and clears) the error lines that mention lsmstats.
func (l *physLogger) statsErrors() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.lines {
		if strings.HasPrefix(s, "E lsmstats/stats") {
			out = append(out, s)
		}
	}
	l.lines = nil
	return out
}

// physEnv is a real Pebble DB with a tracker.
type physEnv struct {
	t         testing.TB
	dir       string
	fs        vfs.FS
	configure func(*pebble.Options)
	opts      *pebble.Options
	db        *pebble.DB
	tr        *Tracker
	log       *physLogger
	scratch   string
	ingests   int
	// epoch is the version the benchmarks' batches wrote last.
	epoch uint64
}

func openPhys(t testing.TB, configure func(*pebble.Options)) *physEnv {
	e := &physEnv{t: t, dir: t.TempDir(), scratch: t.TempDir(), fs: vfs.Default, configure: configure, log: &physLogger{}}
	e.open()
	t.Cleanup(e.close)
	return e
}

func (e *physEnv) open() {
	opts := &pebble.Options{
		Comparer:                    keys.Comparer,
		FS:                          e.fs,
		FormatMajorVersion:          pebble.FormatNewest,
		BlockPropertyCollectors:     []func() pebble.BlockPropertyCollector{sstsummary.NewCollector},
		DisableAutomaticCompactions: true,
		L0StopWritesThreshold:       1000,
		Logger:                      e.log,
	}
	if e.configure != nil {
		e.configure(opts)
	}
	opts.EnsureDefaults()
	e.tr = NewTracker(TrackerConfig{
		Dir:           e.dir,
		FS:            e.fs,
		ReaderOptions: opts.MakeReaderOptions(),
		Logger:        e.log,
	})
	el := e.tr.EventListener()
	if opts.EventListener != nil { // configure's listener too
		el = pebble.TeeEventListener(el, *opts.EventListener)
	}
	opts.EventListener = &el
	db, err := pebble.Open(e.dir, opts)
	require.NoError(e.t, err)
	e.opts, e.db = opts, db
	e.tr.SetDB(db)
}

func (e *physEnv) close() {
	if e.db == nil {
		return
	}
	require.NoError(e.t, e.tr.Close())
	require.NoError(e.t, e.db.Close())
	e.db = nil
}

func (e *physEnv) reopen() {
	e.close()
	e.open()
}

func (e *physEnv) refresh() *Version {
	require.NoError(e.t, e.tr.Refresh())
	return e.tr.Current()
}

// check verifies that the incremental Version equals a recomputation and
// that every file satisfies the NumEntries identity.
func (e *physEnv) check() *Version {
	v := e.refresh()
	r, err := e.tr.Recompute()
	require.NoError(e.t, err)
	require.NoError(e.t, DiffVersions(v, r))
	for _, f := range Files(v) {
		require.NoError(e.t, CheckFile(f))
	}
	return v
}

// physOp is one key written by a test.
type physOp struct {
	key  []byte
	kind pebble.InternalKeyKind
	val  []byte
}

func physKey(table uint32, vnode uint16, pk uint64, epoch uint64, kind byte) []byte {
	return keys.AppendVersioned(nil, table, vnode, keys.AppendUint64(nil, pk), keys.MakeVersion(epoch, 0), kind)
}

func physPK(pk uint64) []byte { return keys.AppendUint64(nil, pk) }

func physValue(n int) []byte { return bytes.Repeat([]byte{'v'}, n) }

// parseOps parses datadriven lines:
//
//	put t v pk epoch       MVCC put (Pebble SET)
//	del t v pk epoch       MVCC delete (Pebble SET, empty value)
//	gcdel t v pk epoch [del]  Pebble SINGLEDEL of the put (or delete) version
//	pdel t v pk epoch      Pebble DEL of the put version
//	meta name              metadata key (Pebble SET)
//	foreign hex            a key of no shape (Pebble SET)
//	merge t v pk epoch     Pebble MERGE of a put version (foreign)
func physParseOps(t testing.TB, input string) []physOp {
	var ops []physOp
	for _, line := range strings.Split(input, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		num := func(i int) uint64 {
			require.Greater(t, len(f), i, "line %q", line)
			n, err := strconv.ParseUint(f[i], 10, 64)
			require.NoError(t, err, "line %q", line)
			return n
		}
		switch f[0] {
		case "put", "del", "gcdel", "pdel", "merge":
			kind := keys.KindPut
			if f[0] == "del" || (f[0] == "gcdel" && len(f) > 5 && f[5] == "del") {
				kind = keys.KindDelete
			}
			k := physKey(uint32(num(1)), uint16(num(2)), num(3), num(4), kind)
			op := physOp{key: k, kind: pebble.InternalKeyKindSet}
			switch f[0] {
			case "put":
				op.val = physValue(100)
			case "gcdel":
				op.kind = pebble.InternalKeyKindSingleDelete
			case "pdel":
				op.kind = pebble.InternalKeyKindDelete
			case "merge":
				op.kind = pebble.InternalKeyKindMerge
				op.val = []byte("m")
			}
			ops = append(ops, op)
		case "meta":
			ops = append(ops, physOp{key: keys.MetaKey([]byte(f[1])), kind: pebble.InternalKeyKindSet, val: []byte("x")})
		case "foreign":
			k, err := strconv.Unquote(`"` + f[1] + `"`)
			require.NoError(t, err)
			ops = append(ops, physOp{key: []byte(k), kind: pebble.InternalKeyKindSet, val: []byte("f")})
		default:
			t.Fatalf("unknown op %q", line)
		}
	}
	return ops
}

func (e *physEnv) applyBatch(ops []physOp) {
	b := e.db.NewBatch()
	for _, op := range ops {
		var err error
		switch op.kind {
		case pebble.InternalKeyKindSet:
			err = b.Set(op.key, op.val, nil)
		case pebble.InternalKeyKindSingleDelete:
			err = b.SingleDelete(op.key, nil)
		case pebble.InternalKeyKindDelete:
			err = b.Delete(op.key, nil)
		case pebble.InternalKeyKindMerge:
			err = b.Merge(op.key, op.val, nil)
		}
		require.NoError(e.t, err)
	}
	require.NoError(e.t, b.Commit(pebble.NoSync))
}

// writeSST writes ops (sorted here) to a new SST in the DB's format, with
// the given collectors (nil: ours).
func (e *physEnv) writeSST(path string, ops []physOp, collectors []func() pebble.BlockPropertyCollector) {
	ops = slices.Clone(ops)
	slices.SortStableFunc(ops, func(a, b physOp) int { return keys.Compare(a.key, b.key) })
	f, err := e.fs.Create(path, vfs.WriteCategoryUnspecified)
	require.NoError(e.t, err)
	wo := e.opts.MakeWriterOptions(0, e.db.TableFormat())
	if collectors != nil {
		wo.BlockPropertyCollectors = collectors
	}
	w := sstable.NewRawWriter(objstorageprovider.NewFileWritable(f), wo)
	for _, op := range ops {
		require.NoError(e.t, w.Add(pebble.MakeInternalKey(op.key, 0, op.kind), op.val, false))
	}
	require.NoError(e.t, w.Close())
}

func (e *physEnv) ingest(ops []physOp, collectors []func() pebble.BlockPropertyCollector) {
	e.ingests++
	path := e.fs.PathJoin(e.scratch, fmt.Sprintf("ingest-%d.sst", e.ingests))
	e.writeSST(path, ops, collectors)
	require.NoError(e.t, e.db.Ingest(context.Background(), []string{path}))
}

var physEverything = []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}

func (e *physEnv) compactAll() {
	require.NoError(e.t, e.db.Compact(context.Background(), []byte{0}, physEverything, false))
}

// physCollect feeds sorted ops to a fresh collector.
func physCollect(t testing.TB, ops []physOp) *sstsummary.FileSummary {
	c := sstsummary.NewScanCollector()
	for _, op := range ops {
		require.NoError(t, c.AddPointKey(pebble.MakeInternalKey(op.key, 1, op.kind), nil))
	}
	return c.Summary()
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

// tableEntries is Hummock's total_key_count of a table in v: its MVCC
// entries.
func tableEntries(v *Version, table uint32) uint64 {
	c, _ := v.Table(table)
	return c.Entries
}
