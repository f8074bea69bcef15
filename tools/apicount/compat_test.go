package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// writeModule writes a module example.com/m of the given files (path below
// the module → source) into a new directory and returns it.
func writeModule(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files["go.mod"] = "module example.com/m\n\ngo 1.26\n"
	for name, src := range files {
		path := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(src), 0o644))
	}
	return dir
}

// compatCase is one package's change between two versions of a module.
type compatCase struct {
	name     string
	old, cur string // the package's source; "" for no package
	// incompatible is whether the change breaks code written against old.
	incompatible bool
}

var compatCases = []compatCase{
	{
		name: "removemethod", incompatible: true,
		old: "type T struct{}\nfunc (T) A() {}\nfunc (T) B() {}\n",
		cur: "type T struct{}\nfunc (T) A() {}\n",
	},
	{
		name: "addfunc",
		old:  "func F() {}\n",
		cur:  "func F() {}\nfunc G(int) error { return nil }\n",
	},
	{
		name: "changesignature", incompatible: true,
		old: "func F(a int) error { return nil }\n",
		cur: "func F(a int, b string) error { return nil }\n",
	},
	{
		name: "renameparameter",
		old:  "func F(a int) (n int, err error) { return }\n",
		cur:  "func F(count int) (int, error) { return 0, nil }\n",
	},
	{
		name: "interfacegainsmethod", incompatible: true,
		old: "type I interface{ A() }\n",
		cur: "type I interface{ A(); B() }\n",
	},
	{
		name: "sealedinterfacegainsmethod",
		old:  "type I interface{ A(); sealed() }\n",
		cur:  "type I interface{ A(); B(); sealed() }\n",
	},
	{
		name: "sealedinterfacelosesmethod", incompatible: true,
		old: "type I interface{ A(); B(); sealed() }\n",
		cur: "type I interface{ A(); sealed() }\n",
	},
	{
		name: "fieldtype", incompatible: true,
		old: "type S struct{ N int }\n",
		cur: "type S struct{ N int64 }\n",
	},
	{
		name: "addfield",
		old:  "type S struct{ N int }\n",
		cur:  "type S struct{ N int; M string; hidden int }\n",
	},
	{
		name: "lostcomparable", incompatible: true,
		old: "type S struct{ N int }\n",
		cur: "type S struct{ N int; more []int }\n",
	},
	{
		name: "promotedfieldremoved", incompatible: true,
		old: "type inner struct{ X int }\ntype S struct{ inner }\n",
		cur: "type inner struct{}\ntype S struct{ inner }\n",
	},
	{
		name: "valuetopointer", incompatible: true,
		old: "type T struct{}\nfunc (T) M() {}\n",
		cur: "type T struct{}\nfunc (*T) M() {}\n",
	},
	{
		name: "pointertovalue",
		old:  "type T struct{}\nfunc (*T) M() {}\n",
		cur:  "type T struct{}\nfunc (T) M() {}\n",
	},
	{
		name: "constvalue", incompatible: true,
		old: "const Version = 1\n",
		cur: "const Version = 2\n",
	},
	{
		name: "aliasfollowed",
		old:  "type T struct{ N int }\nfunc F(T) {}\n",
		cur:  "type T struct{ N int }\ntype A = T\nfunc F(A) {}\n",
	},
	{
		name: "unexportedchange",
		old:  "func F() {}\nfunc g() {}\ntype t int\n",
		cur:  "func F() {}\nfunc h(int) {}\n",
	},
	{
		name: "packageremoved", incompatible: true,
		old: "func F() {}\n",
	},
	{
		name: "internalignored",
		old:  "func F() {}\n",
		cur:  "func F() {}\n",
	},
}

// compatModules writes the module before and after the changes of
// compatCases, one package per case, and an internal package and a
// command whose changes are no part of the API.
func compatModules(t *testing.T) (old, cur string) {
	oldFiles, curFiles := map[string]string{}, map[string]string{}
	for _, c := range compatCases {
		if c.old != "" {
			oldFiles[c.name+"/p.go"] = "package " + c.name + "\n\n" + c.old
		}
		if c.cur != "" {
			curFiles[c.name+"/p.go"] = "package " + c.name + "\n\n" + c.cur
		}
	}
	oldFiles["internal/x/x.go"] = "package x\n\nfunc Gone() {}\n"
	curFiles["internal/x/x.go"] = "package x\n"
	oldFiles["cmd/c/main.go"] = "package main\n\nfunc Gone() {}\n\nfunc main() {}\n"
	curFiles["cmd/c/main.go"] = "package main\n\nfunc main() {}\n"
	oldFiles["tools/tool/tool.go"] = "package tool\n\nfunc Gone() {}\n"
	curFiles["tools/tool/tool.go"] = "package tool\n"
	return writeModule(t, oldFiles), writeModule(t, curFiles)
}

