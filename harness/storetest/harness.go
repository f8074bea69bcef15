// Package storetest is the data-driven store harness shared by the tests of
// packages lsm, stats and backfill: one command language over the
// exported API of package lsm, run on github.com/cockroachdb/datadriven
// files. It is test-support code, in non-test files so that other packages'
// tests can import it; nothing outside tests may import it.
//
// Commands (the arguments in brackets are optional):
//
//	open [watermark=N] [compactions=on|off] [commit=ingest|batch] [comparer=bytewise]
//	                  open (or reopen, closing the open store) the store.
//	                  watermark: the memory watermark (default -1, never
//	                  spill); compactions: off (default) disables Pebble's
//	                  automatic compactions and the L0 commit stall, for
//	                  deterministic files; commit=ingest ingests every
//	                  checkpoint (none through the memtable); comparer=bytewise
//	                  opens with Pebble's default comparer. Prints the
//	                  committed epoch and the epoch floor, or the error.
//	close             Close the store (later commands meet a closed store)
//	crash             drop the store without Close, as a kill would (needs
//	                  Harness.Crash)
//	create-table id=N vnodes=N [schema=CHARS]
//	                  a table; the pk is one u64 unless schema gives the
//	                  keys.ColumnType of each column
//	writer name=W table=N [vnodes=a-b] [unchecked]
//	                  (re)create writer W (closing an open writer of that
//	                  name) over vnodes a..b (default: all)
//	write name=W [table=N] epoch=E
//	                  one op per line, vnode = hash of the u64 PK:
//	                  insert PK ROW | update PK OLD NEW | delete PK OLD.
//	                  With table=N an unknown W is created as a checked
//	                  writer over every vnode of table N
//	seal name=W epoch=E
//	close-writer name=W
//	commit epoch=E [seal]
//	                  commit E; prints ok. seal: first seal every open
//	                  writer at E, and print the committed epoch and the
//	                  number of spills so far
//	read [table=N] [epoch=E]
//	                  every live row, in (vnode, pk) order (epoch: of a
//	                  snapshot pinned at E)
//	wget name=W pk=P  a writer's view of one row
//	raw [table=N]     every Pebble key of the table: version, kind, value
//	live [table=N]    live rows and bytes per vnode with rows
//	recompute-live [table=N]
//	                  RecomputeLiveStats: the live counts before and after
//	pin name=P epoch=E
//	                  pin an epoch (prints the error if refused)
//	unpin name=P      release a pin
//	gc [table=N] [vnodes=a-b] [epoch=S] [batch=N] [max=N] [resume]
//	                  one MVCC GC pass (resume: from where the last one
//	                  stopped); prints what it did
//	compact [table=N] [vnodes=a-b]
//	                  CompactRange of the table (or of its vnodes a..b)
//	compact all       a manual Pebble compaction of everything, then wait
//	                  until the statistics follow
//	flush             flush Pebble's memtable, then wait until the
//	                  statistics follow
//	singledel table=N pk=P epoch=E [del]
//	                  a Pebble SINGLEDEL of the put (or delete) version of
//	                  P at E, written into Pebble's memtable as MVCC
//	                  garbage collection does
//	stats [table=N] [full]
//	                  per vnode: physical entries, puts, deletes, Pebble
//	                  tombstones and live rows (table default 1). full:
//	                  after waiting until the statistics describe Pebble's
//	                  live SSTs, a table per (table, vnode) with distinct
//	                  prefixes, live bytes and SSTs too, then the totals of
//	                  each table (every table unless table=N)
//	estimate table=N vnode=V [lo=P] [hi=P]
//	                  EstimateRows of [lo, hi), and the truth
//	verify [full]     Store.Verify: "ok: N rows" or the differences; full:
//	                  with the epoch, and the notes
//
// Walk runs every file under a directory, each on a new Harness, after a
// package's setup function prepared it. A package adds its own commands to
// Harness.Commands (consulted before the common ones, so it may also
// override one): lsm its white-box commands (fault injection, spill, bad
// input), backfill its job commands (job, steps, restart, finish). It may
// adjust the options of every open with Harness.Options, drop a store
// without Close with Harness.Crash, check every commit with
// Harness.AfterCommit, open a store with its own options with
// Harness.OpenWith, and release its own state with Harness.AtEnd. In the
// output the store's directory reads "$DIR".
//
// The files live in the repository's testdata/store/<area>: lsm, stats
// and backfill, each run by the package of its name.
package storetest

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/lsminternal"
	"github.com/lsmstats/lsmstats/internal/s3server"
	"github.com/lsmstats/lsmstats/internal/ssttracker"
	"github.com/lsmstats/lsmstats/internal/statsinternal"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/lsmstats/lsmstats/objstore"
	"github.com/lsmstats/lsmstats/stats"
	"github.com/stretchr/testify/require"
)

