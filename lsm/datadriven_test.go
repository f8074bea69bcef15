package lsm

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/quietlog"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// TestDataDriven runs lsm/testdata/*. Commands:
//
//	open [watermark=N] [compactions=on] [commit=ingest]
//	                             open (or reopen) the store; automatic
//	                             compactions stay off unless asked for
//	create-table id=N vnodes=N   a table with a u64 pk
//	writer name=W table=N [vnodes=a-b] [unchecked]
//	write name=W epoch=E         one op per line: insert PK ROW | delete PK OLD |
//	                             update PK OLD NEW (vnode = hash of PK)
//	spill                        force the sync manager to spill every buffer
//	seal name=W epoch=E
//	close-writer name=W
//	commit epoch=E
//	read [table=N] [epoch=E]     every live row, in (vnode, pk) order
//	wget name=W pk=P             a writer's view of one row
//	raw [table=N]                every Pebble key of the table: version, kind, value
//	live [table=N]               live rows and bytes per vnode with rows
//	crash                        drop the store without Close (as a kill would)
//	pin, unpin, gc, compact, stats   GC commands: see gc_datadriven_test.go
//	inject, disarm, faults       fault injection: see faults_test.go
//	close, raw-set, get, iter, verify, physical, write-pk   bad input: see badinput_test.go
//
// open also takes compactions=off (no automatic Pebble compactions, for
// deterministic file numbers) and comparer=bytewise (Pebble's default
// comparer instead of the store's). Every store of a file runs on the file's
// fault injector (disarmed unless a test arms it), and "$DIR" stands for the
// store's directory in the output.
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		dir := t.TempDir()
		var s *Store
		writers := map[string]*Writer{}
		gcCmds := &ddGC{}
		faultCmds := &ddFaults{f: newFaultInjector(dir, 1)}
		badCmds := &ddBad{dir: dir}
		defer func() {
			if s != nil {
				_ = s.Close()
			}
		}()
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			return strings.ReplaceAll(ddStep(t, td, dir, &s, writers, gcCmds, faultCmds, badCmds), dir, "$DIR")
		})
	})
}

