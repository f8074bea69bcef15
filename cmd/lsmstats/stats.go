package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/lsmstats/lsmstats/objstore"
)

type statsJSON struct {
	CommittedEpoch uint64 `json:"committed_epoch"`
	// PhysicalError, if set, is why the physical statistics are unavailable
	// (an SST whose statistics cannot be read): every physical field is
	// then left out, never shown as zero.
	PhysicalError string `json:"physical_error,omitempty"`
	// CorruptMetadata are the metadata rows the read-only open left out
	// (the live statistics of their tables are then incomplete).
	CorruptMetadata []string         `json:"corrupt_metadata,omitempty"`
	Tables          []tableStatsJSON `json:"tables"`
}

type tableStatsJSON struct {
	TableID    uint32          `json:"table_id"`
	Name       string          `json:"name"`
	VnodeCount int             `json:"vnode_count"`
	Physical   *physicalJSON   `json:"physical,omitempty"`
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

// liveJSON is a table's live statistics. Rows and Bytes are left out when
// they are incomplete (a live-statistics row of the table that does not
// decode; CorruptMetadata names it), never shown short.
type liveJSON struct {
	Rows              *int64 `json:"rows,omitempty"`
	Bytes             *int64 `json:"bytes,omitempty"`
	ContainsEstimates bool   `json:"contains_estimates"`
}

// vnodeStatJSON is one vnode's statistics; the physical fields are left out
// when the physical statistics are unavailable, the live ones when they are
// incomplete.
type vnodeStatJSON struct {
	Vnode            uint16  `json:"vnode"`
	Entries          *uint64 `json:"entries,omitempty"`
	Puts             *uint64 `json:"puts,omitempty"`
	Deletes          *uint64 `json:"deletes,omitempty"`
	PebbleTombstones *uint64 `json:"pebble_tombstones,omitempty"`
	KeyBytes         *uint64 `json:"key_bytes,omitempty"`
	LiveRows         *int64  `json:"live_rows,omitempty"`
	LiveBytes        *int64  `json:"live_bytes,omitempty"`
}

// openStore opens the store in dir for a command: read-only unless write,
// and never creating one.
func openStore(dir, objectStore string, stderr io.Writer, write bool) (*lsm.Store, error) {
	if dir == "" {
		return nil, errors.New("--dir is required")
	}
	return lsm.Open(dir, &lsm.Options{ReadOnly: !write, MustExist: true, Logger: cliLogger{w: stderr},
		ObjectStore: objectStoreOptions(objectStore)})
}

// objectStoreFlag adds the --object-store flag to fs.
func objectStoreFlag(fs *flag.FlagSet) *string {
	return fs.String("object-store", "", "the store keeps its SSTs in this object store: s3://BUCKET/PREFIX?endpoint=URL&region=R "+
		"(credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN)")
}

// objectStoreCacheSize is the size of the local cache of remote SST blocks
// of a store on an object store that a command opens.
const objectStoreCacheSize = 256 << 20

// objectStoreOptions returns the store options of --object-store URL: nil
// for none.
func objectStoreOptions(url string) *objstore.StoreOptions {
	if url == "" {
		return nil
	}
	return &objstore.StoreOptions{URL: url, CacheSize: objectStoreCacheSize}
}

// collectStats gathers the statistics of one table or of all.
func collectStats(s *lsm.Store, table int64) (statsJSON, error) {
	st := s.Stats()
	out := statsJSON{CommittedEpoch: st.CommittedEpoch}
	physical := st.PhysicalErr == nil
	if !physical {
		out.PhysicalError = st.PhysicalErr.Error()
	}
	for _, err := range s.CorruptMetadata() {
		out.CorruptMetadata = append(out.CorruptMetadata, err.Error())
	}
	found := false
	u := func(v uint64) *uint64 {
		if !physical {
			return nil
		}
		return &v
	}
	for _, def := range s.Tables() {
		if table >= 0 && int64(def.ID) != table {
			continue
		}
		found = true
		tot := st.Physical.Table(def.ID)
		live := st.Live.Table(def.ID)
		t := tableStatsJSON{TableID: def.ID, Name: def.Name, VnodeCount: def.VnodeCount,
			Live: liveJSON{Rows: &live.Rows, Bytes: &live.Bytes, ContainsEstimates: st.Live.ContainsEstimates(def.ID)},
		}
		if physical {
			t.Physical = &physicalJSON{Entries: tot.Counts.Entries, Puts: tot.Counts.Puts, Deletes: tot.Counts.Deletes,
				PebbleTombstones: tot.PebbleTombstones, KeyBytes: tot.Counts.KeyBytes,
				TotalKeyCount: tot.TotalKeyCount, TotalKeySize: tot.TotalKeySize, TotalValueSize: tot.TotalValueSize}
		}
		for v := 0; v < def.VnodeCount; v++ {
			vs := st.Vnode(def.ID, uint16(v))
			incomplete := s.LiveIncomplete(def.ID, uint16(v))
			if incomplete {
				t.Live.Rows, t.Live.Bytes = nil, nil
			}
			if (!physical || vs.Physical.IsZero()) && vs.Live.Rows == 0 && vs.Live.Bytes == 0 && !incomplete {
				continue
			}
			p := vs.Physical
			vj := vnodeStatJSON{Vnode: uint16(v), Entries: u(p.Entries), Puts: u(p.Puts),
				Deletes: u(p.Deletes), PebbleTombstones: u(p.PebbleTombstones), KeyBytes: u(p.KeyBytes)}
			if !incomplete {
				vj.LiveRows, vj.LiveBytes = &vs.Live.Rows, &vs.Live.Bytes
			}
			t.Vnodes = append(t.Vnodes, vj)
		}
		out.Tables = append(out.Tables, t)
	}
	if table >= 0 && !found {
		return out, errors.Wrapf(lsm.ErrUnknownTable, "table %d", table)
	}
	return out, nil
}

func statsCmd(args []string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "store directory")
	table := fs.Int64("table", -1, "only this table id")
	asJSON := fs.Bool("json", false, "print JSON")
	objectStore := objectStoreFlag(fs)
	if err := fs.Parse(args); err != nil {
		return usageError(err)
	}
	if fs.NArg() > 0 {
		return usageError(errors.Newf("unexpected argument %q", fs.Arg(0)))
	}
	if *dir == "" {
		return usageError(errors.New("--dir is required"))
	}
	s, err := openStore(*dir, *objectStore, stderr, false)
	if err != nil {
		return exitOK, err
	}
	defer s.Close()
	out, err := collectStats(s, *table)
	if err != nil {
		return exitOK, err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return exitOK, err
		}
	} else {
		printStats(stdout, out)
	}
	return exitOK, statsProblem(s, out)
}

