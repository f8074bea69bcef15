package lsm

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/lsmstats/lsmstats/internal/sstsummary"
	"github.com/lsmstats/lsmstats/internal/ssttracker"
	"github.com/lsmstats/lsmstats/internal/statsinternal"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/objstore"
	"github.com/stretchr/testify/require"
)

// ddBad holds the bad-input commands of TestDataDriven (testdata/badinput;
// close and verify are the shared harness's):
//
//	raw-set [flush]                 write keys through DB(), bypassing the
//	                                store: one "KEY VALUE" per line
//	raw-pebble-set                  the same with Pebble alone, on a store
//	                                that does not open
//	get table=N vnode=V pk=PK       Store.Get
//	iter table=N vnode=V [lo=PK] [hi=PK]
//	                                Store.NewIter over one vnode
//	write-pk name=W epoch=E vnode=V pk=PK [row=R]
//	                                an Insert with raw pk bytes
//	physical                        keys the collector counted apart
//	                                (foreign, metadata) in the live SSTs
//
// KEY is hex:<bytes>, meta:<name> (a metadata key) or a versioned key
// t<table>/v<vnode>/<PK>@<epoch>:put|del. PK is u:<n> (u64), b:<text>
// (byte string) or hex:<bytes>. VALUE is u64:<n> (8 bytes BE), hex:<bytes>
// or the text itself.
type ddBad struct {
	dir string
	// obj is the object store of the file's stores (nil: local disk).
	obj *objstore.StoreOptions
}

func (d *ddBad) run(t *testing.T, s *Store, writers map[string]*Writer, td *datadriven.TestData) (string, bool) {
	switch td.Cmd {
	case "raw-pebble-set":
		opts := &pebble.Options{Comparer: keys.Comparer, Logger: QuietLogger(nil)}
		if d.obj != nil {
			// Pebble opens the remote SSTs its catalog lists through the
			// factory, and the store's creator id is in the catalog.
			opts.Experimental.RemoteStorage = remote.MakeSimpleFactory(map[remote.Locator]remote.Storage{objectStoreLocator: d.obj.Storage})
			opts.Experimental.CreateOnShared = remote.CreateOnSharedAll
			opts.Experimental.CreateOnSharedLocator = objectStoreLocator
		}
		db, err := pebble.Open(filepath.Join(d.dir, pebbleDir), opts)
		require.NoError(t, err)
		for _, line := range strings.Split(strings.TrimSpace(td.Input), "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
			require.NoError(t, db.Set(ddKey(t, k), ddValue(t, v), pebble.Sync))
		}
		require.NoError(t, db.Close())
		return "ok", true
	case "raw-set":
		b := s.db.NewBatch()
		for _, line := range strings.Split(strings.TrimSpace(td.Input), "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
			require.NoError(t, b.Set(ddKey(t, k), ddValue(t, v), nil))
		}
		if err := b.Commit(pebble.Sync); err != nil {
			return "error: " + err.Error(), true
		}
		if td.HasArg("flush") {
			if err := s.db.Flush(); err != nil {
				return "error: " + err.Error(), true
			}
			// The stats refresh after a flush runs in the background.
			if err := s.tracker.Refresh(); err != nil {
				return "error: " + err.Error(), true
			}
		}
		return "ok", true
	case "get":
		row, ok, err := s.Get(uint32(argUint(t, td, "table")), uint16(argUint(t, td, "vnode")), ddPK(t, argString(t, td, "pk")))
		switch {
		case err != nil:
			return "error: " + err.Error(), true
		case !ok:
			return "not found", true
		}
		return string(row), true
	case "iter":
		var lo, hi []byte
		if td.HasArg("lo") {
			lo = ddPK(t, argString(t, td, "lo"))
		}
		if td.HasArg("hi") {
			hi = ddPK(t, argString(t, td, "hi"))
		}
		it, err := s.NewIter(uint32(argUint(t, td, "table")), uint16(argUint(t, td, "vnode")), lo, hi)
		if err != nil {
			return "error: " + err.Error(), true
		}
		var out strings.Builder
		for ok := it.First(); ok; ok = it.Next() {
			fmt.Fprintf(&out, "%x=%s\n", it.PK(), it.Row())
		}
		if err := it.Close(); err != nil {
			fmt.Fprintf(&out, "error: %v\n", err)
		}
		if out.Len() == 0 {
			return "(empty)", true
		}
		return out.String(), true
	case "write-pk":
		w := writers[argString(t, td, "name")]
		row := "r"
		if td.HasArg("row") {
			row = argString(t, td, "row")
		}
		err := w.Insert(argUint(t, td, "epoch"), uint16(argUint(t, td, "vnode")), ddPK(t, argString(t, td, "pk")), []byte(row))
		return errOr(err, "ok"), true
	case "physical":
		var foreign, meta uint64
		for _, f := range ssttracker.Files(statsinternal.VersionOf(s.Stats().Physical)) {
			foreign += f.Summary.Foreign
			meta += f.Summary.MetaKeys
		}
		return fmt.Sprintf("foreign keys %d, metadata keys %d", foreign, meta), true
	}
	return "", false
}