// Command is a command a package adds to the harness.
type Command func(t *testing.T, h *Harness, td *datadriven.TestData) string

// Harness is the state of one data-driven file: a store directory, the open
// store and the named writers and pins.
type Harness struct {
	// Dir is the store's directory.
	Dir string
	// Store is the open store (nil before open and after crash).
	Store *lsm.Store
	// Writers are the named writers of the open store.
	Writers map[string]*lsm.Writer

	// Commands are the package's own commands.
	Commands map[string]Command
	// Options, if set, adjusts the options of every open.
	Options func(o *lsm.Options)
	// Crash, if set, abandons a store without Close (crash needs it).
	Crash func(s *lsm.Store)
	// AfterCommit, if set, runs after every successful commit.
	AfterCommit func(t *testing.T, h *Harness)
	// AtEnd, if set, runs at the end of the file, before the harness closes
	// the store.
	AtEnd func(t *testing.T)
	// ObjectStore, if set, keeps the SSTs of every store the harness
	// opens in this object store (lsm.Options.ObjectStore), unless the
	// options of OpenWith name one. Walk runs every file with one and
	// without.
	ObjectStore *objstore.StoreOptions

	defs        map[string]lsm.TableDef // the table of each writer
	compactions bool
	pinStore    *lsm.Store
	pins        map[string]*lsm.Snapshot
	resume      []byte
}

// New returns a harness for a store in a new temporary directory.
func New(t *testing.T) *Harness {
	return &Harness{Dir: t.TempDir(), Writers: map[string]*lsm.Writer{}, defs: map[string]lsm.TableDef{}, Commands: map[string]Command{}}
}

// Compactions reports whether the open store runs Pebble's automatic
// compactions.
func (h *Harness) Compactions() bool { return h.compactions }

// Walk runs every file under root twice, with the same expected output:
// on local disk (subtest "local") and with the SSTs in an object store, a
// bucket of the file's own on the test binary's shared S3 server (subtest
// "objstore"; the package's TestMain calls s3server.RunTests). Each run
// is on a new harness which setup (if not nil) prepares.
//
// A file about faults of local SST files, which a store on an object store
// does not have, says so in a line "# storetest: local only: REASON": Walk
// runs it on local disk only and logs the reason.
func Walk(t *testing.T, root string, setup func(t *testing.T, h *Harness)) {
	datadriven.Walk(t, root, func(t *testing.T, path string) {
		text, err := os.ReadFile(path)
		require.NoError(t, err)
		localOnly := ""
		for _, line := range strings.Split(string(text), "\n") {
			if r, ok := strings.CutPrefix(line, localOnlyMarker); ok {
				localOnly = strings.TrimSpace(r)
			}
		}
		for _, remote := range []bool{false, true} {
			name := "local"
			if remote {
				name = "objstore"
			}
			if remote && localOnly != "" {
				t.Logf("%s runs on local disk only: %s", path, localOnly)
				continue
			}
			t.Run(name, func(t *testing.T) {
				h := New(t)
				if remote {
					h.ObjectStore = ObjectStore(t)
				}
				if setup != nil {
					setup(t, h)
				}
				h.Run(t, path)
			})
		}
	})
}

// localOnlyMarker starts the line of a file that runs on local disk only.
const localOnlyMarker = "# storetest: local only:"

