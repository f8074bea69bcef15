package keystats_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/keystats"
	"github.com/lsmstats/lsmstats/internal/lsminternal"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// TestStoreDataDriven runs stats/testdata/store/*: the statistics of a real
// store (package lsm on Pebble) after writes, commits, flushes and manual
// compactions, in the spirit of Pebble's testdata/table_stats. Commands:
//
//	open [watermark=N] [compactions]
//	                      open (or reopen) the store; automatic compactions
//	                      are off unless asked for; a small watermark makes
//	                      the store spill its buffers
//	create-table id=N vnodes=N      a table with a u64 pk
//	writer table=N [unchecked]      (re)create the table's writer (writes
//	                                create a checked one when there is none)
//	write table=N epoch=E           one op per line (vnode = hash of the pk):
//	                                insert PK ROW | update PK OLD NEW | delete PK OLD
//	commit epoch=E                  seal every writer at E and commit E
//	gc table=N pk=P epoch=E [del]   a Pebble SINGLEDEL of the put (or delete)
//	                                version of P at E written into Pebble's
//	                                memtable, as MVCC garbage collection does
//	flush                           flush Pebble's memtable
//	compact                         manual compaction of everything with
//	                                store.DB().Compact
//	stats [table=N]                 per (table, vnode): physical entries, puts,
//	                                deletes, distinct prefixes summed over
//	                                SSTs, Pebble tombstones, live rows and
//	                                bytes, and the SSTs holding the vnode;
//	                                then the table's totals
//	estimate table=N vnode=V [lo=P] [hi=P]
//	                                EstimateRows of [lo, hi), and the truth
//	verify                          store.Verify: "ok" or its differences
//
// After flush and compact the test waits until the physical statistics
// describe Pebble's live SSTs (the tracker follows them in the background).
// Nothing printed depends on wall time, file numbers or map order.
func TestStoreDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/store", func(t *testing.T, path string) {
		var e *storeEnv
		autoCompactions := false
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			if e != nil {
				e.t = t
			}
			switch td.Cmd {
			case "open":
				opts := uncompacted()
				if td.HasArg("watermark") {
					var w int
					td.ScanArgs(t, "watermark", &w)
					opts.MemoryWatermark = int64(w)
				}
				autoCompactions = td.HasArg("compactions")
				if autoCompactions {
					opts.Pebble = nil
					opts.L0StopSublevels = 0
				}
				if e == nil {
					e = openStore(t, opts)
				} else {
					e.opts = opts
					e.reopen()
				}
				return fmt.Sprintf("committed epoch %d", e.s.CommittedEpoch())
			case "create-table":
				var id, vnodes int
				td.ScanArgs(t, "id", &id)
				td.ScanArgs(t, "vnodes", &vnodes)
				e.createTable(uint32(id), vnodes)
				return "ok"
			case "writer":
				var table uint64
				td.ScanArgs(t, "table", &table)
				if w, ok := e.writers[uint32(table)]; ok {
					require.NoError(t, w.Close())
				}
				w, err := e.s.NewWriter(uint32(table), nil, &lsm.WriterOptions{Unchecked: td.HasArg("unchecked")})
				require.NoError(t, err)
				e.writers[uint32(table)] = w
				return "ok"
			case "write":
				return ddWrite(t, e, td)
			case "commit":
				var epoch uint64
				td.ScanArgs(t, "epoch", &epoch)
				for _, w := range e.writers {
					require.NoError(t, w.Seal(epoch))
				}
				if err := e.s.Commit(epoch); err != nil {
					return "error: " + err.Error()
				}
				// The physical statistics are current when Commit returns
				// (automatic compactions are off: nothing else changes the
				// files).
				if _, got, want := e.statsFiles(); !slices.Equal(got, want) && !autoCompactions {
					t.Fatalf("after commit %d the statistics describe files %v, Pebble has %v", epoch, got, want)
				}
				m := lsminternal.StoreMetrics(e.s)
				return fmt.Sprintf("committed epoch %d (spills so far: %d)", e.s.CommittedEpoch(), m.Spills)
			case "gc":
				var table, pk, epoch uint64
				td.ScanArgs(t, "table", &table)
				td.ScanArgs(t, "pk", &pk)
				td.ScanArgs(t, "epoch", &epoch)
				def, err := e.s.Table(uint32(table))
				require.NoError(t, err)
				kind := keys.KindPut
				if td.HasArg("del") {
					kind = keys.KindDelete
				}
				p := pk64(pk)
				key := keys.AppendVersioned(nil, uint32(table), def.VnodeOf(p), p, keys.MakeVersion(epoch, 0), kind)
				require.NoError(t, lsminternal.DB(e.s).SingleDelete(key, pebble.Sync))
				return "ok"
			case "flush":
				e.flush()
				return "ok"
			case "compact":
				e.compact()
				return "ok"
			case "stats":
				e.waitStats()
				var tables []lsm.TableDef
				if td.HasArg("table") {
					var id uint64
					td.ScanArgs(t, "table", &id)
					def, err := e.s.Table(uint32(id))
					require.NoError(t, err)
					tables = append(tables, def)
				} else {
					tables = e.s.Tables()
				}
				return ddStats(e.s.Stats(), tables)
			case "estimate":
				var table, vnode uint64
				td.ScanArgs(t, "table", &table)
				td.ScanArgs(t, "vnode", &vnode)
				var lo, hi []byte
				if td.HasArg("lo") {
					var v uint64
					td.ScanArgs(t, "lo", &v)
					lo = pk64(v)
				}
				if td.HasArg("hi") {
					var v uint64
					td.ScanArgs(t, "hi", &v)
					hi = pk64(v)
				}
				est := e.s.Stats().EstimateRows(uint32(table), uint16(vnode), lo, hi)
				it, err := e.s.NewIter(uint32(table), uint16(vnode), lo, hi)
				require.NoError(t, err)
				var truth int64
				for ok := it.First(); ok; ok = it.Next() {
					truth++
				}
				require.NoError(t, it.Close())
				return fmt.Sprintf("estimate %.2f, bounds [%d, %d], truth %d", est.Rows, est.Lower, est.Upper, truth)
			case "verify":
				rep, err := e.s.Verify()
				require.NoError(t, err)
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
			default:
				return fmt.Sprintf("unknown command %q", td.Cmd)
			}
		})
	})
}