func ddHex(t *testing.T, s string) []byte {
	b, err := hex.DecodeString(s)
	require.NoError(t, err, "%q", s)
	return b
}

// ddPK parses u:<n>, b:<text> or hex:<bytes>.
func ddPK(t *testing.T, s string) []byte {
	kind, v, ok := strings.Cut(s, ":")
	require.True(t, ok, "pk %q", s)
	switch kind {
	case "u":
		return keys.AppendUint64(nil, mustUint(t, v))
	case "b":
		return keys.AppendBytes(nil, []byte(v))
	case "hex":
		return ddHex(t, v)
	}
	t.Fatalf("pk %q", s)
	return nil
}

// ddKey parses hex:<bytes>, meta:<name> or t<table>/v<vnode>/<PK>@<epoch>:put|del.
func ddKey(t *testing.T, s string) []byte {
	switch {
	case strings.HasPrefix(s, "hex:"):
		return ddHex(t, s[4:])
	case strings.HasPrefix(s, "meta:"):
		return keys.MetaKey([]byte(s[5:]))
	}
	var table, vnode, epoch uint64
	rest, kind, ok := strings.Cut(s, ":put")
	k := keys.KindPut
	if !ok {
		rest, kind, ok = strings.Cut(s, ":del")
		k = keys.KindDelete
	}
	require.True(t, ok && kind == "", "key %q", s)
	f := strings.SplitN(rest, "/", 3)
	require.Len(t, f, 3, "key %q", s)
	table = mustUint(t, strings.TrimPrefix(f[0], "t"))
	vnode = mustUint(t, strings.TrimPrefix(f[1], "v"))
	pk, e, ok := strings.Cut(f[2], "@")
	require.True(t, ok, "key %q", s)
	epoch = mustUint(t, e)
	return keys.AppendVersioned(nil, uint32(table), uint16(vnode), ddPK(t, pk), keys.MakeVersion(epoch, 0), k)
}

func ddValue(t *testing.T, s string) []byte {
	switch {
	case strings.HasPrefix(s, "u64:"):
		n, err := strconv.ParseUint(s[4:], 10, 64)
		require.NoError(t, err)
		return binary.BigEndian.AppendUint64(nil, n)
	case strings.HasPrefix(s, "hex:"):
		return ddHex(t, s[4:])
	}
	return []byte(s)
}

// corruptCollector wraps the stats collector and damages the payload it
// writes into each SST's properties.
type corruptCollector struct {
	pebble.BlockPropertyCollector
	mode string
}

func (c *corruptCollector) FinishTable(buf []byte) ([]byte, error) {
	n := len(buf)
	out, err := c.BlockPropertyCollector.FinishTable(buf)
	if err != nil || len(out) <= n+2 {
		return out, err
	}
	switch c.mode {
	case "truncated":
		out = out[:n+(len(out)-n)/2]
	case "flipped":
		out[len(out)-1] ^= 0x40
	case "unknown-version":
		out[n] = 0x7E // the format byte, after Pebble's shortID
	case "empty":
		out = out[:n]
	}
	return out, nil
}

// recordingLogger keeps the store's lines (Infof) and Pebble's errors.
type recordingLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *recordingLogger) Infof(format string, args ...any)  { l.record(format, args...) }
func (l *recordingLogger) Errorf(format string, args ...any) { l.record(format, args...) }

// Fatalf writes the line and exits, as QuietLogger's does.
func (l *recordingLogger) Fatalf(format string, args ...any) {
	QuietLogger(nil).Fatalf(format, args...)
}