// ObjectStore returns options that keep a store's SSTs in a new bucket on
// the test binary's shared S3 server (internal/s3server.Shared), through a
// Bucket closed when the test ends, whose retries give up within 30 s.
func ObjectStore(t testing.TB) *objstore.StoreOptions {
	t.Helper()
	srv := s3server.Shared(t)
	b, err := objstore.New(objstore.Config{
		Endpoint:        srv.Endpoint,
		Bucket:          srv.NewBucket(t),
		Prefix:          "store/",
		AccessKeyID:     srv.AccessKey,
		SecretAccessKey: srv.SecretKey,
		Retry:           objstore.RetryPolicy{MaxElapsed: 30 * time.Second},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return &objstore.StoreOptions{Storage: b}
}

// Run runs one file and closes the store at the end.
func (h *Harness) Run(t *testing.T, path string) {
	defer func() {
		if h.AtEnd != nil {
			h.AtEnd(t)
		}
		if h.Store != nil {
			_ = h.Store.Close()
			h.Store = nil
		}
		if h.ObjectStore != nil && !t.Failed() {
			h.checkRemote(t)
		}
	}()
	datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
		return strings.ReplaceAll(h.Step(t, td), h.Dir, "$DIR")
	})
}

// checkRemote checks, at the end of a file run on an object store, that
// the store's SSTs were there: none in Pebble's directory, and objects in
// the object store if the store made any SST.
func (h *Harness) checkRemote(t *testing.T) {
	local, err := filepath.Glob(filepath.Join(h.Dir, "db", "*.sst"))
	require.NoError(t, err)
	require.Empty(t, local, "SSTs on local disk in a store on an object store")
	if _, err := os.Stat(filepath.Join(h.Dir, "db")); err != nil {
		return // the file opened no store
	}
	names, err := h.ObjectStore.Storage.List("", "")
	require.NoError(t, err)
	ssts := 0
	for _, n := range names {
		if p, ok := objstore.ParseName(n); ok && !p.Ref {
			ssts++
		}
	}
	require.NotZero(t, ssts, "no SST in the object store: %q", names)
}