func ddWrite(t *testing.T, e *storeEnv, td *datadriven.TestData) string {
	var table, epoch uint64
	td.ScanArgs(t, "table", &table)
	td.ScanArgs(t, "epoch", &epoch)
	w := e.writer(uint32(table))
	def, err := e.s.Table(uint32(table))
	require.NoError(t, err)
	var out strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(td.Input), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			t.Fatalf("bad op %q", line)
		}
		var v uint64
		_, err := fmt.Sscan(f[1], &v)
		require.NoError(t, err, line)
		pk := pk64(v)
		vnode := def.VnodeOf(pk)
		switch f[0] {
		case "insert":
			err = w.Insert(epoch, vnode, pk, []byte(f[2]))
		case "update":
			require.Len(t, f, 4, line)
			err = w.Update(epoch, vnode, pk, []byte(f[2]), []byte(f[3]))
		case "delete":
			err = w.Delete(epoch, vnode, pk, []byte(f[2]))
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

// ddStats prints the statistics table of each table: one line per vnode
// that has physical entries or live rows, then the table's totals.
func ddStats(st keystats.Snapshot, tables []lsm.TableDef) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "table\tvnode\tentries\tputs\tdeletes\tprefixes\tpebble-tombstones\tlive-rows\tlive-bytes\tssts\t")
	for _, def := range tables {
		for v := range def.VnodeCount {
			vs := st.Vnode(def.ID, uint16(v))
			if vs.Physical.IsZero() && vs.Live == (keystats.LiveCounts{}) {
				continue
			}
			p := vs.Physical
			files := keystats.CountRange(st.Physical, def.ID, uint16(v), nil, nil).Files
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
	fmt.Fprintf(&b, "live ssts: %d, rebuilt payloads: %d\n", st.Physical.NumFiles(), len(keystats.Rebuilt(st.Physical)))
	return b.String()
}
