package ssttracker

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/sstsummary"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// physCorruptCollector wraps the collector and damages its payload.
type physCorruptCollector struct {
	*sstsummary.Collector
	mode string
}

func physCorrupting(mode string) []func() pebble.BlockPropertyCollector {
	return []func() pebble.BlockPropertyCollector{func() pebble.BlockPropertyCollector {
		return &physCorruptCollector{Collector: sstsummary.NewScanCollector(), mode: mode}
	}}
}

func (c *physCorruptCollector) FinishTable(buf []byte) ([]byte, error) {
	n := len(buf)
	out, err := c.Collector.FinishTable(buf)
	if err != nil {
		return nil, err
	}
	switch c.mode {
	case "garbage":
		for i := n; i < len(out); i++ {
			out[i] = byte(i * 7)
		}
	case "truncate":
		out = out[:n+(len(out)-n)/2]
	case "flip":
		out[len(out)-1] ^= 1
	case "version":
		out[n] = 0x7F
	case "empty":
		out = out[:n]
	case "lie":
		// A well-formed payload with one entry too many.
		lie := sstsummary.NewScanCollector()
		lie.Add(physKey(1, 1, 1, 1, keys.KindPut), pebble.InternalKeyKindSet)
		s := lie.Summary()
		s.Tables[0].Vnodes[0].Counts = sstsummary.Counts{Entries: 2, Puts: 2, Prefixes: 1, HeadPuts: 1, KeyBytes: 50}
		out = append(out[:n], s.Encode()[1:]...)
	}
	return out, nil
}

func TestPhysicalDataDriven(t *testing.T) {
	var e *physEnv
	defer func() {
		if e != nil {
			e.close()
		}
	}()
	datadriven.RunTest(t, "testdata/physical", func(t *testing.T, td *datadriven.TestData) string {
		if e == nil || td.Cmd == "init" {
			if e != nil {
				e.close()
			}
			e = openPhys(t, nil)
			if td.Cmd == "init" {
				return ""
			}
		}
		e.t = t
		switch td.Cmd {
		case "batch":
			e.applyBatch(physParseOps(t, td.Input))
			return ""
		case "flush":
			require.NoError(t, e.db.Flush())
			return ""
		case "ingest":
			var collectors []func() pebble.BlockPropertyCollector
			if td.HasArg("corrupt") {
				var mode string
				td.ScanArgs(t, "corrupt", &mode)
				collectors = physCorrupting(mode)
			}
			if td.HasArg("no-collector") {
				collectors = []func() pebble.BlockPropertyCollector{}
			}
			e.ingest(physParseOps(t, td.Input), collectors)
			return ""
		case "excise":
			// excise t v lo hi: IngestAndExcise without files over [lo, hi)
			// of one vnode.
			f := strings.Fields(argKeys(td))
			table, vnode, lo, hi := physU(t, f[0]), physU(t, f[1]), physU(t, f[2]), physU(t, f[3])
			_, err := e.db.IngestAndExcise(context.Background(), nil, nil, nil, pebble.KeyRange{
				Start: keys.AppendPrefix(nil, uint32(table), uint16(vnode), physPK(lo)),
				End:   keys.AppendPrefix(nil, uint32(table), uint16(vnode), physPK(hi)),
			})
			require.NoError(t, err)
			return ""
		case "compact":
			e.compactAll()
			return ""
		case "reopen":
			e.reopen()
			return ""
		case "refresh":
			before := e.tr.Current()
			v := e.refresh()
			return physRefreshDelta(before, v)
		case "check":
			e.check()
			return "ok"
		case "errors":
			return strings.Join(e.log.statsErrors(), "\n")
		case "stats":
			return physFormatVersion(e.tr.Current())
		case "range":
			// range t v lo hi ("-": unbounded)
			f := strings.Fields(argKeys(td))
			table, vnode := physU(t, f[0]), physU(t, f[1])
			bound := func(s string) []byte {
				if s == "-" {
					return nil
				}
				return physPK(physU(t, s))
			}
			rc := CountRange(e.tr.Current(), uint32(table), uint16(vnode), bound(f[2]), bound(f[3]))
			return physFormatRange(rc)
		case "sum":
			// sum t v1 v2 ... (no vnodes: all)
			f := strings.Fields(argKeys(td))
			var bm *roaring.Bitmap
			if len(f) > 1 {
				bm = roaring.New()
				for _, s := range f[1:] {
					bm.Add(uint32(physU(t, s)))
				}
			}
			return physFormatCounts(e.tr.Current().Sum(uint32(physU(t, f[0])), bm))
		default:
			return fmt.Sprintf("unknown command %q", td.Cmd)
		}
	})
}