// Step runs one command.
func (h *Harness) Step(t *testing.T, td *datadriven.TestData) string {
	if c, ok := h.Commands[td.Cmd]; ok {
		return c(t, h, td)
	}
	s := h.Store
	switch td.Cmd {
	case "open":
		return h.open(t, td)
	case "close":
		return ErrOr(s.Close(), "ok")
	case "crash":
		if h.Crash == nil {
			t.Fatalf("crash: this harness has no Crash")
		}
		h.Crash(s)
		h.Store = nil
		return "crashed"
	case "create-table":
		schema := keys.Schema{keys.Uint64}
		if td.HasArg("schema") {
			schema = nil
			for _, c := range ArgString(t, td, "schema") {
				schema = append(schema, keys.ColumnType(c))
			}
		}
		def := lsm.TableDef{ID: uint32(ArgUint(t, td, "id")), VnodeCount: int(ArgUint(t, td, "vnodes")), PK: schema}
		return ErrOr(s.CreateTable(def), "ok")
	case "writer":
		name := ArgString(t, td, "name")
		if old, ok := h.Writers[name]; ok {
			require.NoError(t, old.Close())
			delete(h.Writers, name)
		}
		var vn *roaring.Bitmap
		if td.HasArg("vnodes") {
			lo, hi := VnodeRange(t, td)
			vn = roaring.New()
			vn.AddRange(uint64(lo), uint64(hi))
		}
		table := uint32(ArgUint(t, td, "table"))
		w, err := s.NewWriter(table, vn, &lsm.WriterOptions{Unchecked: td.HasArg("unchecked")})
		if err != nil {
			return "error: " + err.Error()
		}
		h.addWriter(t, name, w)
		return "ok"
	case "write":
		return h.write(t, td)
	case "seal":
		return ErrOr(h.writer(t, td).Seal(ArgUint(t, td, "epoch")), "ok")
	case "close-writer":
		return ErrOr(h.writer(t, td).Close(), "ok")
	case "commit":
		epoch := ArgUint(t, td, "epoch")
		if td.HasArg("seal") {
			for _, w := range h.Writers {
				require.NoError(t, w.Seal(epoch))
			}
		}
		if err := s.Commit(epoch); err != nil {
			return "error: " + err.Error()
		}
		if h.AfterCommit != nil {
			h.AfterCommit(t, h)
		}
		if td.HasArg("seal") {
			return fmt.Sprintf("committed epoch %d (spills so far: %d)", s.CommittedEpoch(), s.Metrics().Spills)
		}
		return "ok"
	case "read":
		return h.read(t, td)
	case "wget":
		w := h.writer(t, td)
		pk := keys.AppendUint64(nil, ArgUint(t, td, "pk"))
		def := h.defs[ArgString(t, td, "name")]
		row, ok, err := w.Get(def.VnodeOf(pk), pk)
		if err != nil {
			return "error: " + err.Error()
		}
		if !ok {
			return "not found"
		}
		return string(row)
	case "raw":
		return h.raw(t, uint32(ArgUintDefault(t, td, "table", 1)))
	case "live":
		table := uint32(ArgUintDefault(t, td, "table", 1))
		def, err := s.Table(table)
		require.NoError(t, err)
		l := s.Stats().Live
		var out strings.Builder
		for v := 0; v < def.VnodeCount; v++ {
			if c := l.Vnode(table, uint16(v)); c.Rows != 0 || c.Bytes != 0 {
				fmt.Fprintf(&out, "vnode %d: rows %d bytes %d\n", v, c.Rows, c.Bytes)
			}
		}
		c := l.Table(table)
		fmt.Fprintf(&out, "table %d: rows %d bytes %d estimates %t\n", table, c.Rows, c.Bytes, l.ContainsEstimates(table))
		return out.String()
	case "recompute-live":
		before, after, err := s.RecomputeLiveStats(uint32(ArgUintDefault(t, td, "table", 1)))
		return ErrOr(err, fmt.Sprintf("rows %d bytes %d -> rows %d bytes %d", before.Rows, before.Bytes, after.Rows, after.Bytes))
	case "pin", "unpin", "gc":
		return h.gc(t, td)
	case "compact":
		if td.HasArg("all") {
			require.NoError(t, lsminternal.DB(s).Compact(context.Background(), []byte{0}, []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF}, false))
			h.WaitStats(t)
			return "ok"
		}
		lo, hi := VnodeRange(t, td)
		return ErrOr(s.CompactRange(context.Background(), uint32(ArgUintDefault(t, td, "table", 1)), lo, hi), "ok")
	case "flush":
		require.NoError(t, lsminternal.DB(s).Flush())
		h.WaitStats(t)
		return "ok"
	case "singledel":
		table := uint32(ArgUint(t, td, "table"))
		def, err := s.Table(table)
		require.NoError(t, err)
		kind := keys.KindPut
		if td.HasArg("del") {
			kind = keys.KindDelete
		}
		pk := keys.AppendUint64(nil, ArgUint(t, td, "pk"))
		key := keys.AppendVersioned(nil, table, def.VnodeOf(pk), pk, keys.MakeVersion(ArgUint(t, td, "epoch"), 0), kind)
		require.NoError(t, lsminternal.DB(s).SingleDelete(key, pebble.Sync))
		return "ok"
	case "stats":
		if td.HasArg("full") {
			return h.fullStats(t, td)
		}
		return h.stats(t, td)
	case "estimate":
		return h.estimate(t, td)
	case "verify":
		rep, err := s.Verify()
		if err != nil {
			return "error: " + err.Error()
		}
		if !td.HasArg("full") {
			if rep.OK() {
				return fmt.Sprintf("ok: %d rows", rep.Rows)
			}
			return fmt.Sprintf("%d rows; differences:\n%s\n", rep.Rows, strings.Join(rep.Differences, "\n"))
		}
		var b strings.Builder
		if rep.OK() {
			fmt.Fprintf(&b, "ok: epoch %d, %d live rows\n", rep.Epoch, rep.Rows)
		}
		for _, d := range rep.Differences {
			fmt.Fprintf(&b, "difference: %s\n", d)
		}
		for _, n := range rep.Notes {
			fmt.Fprintf(&b, "note: %s\n", n)
		}
		return b.String()
	}
	t.Fatalf("unknown command %q", td.Cmd)
	return ""
}

