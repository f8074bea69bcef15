// Command apicount counts the exported API of Go packages: the exported
// top-level names of each, and those names together with the exported
// methods (of the method set of T and of *T) and exported struct fields of
// every exported type. For a type alias it counts the methods and fields of
// the aliased type, since they are part of the contract a user reads even
// when that type lives in an internal package.
//
//	go run ./internal/tools/apicount [-v] ./stats ./lsm
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
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: apicount [-v] package...")
		os.Exit(2)
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
	var counts []count
	for _, path := range roots {
		pkg, err := imp.Import(path)
		if err != nil {
			return nil, err
		}
		counts = append(counts, countPackage(pkg))
	}
	return counts, nil
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