func argKeys(td *datadriven.TestData) string {
	var parts []string
	for _, a := range td.CmdArgs {
		parts = append(parts, a.Key)
	}
	return strings.Join(parts, " ")
}

func physU(t testing.TB, s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	require.NoError(t, err)
	return n
}

func physRefreshDelta(before, after *Version) string {
	var added, removed, moved []string
	b := map[uint64]FileInfo{}
	for _, f := range Files(before) {
		b[f.FileNum] = f
	}
	for _, f := range Files(after) {
		if o, ok := b[f.FileNum]; !ok {
			added = append(added, fmt.Sprintf("%06d", f.FileNum))
		} else {
			if o.Level != f.Level {
				moved = append(moved, fmt.Sprintf("%06d L%d->L%d", f.FileNum, o.Level, f.Level))
			}
			delete(b, f.FileNum)
		}
	}
	for n := range b {
		removed = append(removed, fmt.Sprintf("%06d", n))
	}
	slices.Sort(removed)
	return fmt.Sprintf("added: %s\nremoved: %s\nmoved: %s\nfiles: %d",
		strings.Join(added, " "), strings.Join(removed, " "), strings.Join(moved, ", "), after.NumFiles())
}

func physFormatCounts(c sstsummary.Counts) string {
	return fmt.Sprintf("entries=%d puts=%d dels=%d prefixes=%d head-puts=%d key-bytes=%d value-bytes=%d pebble-tombstones=%d",
		c.Entries, c.Puts, c.Deletes, c.Prefixes, c.HeadPuts, c.KeyBytes, c.ValueBytes, c.PebbleTombstones)
}

func physFormatVersion(v *Version) string {
	var b strings.Builder
	for _, id := range v.Tables() {
		c, vnodes := v.Table(id)
		fmt.Fprintf(&b, "table %d: total_key_count=%d total_key_size=%d total_value_size=%d pebble_tombstones=%d vnodes=%d\n",
			id, c.Entries, c.KeyBytes, c.ValueBytes, c.PebbleTombstones, vnodes)
		for _, vn := range v.Vnodes(id) {
			fmt.Fprintf(&b, "  t%d/v%d: %s\n", id, vn, physFormatCounts(v.Vnode(id, vn)))
		}
	}
	b.WriteString("files:\n")
	for _, f := range Files(v) {
		virtual := ""
		if f.Virtual {
			virtual = fmt.Sprintf(" virtual(backing %06d)", f.BackingNum)
		}
		fmt.Fprintf(&b, "  %06d L%d%s entries=%d meta=%d foreign=%d range-dels=%d %s\n",
			f.FileNum, f.Level, virtual, f.NumEntries, f.Summary.MetaKeys, f.Summary.Foreign, f.NumRangeDeletions, f.Source)
		for _, ts := range f.Summary.Tables {
			for _, vs := range ts.Vnodes {
				var samples []string
				for _, s := range vs.Samples() {
					samples = append(samples, fmt.Sprintf("%d:%d/%d/%d/%d", physPKNum(s.PK), s.Puts, s.Deletes, s.HeadPuts, s.Prefixes))
				}
				last := ""
				if vs.LastPK != nil {
					last = fmt.Sprintf(" last=%d", physPKNum(vs.LastPK))
				}
				fmt.Fprintf(&b, "    t%d/v%d: entries=%d tombstones=%d samples=[%s]%s\n",
					ts.Table, vs.Vnode, vs.Counts.Entries, vs.Counts.PebbleTombstones, strings.Join(samples, " "), last)
			}
		}
	}
	for _, fe := range Rebuilt(v) {
		fmt.Fprintf(&b, "rebuilt %06d: %v\n", fe.FileNum, fe.Err)
	}
	return b.String()
}

func physPKNum(pk []byte) uint64 {
	n, _, err := keys.DecodeUint64(pk)
	if err != nil {
		return 0
	}
	return n
}

func physFormatRange(rc sstsummary.RangeCounts) string {
	f := func(name string, e sstsummary.Estimate) string {
		return fmt.Sprintf("%s=%.1f [%d, %d]", name, e.Est, e.Lo, e.Hi)
	}
	return strings.Join([]string{
		f("entries", rc.Entries), f("puts", rc.Puts), f("dels", rc.Deletes),
		f("head-puts", rc.HeadPuts), f("prefixes", rc.Prefixes), fmt.Sprintf("files=%d", rc.Files),
	}, "\n")
}