func (h *Harness) open(t *testing.T, td *datadriven.TestData) string {
	opts := &lsm.Options{MemoryWatermark: -1, Logger: lsm.QuietLogger(nil)}
	if td.HasArg("watermark") {
		opts.MemoryWatermark = int64(ArgUint(t, td, "watermark"))
	}
	switch v := argStringDefault(t, td, "commit", "batch"); v {
	case "ingest":
		opts.CommitBatchBytes = -1 // every checkpoint ingested, none through the memtable
	case "batch":
	default:
		t.Fatalf("open: commit=%s", v)
	}
	switch v := argStringDefault(t, td, "compactions", "off"); v {
	case "on":
		h.compactions = true
	case "off":
		// Output must not depend on when Pebble compacts, and with no
		// compactions L0 must not stall commits.
		h.compactions = false
		opts.L0StopSublevels = -1
	default:
		t.Fatalf("open: compactions=%s", v)
	}
	bytewise := false
	switch v := argStringDefault(t, td, "comparer", "store"); v {
	case "bytewise":
		bytewise = true
	case "store":
	default:
		t.Fatalf("open: comparer=%s", v)
	}
	compactions := h.compactions
	opts.Pebble = func(o *pebble.Options) {
		if !compactions {
			o.DisableAutomaticCompactions = true
			o.L0CompactionThreshold = math.MaxInt32
			o.L0StopWritesThreshold = math.MaxInt32
		}
		if bytewise {
			o.Comparer = pebble.DefaultComparer
		}
	}
	if err := h.OpenWith(t, opts); err != nil {
		return "error: " + err.Error()
	}
	s := h.Store
	return fmt.Sprintf("committed epoch %d, epoch floor %d", s.CommittedEpoch(), s.EpochFloor())
}

func (h *Harness) addWriter(t *testing.T, name string, w *lsm.Writer) {
	def, err := h.Store.Table(w.Table())
	require.NoError(t, err)
	h.Writers[name], h.defs[name] = w, def
}

// OpenWith opens (or reopens, closing the open store and forgetting the
// writers) the store with opts as they are, but for Harness.Options: the
// defaults and arguments of the open command do not apply.
func (h *Harness) OpenWith(t *testing.T, opts *lsm.Options) error {
	if h.Store != nil {
		if err := h.Store.Close(); err != nil && !errors.Is(err, lsm.ErrClosed) {
			t.Fatalf("close before open: %v", err)
		}
		h.Store = nil
	}
	clear(h.Writers)
	clear(h.defs)
	if h.ObjectStore != nil && opts.ObjectStore == nil {
		opts.ObjectStore = h.ObjectStore
	}
	if h.Options != nil {
		h.Options(opts)
	}
	s, err := lsm.Open(h.Dir, opts)
	if err != nil {
		return err
	}
	h.Store = s
	return nil
}

func (h *Harness) writer(t *testing.T, td *datadriven.TestData) *lsm.Writer {
	name := ArgString(t, td, "name")
	w, ok := h.Writers[name]
	if !ok {
		t.Fatalf("%s: no writer %q", td.Cmd, name)
	}
	return w
}

func (h *Harness) write(t *testing.T, td *datadriven.TestData) string {
	name := ArgString(t, td, "name")
	w, ok := h.Writers[name]
	if !ok && td.HasArg("table") {
		var err error
		w, err = h.Store.NewWriter(uint32(ArgUint(t, td, "table")), nil, nil)
		require.NoError(t, err)
		h.addWriter(t, name, w)
	} else if !ok {
		t.Fatalf("write: no writer %q", name)
	}
	def := h.defs[name]
	var err error
	epoch := ArgUint(t, td, "epoch")
	var out strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(td.Input), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			t.Fatalf("bad op %q", line)
		}
		pk := keys.AppendUint64(nil, MustUint(t, f[1]))
		vnode := def.VnodeOf(pk)
		switch f[0] {
		case "insert":
			err = w.Insert(epoch, vnode, pk, []byte(f[2]))
		case "delete":
			err = w.Delete(epoch, vnode, pk, []byte(f[2]))
		case "update":
			require.Len(t, f, 4, line)
			err = w.Update(epoch, vnode, pk, []byte(f[2]), []byte(f[3]))
		default:
			t.Fatalf("unknown op %q", line)
		}
		if err != nil {
			fmt.Fprintf(&out, "%s: error: %v\n", line, err)
		}
	}
	if out.Len() == 0 {
		return "ok"
	}
	return out.String()
}