func (l *recordingLogger) record(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *recordingLogger) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// TestCorruptPayloadEndToEnd: a store whose SSTs carry truncated, damaged,
// empty or unknown-version statistics payloads (every SST a commit or a
// compaction writes) keeps working. Each such payload is logged with its
// file and the statistics are rebuilt from the SST's keys: the physical
// counts equal the versions in the store, Verify finds no difference and
// notes every rebuilt file, estimates work. After a reopen with the real
// collector, new SSTs carry good payloads next to the rebuilt ones.
func TestCorruptPayloadEndToEnd(t *testing.T) {
	for _, mode := range []string{"truncated", "flipped", "unknown-version", "empty"} {
		t.Run("payload="+mode, func(t *testing.T) {
			dir := t.TempDir()
			log := &recordingLogger{}
			s, err := Open(dir, &Options{Logger: log, MemoryWatermark: -1, Pebble: func(o *pebble.Options) {
				o.BlockPropertyCollectors = []func() pebble.BlockPropertyCollector{func() pebble.BlockPropertyCollector {
					return &corruptCollector{BlockPropertyCollector: sstsummary.NewCollector(), mode: mode}
				}}
			}})
			require.NoError(t, err)
			c := newChurn(t, s, TableDef{ID: 1, VnodeCount: 8, PK: keys.Schema{keys.Uint64}}, 7)
			for range 6 {
				c.step(200, 30, 20)
			}
			check := func(when string, all bool) {
				st := s.Stats()
				require.NoError(t, st.PhysicalErr, when)
				require.EqualValues(t, len(rawVersions(t, s, 1)), st.Physical.Table(1).TotalKeyCount, "%s: physical entries", when)
				require.EqualValues(t, len(c.live), st.Live.Table(1).Rows, when)
				rep, err := s.Verify()
				require.NoError(t, err, when)
				require.Empty(t, rep.Differences, when)
				notes := strings.Join(rep.Notes, "\n")
				require.Contains(t, notes, "statistics rebuilt from its keys", when)
				st = s.Stats() // Verify flushed the checkpoints committed as batches
				if all {
					require.Len(t, ssttracker.Rebuilt(statsinternal.VersionOf(st.Physical)), st.Physical.NumFiles(), "%s: every SST", when)
				} else {
					require.Less(t, len(ssttracker.Rebuilt(statsinternal.VersionOf(st.Physical))), st.Physical.NumFiles(), "%s: SSTs with good payloads", when)
				}
				// The estimates of a vnode's pk ranges still bracket the truth.
				var rows float64
				for v := 0; v < 8; v++ {
					rows += st.EstimateRows(1, uint16(v), nil, nil).Rows
				}
				require.InDelta(t, float64(len(c.live)), rows, 0.5, when)
			}
			check("with damaged payloads", true)
			require.Contains(t, log.text(), "unusable payload")
			require.NoError(t, s.CompactRange(context.Background(), 1, 0, 0))
			check("compacted with damaged payloads", true)
			require.NoError(t, s.Close())

			s, err = Open(dir, &Options{Logger: &recordingLogger{}, MemoryWatermark: -1})
			require.NoError(t, err)
			defer s.Close()
			require.Equal(t, c.at(s.CommittedEpoch()), readAt(t, s, c.def, s.CommittedEpoch()))
			c.s, c.epoch = s, s.EpochFloor()
			c.w, err = s.NewWriter(1, nil, nil)
			require.NoError(t, err)
			c.step(100, 30, 20)
			check("after a reopen with the real collector and a commit", false)
		})
	}
}

// TestIterAfterClose: iterators still open when the store closes are
// released by Close and stop with ErrClosed at their next positioning call.
// Before the fix, Pebble's Close panicked on the positioned ones ("element
// has outstanding references"), and one used after Close panicked in
// Pebble's iterator (an integer divide by zero).
func TestIterAfterClose(t *testing.T) {
	s, err := Open(t.TempDir(), &Options{Logger: QuietLogger(nil)})
	require.NoError(t, err)
	c := newChurn(t, s, TableDef{ID: 1, VnodeCount: 2, PK: keys.Schema{keys.Uint64}}, 1)
	c.step(50, 0, 0)
	var its []*Iter
	for range 3 {
		it, err := s.NewIter(1, 0, nil, nil)
		require.NoError(t, err)
		its = append(its, it)
	}
	require.True(t, its[1].First())
	require.True(t, its[2].First())
	require.NoError(t, s.Close())
	require.False(t, its[0].First())
	require.False(t, its[1].Next())
	require.False(t, its[2].SeekGE(keys.AppendUint64(nil, 7)))
	for _, it := range its {
		require.False(t, it.Valid())
		require.True(t, errors.Is(it.Error(), ErrClosed), "%v", it.Error())
		require.True(t, errors.Is(it.Close(), ErrClosed))
	}
}