// TestCompatibility dumps a module before and after a change per package
// and checks that the comparison calls each change what it is: removing
// a method, changing a signature, a field's type, a constant's value or a
// method's receiver, adding a method to an interface others implement,
// losing comparability or a promoted field are incompatible; adding a func,
// a field or a method to a sealed interface, renaming parameters, naming a
// type by an alias, and changes to unexported names, internal packages,
// commands and tools are not.
func TestCompatibility(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list -export")
	}
	oldDir, curDir := compatModules(t)
	old, err := dumpAPI(oldDir)
	require.NoError(t, err)
	cur, err := dumpAPI(curDir)
	require.NoError(t, err)
	require.Contains(t, old, "removemethod: method T.B func()")
	require.Contains(t, old, "changesignature: func F func(int) error")
	require.Contains(t, old, "interfacegainsmethod: type I interface{A()}")
	require.Contains(t, cur, "sealedinterfacegainsmethod: method I.B func()")
	require.Contains(t, old, "promotedfieldremoved: field S.X int")
	require.Contains(t, old, "constvalue: const Version untyped int = 1")
	for _, l := range append(append([]string(nil), old...), cur...) {
		require.False(t, strings.HasPrefix(l, "internal/") || strings.HasPrefix(l, "cmd/") || strings.HasPrefix(l, "tools/"),
			"a package outside the API in the dump: %s", l)
	}
	d := compareAPI(old, cur)
	t.Logf("removed or changed:\n%s", d.report(true))
	for _, c := range compatCases {
		var broken []string
		for _, l := range d.removed {
			if strings.HasPrefix(l, c.name+": ") {
				broken = append(broken, l)
			}
		}
		if c.incompatible {
			require.NotEmpty(t, broken, "%s: an incompatible change passed", c.name)
		} else {
			require.Empty(t, broken, "%s: a compatible change counted as incompatible", c.name)
		}
	}
	var added []string
	for _, l := range d.added {
		if strings.HasPrefix(l, "addfunc: ") {
			added = append(added, l)
		}
	}
	require.Equal(t, []string{"addfunc: func G func(int) error"}, added)
}

// TestCheckAPI runs the check as make apicheck does, on a module with a
// recorded release: a removed method fails unless the CHANGELOG declares a
// breaking version, an added func passes with a patch version, and a
// declared version that is not above the release fails.
func TestCheckAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list -export")
	}
	v1 := "package p\n\ntype T struct{}\n\nfunc (T) A() {}\nfunc (T) B() {}\n"
	base := writeModule(t, map[string]string{"p/p.go": v1})
	release, err := dumpAPI(base)
	require.NoError(t, err)
	apiDir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(apiDir, "v0.3.0.txt"), []byte("# a comment\n\n"+strings.Join(release, "\n")+"\n"), 0o644))
	// An older release, which the check does not compare with.
	require.NoError(t, os.WriteFile(filepath.Join(apiDir, "v0.2.9.txt"), []byte("p: package\np: func Old func()\n"), 0o644))

	changelog := func(next string) string {
		path := filepath.Join(t.TempDir(), "CHANGELOG.md")
		s := "# Changelog\n\n## [Unreleased]\n\n"
		if next != "" {
			s += "Next version: " + next + "\n"
		}
		s += "\n### Added\n\n- things\n\n## [0.3.0] - 2026-12-06\n\nNext version: v9.9.9 (not this section's)\n"
		require.NoError(t, os.WriteFile(path, []byte(s), 0o644))
		return path
	}
	check := func(dir, next string) (string, error) {
		var out strings.Builder
		err := checkAPI(dir, apiDir, changelog(next), "", true, &out)
		return out.String(), err
	}

	removed := writeModule(t, map[string]string{"p/p.go": "package p\n\ntype T struct{}\n\nfunc (T) A() {}\n"})
	out, err := check(removed, "v0.3.1")
	require.ErrorContains(t, err, "1 incompatible changes since v0.3.0 need a breaking version (v0.4.0 or later), not v0.3.1")
	require.Contains(t, out, "removed: p: method T.B func()")
	_, err = check(removed, "")
	require.ErrorContains(t, err, "declares no next version")
	out, err = check(removed, "v0.4.0")
	require.NoError(t, err, out)
	out, err = check(removed, "v1.0.0")
	require.NoError(t, err, out)

	added := writeModule(t, map[string]string{"p/p.go": v1 + "\nfunc New() T { return T{} }\n"})
	out, err = check(added, "v0.3.1")
	require.NoError(t, err, out)
	require.Contains(t, out, "0 incompatible changes, 1 additions")
	require.Contains(t, out, "added:   p: func New func() T")
	out, err = check(added, "")
	require.NoError(t, err, out)
	_, err = check(added, "v0.3.0")
	require.ErrorContains(t, err, "not above the last release v0.3.0")

	// make release VERSION=v0.2.10 compares with the release below it
	// (v0.2.9 had a func the module lacks), and a first release with none.
	var sb strings.Builder
	require.ErrorContains(t, checkAPI(removed, apiDir, "", "v0.2.10", false, &sb), "since v0.2.9")
	require.Contains(t, sb.String(), "removed: p: func Old func()")
	sb.Reset()
	require.NoError(t, checkAPI(removed, apiDir, "", "v0.2.0", false, &sb))
	require.Contains(t, sb.String(), "nothing to compare with")
}