func (h *Harness) read(t *testing.T, td *datadriven.TestData) string {
	s := h.Store
	table := uint32(ArgUintDefault(t, td, "table", 1))
	def, err := s.Table(table)
	require.NoError(t, err)
	newIter := func(v uint16) (*lsm.Iter, error) { return s.NewIter(table, v, nil, nil) }
	if td.HasArg("epoch") {
		sn, err := s.Pin(ArgUint(t, td, "epoch"))
		if err != nil {
			return "error: " + err.Error()
		}
		defer sn.Close()
		newIter = func(v uint16) (*lsm.Iter, error) { return sn.NewIter(table, v, nil, nil) }
	}
	var out strings.Builder
	for v := 0; v < def.VnodeCount; v++ {
		it, err := newIter(uint16(v))
		if err != nil {
			return "error: " + err.Error()
		}
		for valid := it.First(); valid; valid = it.Next() {
			pk, _, _ := keys.DecodeUint64(it.PK())
			fmt.Fprintf(&out, "v%d %d=%s\n", v, pk, it.Row())
		}
		if err := it.Close(); err != nil {
			return "error: " + err.Error()
		}
	}
	if out.Len() == 0 {
		return "(empty)"
	}
	return out.String()
}

// raw prints every key of a table as Pebble holds it.
func (h *Harness) raw(t *testing.T, table uint32) string {
	lo, hi := keys.TableSpan(table)
	it, err := lsminternal.DB(h.Store).NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	require.NoError(t, err)
	defer it.Close()
	var lines []string
	for valid := it.First(); valid; valid = it.Next() {
		k, err := keys.Decode(it.Key())
		require.NoError(t, err)
		pk, _, _ := keys.DecodeUint64(k.PK)
		kind := "put"
		if k.Kind == keys.KindDelete {
			kind = "del"
		}
		lines = append(lines, fmt.Sprintf("v%d %d@%s %s %q", k.Vnode, pk, k.Version, kind, it.Value()))
	}
	require.NoError(t, it.Error())
	sort.Strings(lines)
	if len(lines) == 0 {
		return "(empty)"
	}
	return strings.Join(lines, "\n") + "\n"
}

func (h *Harness) gc(t *testing.T, td *datadriven.TestData) string {
	s := h.Store
	if h.pinStore != s {
		// Pins and resume points belong to the store they were made in.
		h.pinStore, h.pins, h.resume = s, map[string]*lsm.Snapshot{}, nil
	}
	switch td.Cmd {
	case "pin":
		sn, err := s.Pin(ArgUint(t, td, "epoch"))
		if err != nil {
			return "error: " + err.Error()
		}
		h.pins[ArgString(t, td, "name")] = sn
		return fmt.Sprintf("pinned epoch %d; safe epoch %d", sn.Epoch(), s.SafeEpoch())
	case "unpin":
		name := ArgString(t, td, "name")
		h.pins[name].Close()
		delete(h.pins, name)
		return fmt.Sprintf("safe epoch %d", s.SafeEpoch())
	}
	lo, hi := VnodeRange(t, td)
	req := lsm.GCRequest{Table: uint32(ArgUintDefault(t, td, "table", 1)), VnodeLo: lo, VnodeHi: hi,
		SafeEpoch:   ArgUintDefault(t, td, "epoch", 0),
		BatchSize:   int(ArgUintDefault(t, td, "batch", 0)),
		MaxVersions: int64(ArgUintDefault(t, td, "max", 0)),
	}
	if td.HasArg("resume") {
		req.Start = h.resume
	}
	res, err := s.GC(context.Background(), req)
	h.resume = res.Resume
	if err != nil {
		out := "error: " + err.Error()
		if res.Ingestions > 0 {
			out += fmt.Sprintf("\ndeleted %d in %d ingestions before the error", res.Deleted, res.Ingestions)
		}
		if res.Resume != nil {
			out += fmt.Sprintf("\nresume at %s", formatPrefix(res.Resume))
		}
		return out
	}
	out := fmt.Sprintf("safe epoch %d: examined %d versions of %d pks, deleted %d (%d bytes) in %d ingestions; watermark %d",
		res.SafeEpoch, res.Examined, res.Prefixes, res.Deleted, res.DeletedBytes, res.Ingestions, s.GCEpoch())
	if res.Resume != nil {
		out += fmt.Sprintf("\nresume at %s", formatPrefix(res.Resume))
	}
	return out
}

