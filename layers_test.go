package lsmstats_test

import (
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const modulePath = "github.com/lsmstats/lsmstats"

// listedPackage is the part of `go list -json` the layer rules read.
type listedPackage struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// aboveMachinery are the module's folders (by import path below the
// module's) that import the store or run above it: no package under
// internal/ may import them, not even in its tests. stats is among them:
// the machinery answers in its value types through type parameters and
// never imports it (docs/design.md §1).
var aboveMachinery = []string{"stats", "lsm", "compaction", "replicated", "backfill", "bench", "cluster", "cmd", "harness", "tools"}

// harnessAndTools are the folders of what runs above everything: only
// tests, and harness/ and tools/ themselves, may import them.
var harnessAndTools = []string{"harness", "tools"}

// under reports whether an import path is one of the module's folders in
// dirs or a package below one.
func under(path string, dirs []string) bool {
	rel, ok := strings.CutPrefix(path, modulePath+"/")
	if !ok {
		return false
	}
	for _, d := range dirs {
		if rel == d || strings.HasPrefix(rel, d+"/") {
			return true
		}
	}
	return false
}

// layerViolations returns every import that runs against the layers of
// docs/design.md §1, as "importer imports imported (how)".
func layerViolations(pkgs []listedPackage) []string {
	var out []string
	for _, p := range pkgs {
		if under(p.ImportPath, []string{"internal"}) {
			for kind, imports := range map[string][]string{"": p.Imports, " in its tests": append(append([]string(nil), p.TestImports...), p.XTestImports...)} {
				for _, imp := range imports {
					if under(imp, aboveMachinery) {
						out = append(out, p.ImportPath+" imports "+imp+kind)
					}
				}
			}
		}
		if !under(p.ImportPath, harnessAndTools) {
			for _, imp := range p.Imports {
				if under(imp, harnessAndTools) {
					out = append(out, p.ImportPath+" imports "+imp+" outside its tests")
				}
			}
		}
	}
	return out
}

// TestLayers holds the module to its layers (docs/design.md §1): by
// imports, tests included, no package under internal/ (the machinery
// under the public API and the support below it) imports stats, lsm or
// anything above them (compaction, replicated, backfill, bench, cmd, the
// harnesses of harness/ or the tools of tools/), and no non-test file
// outside harness/ and tools/ imports those two.
func TestLayers(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports,TestImports,XTestImports", modulePath+"/...").Output()
	require.NoError(t, err, "go list")
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		}
		require.NoError(t, err)
		pkgs = append(pkgs, p)
	}
	// The listing is the module's: the machinery and the folders above it
	// are in it, so that an empty listing cannot pass.
	var internal, harness int
	for _, p := range pkgs {
		if under(p.ImportPath, []string{"internal"}) {
			internal++
		}
		if under(p.ImportPath, harnessAndTools) {
			harness++
		}
	}
	require.GreaterOrEqual(t, internal, 10, "packages under internal/")
	require.GreaterOrEqual(t, harness, 5, "packages under harness/ and tools/")
	require.Empty(t, layerViolations(pkgs), "imports against the layers of docs/design.md §1")
}

// TestLayerViolationsFound: the rules catch a machinery package that
// imports lsm, one whose tests import a harness, and a public package that
// imports a tool outside its tests, and pass the imports the layers allow
// (lsm's tests importing harness/storetest, the machinery importing keys).
func TestLayerViolationsFound(t *testing.T) {
	m := func(rel string) string { return modulePath + "/" + rel }
	pkgs := []listedPackage{
		{ImportPath: m("internal/ssttracker"), Imports: []string{m("keys"), m("lsm"), "fmt"}},
		{ImportPath: m("internal/livebuckets"), Imports: []string{m("internal/pkpos")}, XTestImports: []string{m("harness/storetest")}},
		{ImportPath: m("internal/testutil"), TestImports: []string{m("bench/workload")}},
		{ImportPath: m("lsm"), Imports: []string{m("internal/ssttracker")}, XTestImports: []string{m("harness/storetest")}},
		{ImportPath: m("backfill"), Imports: []string{m("tools/results")}},
		{ImportPath: m("harness/soak"), Imports: []string{m("backfill"), m("harness/storetest")}},
		{ImportPath: m("lsmstatsx"), Imports: []string{m("lsm")}}, // not the module's internal/
	}
	require.ElementsMatch(t, []string{
		m("internal/ssttracker") + " imports " + m("lsm"),
		m("internal/livebuckets") + " imports " + m("harness/storetest") + " in its tests",
		m("internal/testutil") + " imports " + m("bench/workload") + " in its tests",
		m("backfill") + " imports " + m("tools/results") + " outside its tests",
	}, layerViolations(pkgs))
}