func ddStep(t *testing.T, td *datadriven.TestData, dir string, sp **Store, writers map[string]*Writer,
	gcCmds *ddGC, faultCmds *ddFaults, badCmds *ddBad) string {
	s := *sp
	switch td.Cmd {
	case "open":
		if s != nil {
			if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
				t.Fatalf("close before open: %v", err)
			}
		}
		opts := &Options{MemoryWatermark: -1, Logger: quietlog.Logger{}, FS: faultCmds.f.fs()}
		if td.HasArg("watermark") {
			var w int
			td.ScanArgs(t, "watermark", &w)
			opts.MemoryWatermark = int64(w)
		}
		if td.HasArg("commit") && argString(t, td, "commit") == "ingest" {
			opts.CommitBatchBytes = -1 // every checkpoint ingested, none through the memtable
		}
		opts.Pebble = func(o *pebble.Options) {
			// Output must not depend on when Pebble compacts: automatic
			// compactions are off unless a test asks for them.
			o.DisableAutomaticCompactions = !(td.HasArg("compactions") && argString(t, td, "compactions") == "on")
			if td.HasArg("comparer") && argString(t, td, "comparer") == "bytewise" {
				o.Comparer = pebble.DefaultComparer
			}
		}
		var err error
		s, err = Open(dir, opts)
		*sp = s
		clear(writers)
		if err != nil {
			return "error: " + err.Error()
		}
		return fmt.Sprintf("committed epoch %d, epoch floor %d", s.CommittedEpoch(), s.EpochFloor())
	case "crash":
		// Abandon the store the way a SIGKILL would: no Close.
		// Pebble's files stay consistent since every commit synced.
		crashForTest(s)
		*sp = nil
		return "crashed"
	case "create-table":
		var id, vnodes int
		td.ScanArgs(t, "id", &id)
		td.ScanArgs(t, "vnodes", &vnodes)
		schema := keys.Schema{keys.Uint64}
		if td.HasArg("schema") {
			schema = nil
			for _, c := range argString(t, td, "schema") {
				schema = append(schema, keys.ColumnType(c))
			}
		}
		return errOr(s.CreateTable(TableDef{ID: uint32(id), VnodeCount: vnodes, PK: schema}), "ok")
	case "writer":
		var name string
		var table int
		td.ScanArgs(t, "name", &name)
		td.ScanArgs(t, "table", &table)
		var vn *roaring.Bitmap
		if td.HasArg("vnodes") {
			var r string
			td.ScanArgs(t, "vnodes", &r)
			a, b, _ := strings.Cut(r, "-")
			lo, _ := strconv.Atoi(a)
			hi, _ := strconv.Atoi(b)
			vn = roaring.New()
			vn.AddRange(uint64(lo), uint64(hi)+1)
		}
		w, err := s.NewWriter(uint32(table), vn, &WriterOptions{Unchecked: td.HasArg("unchecked")})
		if err != nil {
			return "error: " + err.Error()
		}
		writers[name] = w
		return "ok"
	case "write":
		w := writers[argString(t, td, "name")]
		epoch := argUint(t, td, "epoch")
		var out strings.Builder
		for _, line := range strings.Split(strings.TrimSpace(td.Input), "\n") {
			f := strings.Fields(line)
			pk := keys.AppendUint64(nil, mustUint(t, f[1]))
			vnode := w.def.VnodeOf(pk)
			var err error
			switch f[0] {
			case "insert":
				err = w.Insert(epoch, vnode, pk, []byte(f[2]))
			case "delete":
				err = w.Delete(epoch, vnode, pk, []byte(f[2]))
			case "update":
				err = w.Update(epoch, vnode, pk, []byte(f[2]), []byte(f[3]))
			default:
				t.Fatalf("unknown op %q", f[0])
			}
			if err != nil {
				fmt.Fprintf(&out, "%s: error: %v\n", line, err)
			}
		}
		if out.Len() == 0 {
			return "ok"
		}
		return out.String()
	case "spill":
		n, err := s.spillAll()
		return errOr(err, fmt.Sprintf("spilled %d buffers", n))
	case "seal":
		return errOr(writers[argString(t, td, "name")].Seal(argUint(t, td, "epoch")), "ok")
	case "close-writer":
		return errOr(writers[argString(t, td, "name")].Close(), "ok")
	case "commit":
		return errOr(s.Commit(argUint(t, td, "epoch")), "ok")
	case "read":
		return readAll(t, s, td)
	case "wget":
		w := writers[argString(t, td, "name")]
		pk := keys.AppendUint64(nil, argUint(t, td, "pk"))
		row, ok, err := w.Get(w.def.VnodeOf(pk), pk)
		if err != nil {
			return "error: " + err.Error()
		}
		if !ok {
			return "not found"
		}
		return string(row)
	case "raw":
		return dumpRaw(t, s, uint32(argUintDefault(td, "table", 1)))
	case "recompute-live":
		before, after, err := s.RecomputeLiveStats(uint32(argUintDefault(td, "table", 1)))
		return errOr(err, fmt.Sprintf("rows %d bytes %d -> rows %d bytes %d", before.Rows, before.Bytes, after.Rows, after.Bytes))
	case "live":
		table := uint32(argUintDefault(td, "table", 1))
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
	default:
		if out, ok := gcCmds.run(t, s, td); ok { // gc_datadriven_test.go
			return out
		}
		if out, ok := faultCmds.run(t, td); ok { // faults_test.go
			return out
		}
		if out, ok := badCmds.run(t, s, writers, td); ok { // badinput_test.go
			return out
		}
		t.Fatalf("unknown command %q", td.Cmd)
		return ""
	}
}

func errOr(err error, ok string) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return ok
}

func argString(t *testing.T, td *datadriven.TestData, key string) string {
	var v string
	td.ScanArgs(t, key, &v)
	return v
}

func argUint(t *testing.T, td *datadriven.TestData, key string) uint64 {
	var v string
	td.ScanArgs(t, key, &v)
	return mustUint(t, v)
}

func argUintDefault(td *datadriven.TestData, key string, def uint64) uint64 {
	if !td.HasArg(key) {
		return def
	}
	for _, a := range td.CmdArgs {
		if a.Key == key {
			v, _ := strconv.ParseUint(a.Vals[0], 10, 64)
			return v
		}
	}
	return def
}

func mustUint(t *testing.T, s string) uint64 {
	v, err := strconv.ParseUint(s, 10, 64)
	require.NoError(t, err)
	return v
}

func readAll(t *testing.T, s *Store, td *datadriven.TestData) string {
	table := uint32(argUintDefault(td, "table", 1))
	def, err := s.Table(table)
	require.NoError(t, err)
	var out strings.Builder
	read := func(newIter func(v uint16) (*Iter, error)) string {
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
	if td.HasArg("epoch") {
		sn, err := s.Pin(argUint(t, td, "epoch"))
		if err != nil {
			return "error: " + err.Error()
		}
		defer sn.Close()
		return read(func(v uint16) (*Iter, error) { return sn.NewIter(table, v, nil, nil) })
	}
	return read(func(v uint16) (*Iter, error) { return s.NewIter(table, v, nil, nil) })
}

// dumpRaw prints every key of a table as Pebble holds it.
func dumpRaw(t *testing.T, s *Store, table uint32) string {
	lo, hi := keys.TableSpan(table)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
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