// statsProblem is the error of a stats run that printed what it could of a
// corrupt store: unavailable physical statistics or metadata rows left out.
func statsProblem(s *lsm.Store, out statsJSON) error {
	var problems []string
	if err := s.Stats().PhysicalErr; err != nil {
		if !lsmstats.IsCorruption(err) {
			return errors.Wrap(err, "physical statistics unavailable")
		}
		problems = append(problems, fmt.Sprintf("physical statistics unavailable: %v", err))
	}
	for _, m := range out.CorruptMetadata {
		problems = append(problems, "left out: "+m)
	}
	if len(problems) == 0 {
		return nil
	}
	msg := "the store is corrupt"
	for _, p := range problems {
		msg += "\n  " + p
	}
	msg += "\n(lsmstats verify names every corrupt file and every statistic it cannot check)"
	return errCorrupt("%s", msg)
}

func printStats(w io.Writer, out statsJSON) {
	fmt.Fprintf(w, "committed epoch %d\n", out.CommittedEpoch)
	for _, t := range out.Tables {
		fmt.Fprintf(w, "\ntable %d (%s), %d vnodes\n", t.TableID, t.Name, t.VnodeCount)
		if p := t.Physical; p != nil {
			fmt.Fprintf(w, "  physical: entries %d (puts %d, deletes %d), pebble tombstones %d, key bytes %d\n",
				p.Entries, p.Puts, p.Deletes, p.PebbleTombstones, p.KeyBytes)
			fmt.Fprintf(w, "  hummock:  total_key_count %d, total_key_size %d, total_value_size %d\n",
				p.TotalKeyCount, p.TotalKeySize, p.TotalValueSize)
		} else {
			fmt.Fprintf(w, "  physical: unavailable (see the error)\n")
		}
		est := ""
		if t.Live.ContainsEstimates {
			est = " (may contain estimates)"
		}
		fmt.Fprintf(w, "  live:     rows %s, bytes %s%s\n", inum(t.Live.Rows), inum(t.Live.Bytes), est)
		fmt.Fprintf(w, "  %6s %10s %10s %10s %10s %12s %12s\n", "vnode", "entries", "puts", "deletes", "tombstones", "live rows", "live bytes")
		for _, v := range t.Vnodes {
			fmt.Fprintf(w, "  %6d %10s %10s %10s %10s %12s %12s\n", v.Vnode, num(v.Entries), num(v.Puts), num(v.Deletes),
				num(v.PebbleTombstones), inum(v.LiveRows), inum(v.LiveBytes))
		}
	}
}

// num renders an optional count: "-" when unavailable.
func num(v *uint64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}

// inum renders an optional signed count: "-" when unavailable.
func inum(v *int64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}
