package lsm

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// ddGC holds the state of the GC commands of TestDataDriven
// (testdata/gc):
//
//	pin name=P epoch=E            pin an epoch (prints the error if refused)
//	unpin name=P                  release a pin
//	gc [table=N] [vnodes=a-b] [epoch=S] [batch=N] [max=N] [resume]
//	                              one GC pass (resume: from where the last
//	                              one stopped); prints what it did
//	compact [table=N] [vnodes=a-b] compact the range to the bottom level
//	stats [table=N]               physical and live statistics per vnode
type ddGC struct {
	s      *Store
	pins   map[string]*Snapshot
	resume []byte
}

func (d *ddGC) run(t *testing.T, s *Store, td *datadriven.TestData) (string, bool) {
	if d.s != s {
		// Pins and resume points belong to the store they were made in.
		d.s, d.pins, d.resume = s, map[string]*Snapshot{}, nil
	}
	table := uint32(argUintDefault(td, "table", 1))
	vnodeRange := func() (int, int) {
		if !td.HasArg("vnodes") {
			return 0, 0
		}
		a, b, _ := strings.Cut(argString(t, td, "vnodes"), "-")
		lo, err := strconv.Atoi(a)
		require.NoError(t, err)
		hi, err := strconv.Atoi(b)
		require.NoError(t, err)
		return lo, hi + 1
	}
	switch td.Cmd {
	case "pin":
		sn, err := s.Pin(argUint(t, td, "epoch"))
		if err != nil {
			return "error: " + err.Error(), true
		}
		d.pins[argString(t, td, "name")] = sn
		return fmt.Sprintf("pinned epoch %d; safe epoch %d", sn.Epoch(), s.SafeEpoch()), true
	case "unpin":
		name := argString(t, td, "name")
		d.pins[name].Close()
		delete(d.pins, name)
		return fmt.Sprintf("safe epoch %d", s.SafeEpoch()), true
	case "gc":
		lo, hi := vnodeRange()
		req := GCRequest{Table: table, VnodeLo: lo, VnodeHi: hi,
			SafeEpoch:   argUintDefault(td, "epoch", 0),
			BatchSize:   int(argUintDefault(td, "batch", 0)),
			MaxVersions: int64(argUintDefault(td, "max", 0)),
		}
		if td.HasArg("resume") {
			req.Start = d.resume
		}
		res, err := s.GC(context.Background(), req)
		d.resume = res.Resume
		if err != nil {
			out := "error: " + err.Error()
			if res.Ingestions > 0 {
				out += fmt.Sprintf("\ndeleted %d in %d ingestions before the error", res.Deleted, res.Ingestions)
			}
			if res.Resume != nil {
				out += fmt.Sprintf("\nresume at %s", formatPrefix(res.Resume))
			}
			return out, true
		}
		out := fmt.Sprintf("safe epoch %d: examined %d versions of %d pks, deleted %d (%d bytes) in %d ingestions; watermark %d",
			res.SafeEpoch, res.Examined, res.Prefixes, res.Deleted, res.DeletedBytes, res.Ingestions, s.GCEpoch())
		if res.Resume != nil {
			out += fmt.Sprintf("\nresume at %s", formatPrefix(res.Resume))
		}
		return out, true
	case "compact":
		lo, hi := vnodeRange()
		return errOr(s.CompactRange(context.Background(), table, lo, hi), "ok"), true
	case "stats":
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
			return "(empty)", true
		}
		return out.String(), true
	}
	return "", false
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