// formatPrefix prints a bare prefix of a u64-pk table as v<vnode> pk <n>.
func formatPrefix(k []byte) string {
	_, vnode, ok := keys.Header(k)
	if !ok || len(k) != 6+8+1 {
		return fmt.Sprintf("%x", k)
	}
	pk, _, err := keys.DecodeUint64(k[6 : 6+8])
	if err != nil {
		return fmt.Sprintf("%x", k)
	}
	return fmt.Sprintf("v%d pk %d", vnode, pk)
}

func (h *Harness) stats(t *testing.T, td *datadriven.TestData) string {
	s := h.Store
	table := uint32(ArgUintDefault(t, td, "table", 1))
	def, err := s.Table(table)
	require.NoError(t, err)
	st := s.Stats()
	var out strings.Builder
	for v := 0; v < def.VnodeCount; v++ {
		p, l := st.Physical.Vnode(table, uint16(v)), st.Live.Vnode(table, uint16(v))
		if p.Entries == 0 && p.PebbleTombstones == 0 && l.Rows == 0 {
			continue
		}
		fmt.Fprintf(&out, "v%d: entries %d (puts %d, deletes %d), pebble tombstones %d | live rows %d\n",
			v, p.Entries, p.Puts, p.Deletes, p.PebbleTombstones, l.Rows)
	}
	if out.Len() == 0 {
		return "(empty)"
	}
	return out.String()
}

// fullStats prints the statistics table of each table: one line per vnode
// that has physical entries or live rows, then the table's totals.
func (h *Harness) fullStats(t *testing.T, td *datadriven.TestData) string {
	s := h.Store
	h.WaitStats(t)
	var tables []lsm.TableDef
	if td.HasArg("table") {
		def, err := s.Table(uint32(ArgUint(t, td, "table")))
		require.NoError(t, err)
		tables = append(tables, def)
	} else {
		tables = s.Tables()
	}
	st := s.Stats()
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "table\tvnode\tentries\tputs\tdeletes\tprefixes\tpebble-tombstones\tlive-rows\tlive-bytes\tssts\t")
	for _, def := range tables {
		for v := range def.VnodeCount {
			vs := st.Vnode(def.ID, uint16(v))
			if vs.Physical.IsZero() && vs.Live == (stats.LiveCounts{}) {
				continue
			}
			p := vs.Physical
			files := ssttracker.CountRange(statsinternal.VersionOf(st.Physical), def.ID, uint16(v), nil, nil).Files
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", def.ID, v, p.Entries, p.Puts, p.Deletes, p.Prefixes,
				p.PebbleTombstones, vs.Live.Rows, vs.Live.Bytes, files)
		}
		tot := st.Physical.Table(def.ID)
		live := st.Live.Table(def.ID)
		c := tot.Counts
		fmt.Fprintf(tw, "%d\tall\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t-\t\n", def.ID, c.Entries, c.Puts, c.Deletes, c.Prefixes,
			c.PebbleTombstones, live.Rows, live.Bytes)
	}
	_ = tw.Flush()
	for _, def := range tables {
		tot := st.Physical.Table(def.ID)
		fmt.Fprintf(&b, "table %d: total_key_count=%d total_key_size=%d vnodes-with-data=%d contains-estimates=%t\n",
			def.ID, tot.TotalKeyCount, tot.TotalKeySize, tot.Vnodes, st.Live.ContainsEstimates(def.ID))
	}
	fmt.Fprintf(&b, "live ssts: %d, rebuilt payloads: %d\n", st.Physical.NumFiles(), len(ssttracker.Rebuilt(statsinternal.VersionOf(st.Physical))))
	return b.String()
}