// TestVerdict holds the version rules: before v1 a breaking change needs a
// new minor version and an addition any higher version; from v1 on a
// breaking change needs a new major version and an addition a new minor.
func TestVerdict(t *testing.T) {
	v := func(s string) version {
		x, err := parseVersion(s)
		require.NoError(t, err)
		return x
	}
	breaking := diff{removed: []string{"p: func F func()"}}
	adding := diff{added: []string{"p: func G func()"}}
	for _, c := range []struct {
		base, next string
		d          diff
		ok         bool
	}{
		{"v0.1.0", "v0.1.1", diff{}, true},
		{"v0.1.0", "v0.1.1", adding, true},
		{"v0.1.0", "v0.1.1", breaking, false},
		{"v0.1.0", "v0.2.0", breaking, true},
		{"v0.1.3", "v1.0.0", breaking, true},
		{"v1.2.0", "v1.2.1", adding, false},
		{"v1.2.0", "v1.3.0", adding, true},
		{"v1.2.0", "v1.3.0", breaking, false},
		{"v1.2.0", "v2.0.0", breaking, true},
		{"v1.2.0", "v1.1.0", diff{}, false},
	} {
		err := verdict(v(c.base), v(c.next), true, c.d)
		require.Equal(t, c.ok, err == nil, "%s → %s, %d removed, %d added: %v", c.base, c.next, len(c.d.removed), len(c.d.added), err)
	}
	require.Error(t, verdict(v("v1.0.0"), version{}, false, adding), "an addition after v1 needs a declared minor version")
	for _, bad := range []string{"0.1.0", "v0.1", "v01.0.0", "v0.1.0-rc1", "v0.1.0 "} {
		_, err := parseVersion(bad)
		require.Error(t, err, bad)
	}
}

// TestReleasesRecorded: every release the repository records in api/ has
// its section in CHANGELOG.md, the CHANGELOG declares the next version
// above the newest, and the newest dump has every public package.
func TestReleasesRecorded(t *testing.T) {
	vs, err := releases("../../api")
	require.NoError(t, err)
	require.NotEmpty(t, vs, "api/ records no release")
	b, err := os.ReadFile("../../CHANGELOG.md")
	require.NoError(t, err)
	for _, v := range vs {
		require.Contains(t, string(b), "\n## ["+strings.TrimPrefix(v.String(), "v")+"]", "CHANGELOG.md has no section for %s", v)
	}
	next, ok, err := declaredVersion("../../CHANGELOG.md")
	require.NoError(t, err)
	require.True(t, ok, "the Unreleased section declares no next version")
	require.True(t, vs[len(vs)-1].less(next), "the next version %s is not above %s", next, vs[len(vs)-1])
	lines, err := readDump(filepath.Join("../../api", vs[len(vs)-1].String()+".txt"))
	require.NoError(t, err)
	for _, pkg := range []string{"lsmstats", "keys", "stats", "lsm", "compaction", "replicated", "backfill"} {
		require.Contains(t, lines, pkg+": package")
	}
}
