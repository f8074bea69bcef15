package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/lsm"
)

type statsJSON struct {
	CommittedEpoch uint64           `json:"committed_epoch"`
	Tables         []tableStatsJSON `json:"tables"`
}

type tableStatsJSON struct {
	TableID    uint32          `json:"table_id"`
	Name       string          `json:"name"`
	VnodeCount int             `json:"vnode_count"`
	Physical   physicalJSON    `json:"physical"`
	Live       liveJSON        `json:"live"`
	Vnodes     []vnodeStatJSON `json:"vnodes"`
}

type physicalJSON struct {
	Entries          uint64 `json:"entries"`
	Puts             uint64 `json:"puts"`
	Deletes          uint64 `json:"deletes"`
	PebbleTombstones uint64 `json:"pebble_tombstones"`
	KeyBytes         uint64 `json:"key_bytes"`
	// Hummock-style table totals.
	TotalKeyCount  uint64 `json:"total_key_count"`
	TotalKeySize   uint64 `json:"total_key_size"`
	TotalValueSize uint64 `json:"total_value_size"`
}

type liveJSON struct {
	Rows              int64 `json:"rows"`
	Bytes             int64 `json:"bytes"`
	ContainsEstimates bool  `json:"contains_estimates"`
}

type vnodeStatJSON struct {
	Vnode            uint16 `json:"vnode"`
	Entries          uint64 `json:"entries"`
	Puts             uint64 `json:"puts"`
	Deletes          uint64 `json:"deletes"`
	PebbleTombstones uint64 `json:"pebble_tombstones"`
	KeyBytes         uint64 `json:"key_bytes"`
	LiveRows         int64  `json:"live_rows"`
	LiveBytes        int64  `json:"live_bytes"`
}

func openExisting(dir string) (*lsm.Store, error) {
	if dir == "" {
		return nil, errors.New("--dir is required")
	}
	return lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger{W: io.Discard}})
}

// collectStats gathers the statistics of one table or of all.
func collectStats(s *lsm.Store, table int64) (statsJSON, error) {
	st := s.Stats()
	out := statsJSON{CommittedEpoch: st.CommittedEpoch}
	found := false
	for _, def := range s.Tables() {
		if table >= 0 && int64(def.ID) != table {
			continue
		}
		found = true
		tot := st.Physical.Table(def.ID)
		live := st.Live.Table(def.ID)
		t := tableStatsJSON{TableID: def.ID, Name: def.Name, VnodeCount: def.VnodeCount,
			Physical: physicalJSON{Entries: tot.Counts.Entries, Puts: tot.Counts.Puts, Deletes: tot.Counts.Deletes,
				PebbleTombstones: tot.PebbleTombstones, KeyBytes: tot.Counts.KeyBytes,
				TotalKeyCount: tot.TotalKeyCount, TotalKeySize: tot.TotalKeySize, TotalValueSize: tot.TotalValueSize},
			Live: liveJSON{Rows: live.Rows, Bytes: live.Bytes, ContainsEstimates: st.Live.ContainsEstimates(def.ID)},
		}
		for v := 0; v < def.VnodeCount; v++ {
			vs := st.Vnode(def.ID, uint16(v))
			if vs.Physical.IsZero() && vs.Live.Rows == 0 && vs.Live.Bytes == 0 {
				continue
			}
			t.Vnodes = append(t.Vnodes, vnodeStatJSON{Vnode: uint16(v), Entries: vs.Physical.Entries, Puts: vs.Physical.Puts,
				Deletes: vs.Physical.Deletes, PebbleTombstones: vs.Physical.PebbleTombstones, KeyBytes: vs.Physical.KeyBytes,
				LiveRows: vs.Live.Rows, LiveBytes: vs.Live.Bytes})
		}
		out.Tables = append(out.Tables, t)
	}
	if table >= 0 && !found {
		return out, errors.Wrapf(lsm.ErrUnknownTable, "table %d", table)
	}
	return out, nil
}

func statsCmd(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	dir := fs.String("dir", "", "store directory")
	table := fs.Int64("table", -1, "only this table id")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s, err := openExisting(*dir)
	if err != nil {
		return err
	}
	defer s.Close()
	out, err := collectStats(s, *table)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	fmt.Fprintf(stdout, "committed epoch %d\n", out.CommittedEpoch)
	for _, t := range out.Tables {
		p := t.Physical
		fmt.Fprintf(stdout, "\ntable %d (%s), %d vnodes\n", t.TableID, t.Name, t.VnodeCount)
		fmt.Fprintf(stdout, "  physical: entries %d (puts %d, deletes %d), pebble tombstones %d, key bytes %d\n",
			p.Entries, p.Puts, p.Deletes, p.PebbleTombstones, p.KeyBytes)
		fmt.Fprintf(stdout, "  hummock:  total_key_count %d, total_key_size %d, total_value_size %d\n",
			p.TotalKeyCount, p.TotalKeySize, p.TotalValueSize)
		est := ""
		if t.Live.ContainsEstimates {
			est = " (may contain estimates)"
		}
		fmt.Fprintf(stdout, "  live:     rows %d, bytes %d%s\n", t.Live.Rows, t.Live.Bytes, est)
		fmt.Fprintf(stdout, "  %6s %10s %10s %10s %10s %12s %12s\n", "vnode", "entries", "puts", "deletes", "tombstones", "live rows", "live bytes")
		for _, v := range t.Vnodes {
			fmt.Fprintf(stdout, "  %6d %10d %10d %10d %10d %12d %12d\n", v.Vnode, v.Entries, v.Puts, v.Deletes, v.PebbleTombstones, v.LiveRows, v.LiveBytes)
		}
	}
	return nil
}
