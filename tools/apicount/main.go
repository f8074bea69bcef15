// Command apicount counts the exported API of Go packages: the exported
// top-level names of each, and those names together with the exported
// methods (of the method set of T and of *T) and exported struct fields of
// every exported type. For a type alias it counts the methods and fields of
// the aliased type, since they are part of the contract a user reads even
// when that type lives in an internal package.
//
//	go run ./tools/apicount [-v] ./stats ./lsm
//
// With -own it instead lists the exported types that are an alias of a
// type of an internal package, or are defined as one (type T internal.U):
// go doc shows such a type as one line, without its fields or methods, and
// pkg.go.dev links to a package a user cannot import. A public package
// must define its types itself.
//
//	go run ./tools/apicount -own ./stats ./lsm ./backfill
//
// It type-checks nothing itself: it reads the export data that `go list
// -export` leaves in the build cache, so it sees exactly what the compiler
// sees, aliases included, and needs no module beyond the standard library.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
)

// listed is the part of `go list -json` this tool reads.
type listed struct {
	ImportPath string
	Export     string
	DepOnly    bool
	Error      *struct{ Err string }
}

// count is one package's exported API.
type count struct {
	path    string
	names   []string // exported top-level names
	members []string // exported methods and fields, as Type.Name
}

func main() {
	verbose := flag.Bool("v", false, "also list the exported methods and fields")
	own := flag.Bool("own", false, "list exported types that are internal types under another name, and fail if any")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: apicount [-v] package...")
		os.Exit(2)
	}
	if *own {
		bad, err := borrowedTypes(flag.Args())
		if err != nil {
			fmt.Fprintln(os.Stderr, "apicount:", err)
			os.Exit(1)
		}
		for _, b := range bad {
			fmt.Println(b)
		}
		if len(bad) > 0 {
			os.Exit(1)
		}
		return
	}
	counts, err := run(flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicount:", err)
		os.Exit(1)
	}
	top, all := 0, 0
	for _, c := range counts {
		fmt.Printf("%s: %d top-level, %d with methods and fields\n", c.path, len(c.names), len(c.names)+len(c.members))
		fmt.Printf("  %s\n", strings.Join(c.names, " "))
		if *verbose {
			for _, m := range c.members {
				fmt.Printf("    %s\n", m)
			}
		}
		top += len(c.names)
		all += len(c.names) + len(c.members)
	}
	if len(counts) > 1 {
		fmt.Printf("total: %d top-level, %d with methods and fields\n", top, all)
	}
}

// run lists the packages and their dependencies with their export data and
// counts each package named by the patterns.
func run(patterns []string) ([]count, error) {
	pkgs, err := load(patterns)
	if err != nil {
		return nil, err
	}
	var counts []count
	for _, pkg := range pkgs {
		counts = append(counts, countPackage(pkg))
	}
	return counts, nil
}

// borrowedTypes returns, for the packages named by the patterns, each
// exported type that is an alias of a type of an internal package or is
// defined as one, as "path.Name: what it is".
func borrowedTypes(patterns []string) ([]string, error) {
	pkgs, err := load(patterns)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, pkg := range pkgs {
		scope := pkg.Scope()
		for _, name := range scope.Names() {
			tn, ok := scope.Lookup(name).(*types.TypeName)
			if !ok || !tn.Exported() {
				continue
			}
			if what := borrowed(tn); what != "" {
				out = append(out, pkg.Path()+"."+name+": "+what)
			}
		}
	}
	return out, nil
}

// borrowed says how tn stands for a type of an internal package: as an
// alias, or defined as one; "" if it does not.
func borrowed(tn *types.TypeName) string {
	if tn.IsAlias() {
		if named, ok := types.Unalias(tn.Type()).(*types.Named); ok && internal(named) {
			return "an alias of " + named.String()
		}
		return ""
	}
	named, ok := tn.Type().(*types.Named)
	if !ok {
		return ""
	}
	// type T internal.U: the declaration names another named type, whose
	// underlying type T shares, and go doc prints the declaration as
	// written. Its fields (or methods) are declared in U's package.
	switch u := named.Underlying().(type) {
	case *types.Struct:
		for i := 0; i < u.NumFields(); i++ {
			if pkg := u.Field(i).Pkg(); pkg != nil && pkg != tn.Pkg() && internalPath(pkg.Path()) {
				return "defined as a struct type of " + pkg.Path()
			}
		}
	case *types.Interface:
		for i := 0; i < u.NumMethods(); i++ {
			if pkg := u.Method(i).Pkg(); pkg != nil && pkg != tn.Pkg() && internalPath(pkg.Path()) {
				return "defined as an interface type of " + pkg.Path()
			}
		}
	}
	return ""
}

// internal reports whether a named type belongs to an internal package.
func internal(t *types.Named) bool {
	pkg := t.Obj().Pkg()
	return pkg != nil && internalPath(pkg.Path())
}

// internalPath reports whether an import path is an internal package's,
// which only packages under its parent can import.
func internalPath(path string) bool {
	return strings.Contains(path, "/internal/") || strings.HasSuffix(path, "/internal") ||
		strings.HasPrefix(path, "internal/")
}

// load lists the packages and their dependencies with their export data and
// imports each package named by the patterns from it.
func load(patterns []string) ([]*types.Package, error) {
	args := append([]string{"list", "-e", "-export", "-deps", "-json=ImportPath,Export,DepOnly,Error"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	exports := map[string]string{}
	var roots []string
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		if p.Error != nil {
			return nil, fmt.Errorf("%s: %s", p.ImportPath, p.Error.Err)
		}
		exports[p.ImportPath] = p.Export
		if !p.DepOnly {
			roots = append(roots, p.ImportPath)
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok || file == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	var pkgs []*types.Package
	for _, path := range roots {
		pkg, err := imp.Import(path)
		if err != nil {
			return nil, err
		}
		pkgs = append(pkgs, pkg)
	}
	return pkgs, nil
}

// countPackage counts pkg's exported names, and the exported methods and
// fields of its exported types (through aliases).
func countPackage(pkg *types.Package) count {
	c := count{path: pkg.Path()}
	scope := pkg.Scope()
	for _, name := range scope.Names() { // sorted
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		c.names = append(c.names, name)
		tn, ok := obj.(*types.TypeName)
		if !ok {
			continue
		}
		for _, m := range members(tn.Type()) {
			c.members = append(c.members, name+"."+m)
		}
	}
	return c
}

// members returns the exported methods and struct fields of t, following
// an alias to the type it stands for.
func members(t types.Type) []string {
	t = types.Unalias(t)
	seen := map[string]bool{}
	var out []string
	add := func(kind, name string) {
		if token.IsExported(name) && !seen[name] {
			seen[name] = true
			out = append(out, name+" ("+kind+")")
		}
	}
	switch u := t.Underlying().(type) {
	case *types.Interface:
		for i := 0; i < u.NumMethods(); i++ {
			add("method", u.Method(i).Name())
		}
	case *types.Struct:
		for i := 0; i < u.NumFields(); i++ {
			add("field", u.Field(i).Name())
		}
	}
	if _, isIface := t.Underlying().(*types.Interface); !isIface {
		ms := types.NewMethodSet(types.NewPointer(t))
		for i := 0; i < ms.Len(); i++ {
			add("method", ms.At(i).Obj().Name())
		}
	}
	sort.Strings(out)
	return out
}
