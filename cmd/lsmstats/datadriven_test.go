package main

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/faultfs"
	"github.com/lsmstats/lsmstats/internal/lsminternal"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// TestDataDriven runs the command line on real stores that the test files
// build and damage (testdata/cli/* at the repository root). Commands:
//
//	build [vnodes=N] [rows=N]   a store in $ROOT/store: table 1 ("t"), three
//	                            epochs of inserts, SSTs cut at 8 KiB, no
//	                            compactions (so that file numbers are fixed);
//	                            prints its live SSTs and what they hold
//	corrupt-block file=NNNNNN block=KIND [index=I]
//	                            flips 4 bytes in the middle of the I-th block
//	                            of KIND (faultfs.SSTBlocks) of an SST
//	corrupt-meta table=T vnode=V
//	                            overwrites the first live-statistics bucket
//	                            row of (T, V) with bytes that do not decode
//	run                         runs each input line as a command line
//	                            ($ROOT and $STORE expanded) and prints its
//	                            stdout, its own stderr message (the lines
//	                            from "lsmstats <command>: " on; the store's
//	                            log lines before it vary with timing) and its
//	                            exit status
//	ls                          lists every file under $ROOT
//
// Paths print as $ROOT.
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "../../testdata/cli", func(t *testing.T, path string) {
		root := t.TempDir()
		store := filepath.Join(root, "store")
		expand := func(s string) string {
			return strings.NewReplacer("$STORE", store, "$ROOT", root).Replace(s)
		}
		hide := func(s string) string { return strings.ReplaceAll(s, root, "$ROOT") }
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			switch td.Cmd {
			case "build":
				vnodes, rows := 4, 500
				if td.HasArg("vnodes") {
					td.ScanArgs(t, "vnodes", &vnodes)
				}
				if td.HasArg("rows") {
					td.ScanArgs(t, "rows", &rows)
				}
				return ddBuild(t, store, vnodes, rows)
			case "corrupt-block":
				var file, kind string
				index := 0
				td.ScanArgs(t, "file", &file)
				td.ScanArgs(t, "block", &kind)
				if td.HasArg("index") {
					td.ScanArgs(t, "index", &index)
				}
				return ddCorruptBlock(t, filepath.Join(store, "db", file+".sst"), kind, index)
			case "corrupt-meta":
				var table, vnode int
				td.ScanArgs(t, "table", &table)
				td.ScanArgs(t, "vnode", &vnode)
				key := stats0BucketKey(uint32(table), uint16(vnode))
				s, err := lsm.Open(store, &lsm.Options{MustExist: true, Logger: lsm.QuietLogger(io.Discard),
					Pebble: func(o *pebble.Options) { o.DisableAutomaticCompactions = true }})
				require.NoError(t, err)
				require.NoError(t, lsminternal.DB(s).Set(key, bytes.Repeat([]byte{0xff}, 11), pebble.Sync))
				require.NoError(t, s.Close())
				return fmt.Sprintf("overwrote row %x\n", key)
			case "run":
				var b strings.Builder
				for _, line := range strings.Split(strings.TrimSpace(td.Input), "\n") {
					args := strings.Fields(expand(line))
					var out, errb bytes.Buffer
					code := run(args, &out, &errb)
					fmt.Fprintf(&b, "$ lsmstats %s\n", line)
					b.WriteString(hide(out.String()))
					if msg := commandMessage(args, errb.String()); msg != "" {
						b.WriteString("stderr: " + hide(msg))
					}
					fmt.Fprintf(&b, "exit %d\n", code)
				}
				return b.String()
			case "ls":
				var b strings.Builder
				require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
					if err != nil || p == root {
						return err
					}
					rel, _ := filepath.Rel(root, p)
					if d.IsDir() {
						rel += "/"
					}
					b.WriteString(rel + "\n")
					return nil
				}))
				return b.String()
			default:
				t.Fatalf("unknown command %q", td.Cmd)
				return ""
			}
		})
	})
}

// commandMessage returns the command's own message on stderr: from the
// first line "lsmstats <command>: " on (usage goes to stderr without one).
func commandMessage(args []string, stderr string) string {
	if len(args) == 0 {
		return stderr
	}
	prefix := "lsmstats " + args[0] + ": "
	lines := strings.SplitAfter(stderr, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, prefix) || strings.HasPrefix(l, "lsmstats: unknown command") {
			return strings.Join(lines[i:], "")
		}
	}
	return ""
}

// stats0BucketKey is the metadata key of the first live-statistics bucket
// of a vnode (stats.BucketKey(table, vnode, nil, true)).
func stats0BucketKey(table uint32, vnode uint16) []byte {
	name := append([]byte("live/"), byte(table>>24), byte(table>>16), byte(table>>8), byte(table))
	name = append(name, byte(vnode>>8), byte(vnode), 0)
	return keys.MetaKey(name)
}

func ddBuild(t *testing.T, dir string, vnodes, rows int) string {
	s, err := lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger(io.Discard), TargetFileSize: 8 << 10, CommitBatchBytes: -1,
		Pebble: func(o *pebble.Options) { o.DisableAutomaticCompactions = true }})
	require.NoError(t, err)
	def := lsm.TableDef{ID: 1, Name: "t", VnodeCount: vnodes, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	w, err := s.NewWriter(1, nil, nil)
	require.NoError(t, err)
	for e := uint64(1); e <= 3; e++ {
		for i := range uint64(rows) {
			pk := keys.AppendUint64(nil, e*10000+i)
			require.NoError(t, w.Insert(e, def.VnodeOf(pk), pk, []byte(fmt.Sprintf("row %d at %d", i, e))))
		}
		require.NoError(t, w.Seal(e))
		require.NoError(t, s.Commit(e))
	}
	require.NoError(t, w.Close())
	var b strings.Builder
	levels, err := lsminternal.DB(s).SSTables()
	require.NoError(t, err)
	for level, tables := range levels {
		for _, tbl := range tables {
			fmt.Fprintf(&b, "%06d L%d %s .. %s\n", tbl.FileNum, level, ddKey(tbl.Smallest.UserKey), ddKey(tbl.Largest.UserKey))
		}
	}
	require.NoError(t, s.Close())
	return b.String()
}

// ddKey renders a key as table/vnode/pk@epoch, or meta:name.
func ddKey(key []byte) string {
	if name, ok := keys.MetaName(key); ok {
		return "meta:" + strconv.Quote(string(name))
	}
	k, err := keys.Decode(key)
	if err != nil {
		return fmt.Sprintf("%x", key)
	}
	pk, _, err := keys.DecodeUint64(k.PK)
	if err != nil {
		return k.String()
	}
	return fmt.Sprintf("t%d/v%d/%d@%d", k.Table, k.Vnode, pk, k.Version.Epoch())
}

func ddCorruptBlock(t *testing.T, path, kind string, index int) string {
	blocks, err := faultfs.SSTBlocks(path)
	require.NoError(t, err)
	n := 0
	for _, b := range blocks {
		if b.Kind != kind {
			continue
		}
		if n == index {
			what, err := faultfs.Damage(path, faultfs.Flip, b.Offset+b.Len/2, 4)
			require.NoError(t, err)
			return fmt.Sprintf("%s block %d of %s: %s\n", kind, index, filepath.Base(path), what)
		}
		n++
	}
	t.Fatalf("%s has %d %s blocks", path, n, kind)
	return ""
}