func (h *Harness) estimate(t *testing.T, td *datadriven.TestData) string {
	s := h.Store
	table, vnode := uint32(ArgUint(t, td, "table")), uint16(ArgUint(t, td, "vnode"))
	var lo, hi []byte
	if td.HasArg("lo") {
		lo = keys.AppendUint64(nil, ArgUint(t, td, "lo"))
	}
	if td.HasArg("hi") {
		hi = keys.AppendUint64(nil, ArgUint(t, td, "hi"))
	}
	est := s.Stats().EstimateRows(table, vnode, lo, hi)
	it, err := s.NewIter(table, vnode, lo, hi)
	require.NoError(t, err)
	var truth int64
	for ok := it.First(); ok; ok = it.Next() {
		truth++
	}
	require.NoError(t, it.Close())
	return fmt.Sprintf("estimate %.2f, bounds [%d, %d], truth %d", est.Rows, est.Lower, est.Upper, truth)
}

// WaitStats waits until the physical statistics describe Pebble's current
// set of live SSTs: the tracker follows flushes, compactions and the
// metadata-only ingestions of CreateTable in the background.
func (h *Harness) WaitStats(t *testing.T) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, want := h.StatsFiles(t)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("statistics still describe files %v, Pebble has %v", got, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// StatsFiles returns the file numbers the physical statistics describe and
// those of Pebble's live SSTs, in order.
func (h *Harness) StatsFiles(t *testing.T) (got, want []uint64) {
	levels, err := lsminternal.DB(h.Store).SSTables()
	require.NoError(t, err)
	for _, l := range levels {
		for _, f := range l {
			want = append(want, uint64(f.FileNum))
		}
	}
	slices.Sort(want)
	for _, f := range ssttracker.Files(statsinternal.VersionOf(h.Store.Stats().Physical)) {
		got = append(got, f.FileNum)
	}
	return got, want
}

// ErrOr returns "error: ..." for an error, else ok.
func ErrOr(err error, ok string) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return ok
}

// ArgString returns the value of a required argument.
func ArgString(t *testing.T, td *datadriven.TestData, key string) string {
	var v string
	td.ScanArgs(t, key, &v)
	return v
}

func argStringDefault(t *testing.T, td *datadriven.TestData, key, def string) string {
	if !td.HasArg(key) {
		return def
	}
	return ArgString(t, td, key)
}

// ArgUint returns the value of a required unsigned argument.
func ArgUint(t *testing.T, td *datadriven.TestData, key string) uint64 {
	return MustUint(t, ArgString(t, td, key))
}

// ArgUintDefault returns the value of an optional unsigned argument.
func ArgUintDefault(t *testing.T, td *datadriven.TestData, key string, def uint64) uint64 {
	if !td.HasArg(key) {
		return def
	}
	return ArgUint(t, td, key)
}

// MustUint parses an unsigned decimal.
func MustUint(t *testing.T, s string) uint64 {
	v, err := strconv.ParseUint(s, 10, 64)
	require.NoError(t, err)
	return v
}

// VnodeRange returns the half-open vnode range of a vnodes=a-b argument,
// or 0, 0 without one.
func VnodeRange(t *testing.T, td *datadriven.TestData) (int, int) {
	if !td.HasArg("vnodes") {
		return 0, 0
	}
	a, b, _ := strings.Cut(ArgString(t, td, "vnodes"), "-")
	lo, err := strconv.Atoi(a)
	require.NoError(t, err)
	hi, err := strconv.Atoi(b)
	require.NoError(t, err)
	return lo, hi + 1
}
