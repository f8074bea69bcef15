package main

import (
	"fmt"
	"go/token"
	"go/types"
	"os/exec"
	"sort"
	"strings"
)

// The API dump is one line per exported object of the module's public
// packages, sorted, in the form
//
//	PKG: KIND NAME DECLARATION
//
// where PKG is the package's path below the module (the module's last
// path element for its root package) and NAME has no space, so that the
// first three fields name the object and the rest says what it is:
//
//	lsm: package
//	lsm: func Open func(string, *Options) (*Store, error)
//	lsm: const FormatVersion untyped int = 1
//	lsm: var ErrClosed error
//	lsm: type Store struct
//	lsm: comparable TableDef
//	lsm: field Options.CacheSize int64
//	lsm: method *Store.Commit func(uint64) error
//	lsm: method Kind.String func() string
//	backfill: type Source interface{Next(context.Context) ([]RowOp, error); Resume(Position) error}
//	stats: type Alias = Other
//
// A type's line says what kind of type it is (a struct's fields and an
// open interface's methods are part of it or lines of their own, see
// below); types of the module's other packages are written with their
// path below the module, those of other modules with their import path.
// Each line is a promise: a release's line that the next version lacks
// is an incompatible change (removed, or changed: its declaration differs),
// a line the next version adds is a compatible one. So that this holds,
//
//   - an interface that code outside its package can implement (all its
//     methods exported) is one line with its whole method set: adding a
//     method changes the line, and breaks every implementation; an
//     interface with an unexported method ("sealed") lists its methods as
//     lines of their own, since adding one breaks nobody;
//   - a struct's exported fields are lines of their own, promoted fields
//     included (adding one is compatible), and "comparable T" is a line
//     while T is comparable (a field that makes it incomparable breaks
//     code that compares values or keys maps with them);
//   - methods are the method sets: "method T.M" for each method of T's,
//     "method *T.M" for each that only *T has (pointer receivers). Moving
//     a method from the value to the pointer receiver removes T.M; the
//     reverse moves *T.M to T.M, which the check accepts (compatible).
//
// Parameter names are left out, aliases are followed, and constants carry
// their value (a changed value breaks code that relies on it, such as a
// format version). Test files and unexported objects are not part of it.

// publicPackages returns the import paths of the module's packages that
// are its API: every package of the module in dir but commands, internal
// packages, and the harnesses and tools of harness/ and tools/, which are
// not part of the API (docs/design.md §1, RELEASING.md).
func publicPackages(dir string) (module string, paths []string, err error) {
	cmd := exec.Command("go", "list", "-m")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", nil, fmt.Errorf("go list -m: %w", err)
	}
	module = strings.TrimSpace(string(out))
	cmd = exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Name}}", module+"/...")
	cmd.Dir = dir
	out, err = cmd.Output()
	if err != nil {
		return "", nil, fmt.Errorf("go list: %w", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, name, _ := strings.Cut(line, " ")
		rel := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
		if name == "main" || internalPath(path) || underDir(rel, "harness") || underDir(rel, "tools") {
			continue
		}
		paths = append(paths, path)
	}
	return module, paths, nil
}

// underDir reports whether rel, a path below the module, is dir or below it.
func underDir(rel, dir string) bool {
	return rel == dir || strings.HasPrefix(rel, dir+"/")
}

// dumpAPI returns the dump's lines of the module's public packages in dir.
func dumpAPI(dir string) ([]string, error) {
	module, paths, err := publicPackages(dir)
	if err != nil {
		return nil, err
	}
	pkgs, err := loadIn(dir, paths)
	if err != nil {
		return nil, err
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].Path() < pkgs[j].Path() })
	var lines []string
	for _, pkg := range pkgs {
		lines = append(lines, packageAPI(pkg, module)...)
	}
	return lines, nil
}

// shortPath is a package's name in the dump: its path below the module,
// the module's last element for the root, its import path outside it.
func shortPath(path, module string) string {
	if path == module {
		return module[strings.LastIndexByte(module, '/')+1:]
	}
	if rel, ok := strings.CutPrefix(path, module+"/"); ok {
		return rel
	}
	return path
}

// packageAPI returns the dump's lines of one package: the package, its
// constants, variables and functions, then each type with its fields and
// methods, each group sorted by name.
func packageAPI(pkg *types.Package, module string) []string {
	name := shortPath(pkg.Path(), module)
	p := typePrinter{qualify: func(other *types.Package) string {
		if other == pkg {
			return ""
		}
		return shortPath(other.Path(), module)
	}, module: module}
	groups := map[string][]string{}
	add := func(kind, obj, decl string) {
		line := name + ": " + kind + " " + obj
		if decl != "" {
			line += " " + decl
		}
		groups[kind] = append(groups[kind], line)
	}
	scope := pkg.Scope()
	for _, n := range scope.Names() {
		obj := scope.Lookup(n)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.Const:
			add("const", n, p.String(obj.Type())+" = "+obj.Val().ExactString())
		case *types.Var:
			add("var", n, p.String(obj.Type()))
		case *types.Func:
			add("func", n, p.String(obj.Type()))
		case *types.TypeName:
			typeAPI(p, obj, add)
			lines := append(groups["type"], groups["comparable"]...)
			lines = append(lines, groups["field"]...)
			groups["types"] = append(groups["types"], append(lines, groups["method"]...)...)
			groups["type"], groups["comparable"], groups["field"], groups["method"] = nil, nil, nil, nil
		}
	}
	lines := []string{name + ": package"}
	for _, kind := range []string{"const", "var", "func", "types"} {
		lines = append(lines, groups[kind]...)
	}
	return lines
}

// typeAPI adds the lines of one exported type: the type, and for a
// defined type its fields, comparability and method sets.
func typeAPI(p typePrinter, tn *types.TypeName, add func(kind, obj, decl string)) {
	n := tn.Name()
	var tparams string
	if named, ok := tn.Type().(*types.Named); ok && named.TypeParams().Len() > 0 && !tn.IsAlias() {
		var b strings.Builder
		p.typeParams(&b, named.TypeParams())
		tparams = b.String() + " "
	}
	if tn.IsAlias() {
		add("type", n, "= "+p.String(types.Unalias(tn.Type())))
		return
	}
	named, ok := tn.Type().(*types.Named)
	if !ok {
		add("type", n, tparams+p.String(tn.Type().Underlying()))
		return
	}
	switch u := named.Underlying().(type) {
	case *types.Struct:
		add("type", n, tparams+"struct")
		for _, f := range fields(u) {
			add("field", n+"."+f.Name(), p.String(f.Type()))
		}
		if types.Comparable(named) {
			add("comparable", n, "")
		}
	case *types.Interface:
		if sealed(u) {
			add("type", n, tparams+"interface sealed")
			for i := 0; i < u.NumMethods(); i++ {
				if m := u.Method(i); m.Exported() {
					var b strings.Builder
					b.WriteString("func")
					p.signature(&b, m.Type().(*types.Signature))
					add("method", n+"."+m.Name(), b.String())
				}
			}
		} else {
			add("type", n, tparams+p.String(u))
		}
		return // an interface's methods are in its line
	default:
		add("type", n, tparams+p.String(u))
	}
	value := types.NewMethodSet(named)
	for i := 0; i < value.Len(); i++ {
		if m := value.At(i).Obj(); m.Exported() {
			add("method", n+"."+m.Name(), p.String(m.Type()))
		}
	}
	ptr := types.NewMethodSet(types.NewPointer(named))
	for i := 0; i < ptr.Len(); i++ {
		m := ptr.At(i).Obj()
		if m.Exported() && value.Lookup(m.Pkg(), m.Name()) == nil {
			add("method", "*"+n+"."+m.Name(), p.String(m.Type()))
		}
	}
}

// sealed reports whether an interface has an unexported method, which
// only its own package can implement.
func sealed(t *types.Interface) bool {
	for i := 0; i < t.NumMethods(); i++ {
		if !t.Method(i).Exported() {
			return true
		}
	}
	return false
}

// fields returns a struct's exported fields a selector reaches, its own
// and those promoted from embedded structs (the shallowest of a name; a
// name two fields share at its shallowest depth is ambiguous and reaches
// neither), sorted by name.
func fields(s *types.Struct) []*types.Var {
	seen := map[string]bool{}
	var out []*types.Var
	visited := map[*types.Struct]bool{}
	cur := []*types.Struct{s}
	for len(cur) > 0 {
		found := map[string][]*types.Var{}
		var next []*types.Struct
		for _, st := range cur {
			if visited[st] {
				continue
			}
			visited[st] = true
			for i := 0; i < st.NumFields(); i++ {
				f := st.Field(i)
				found[f.Name()] = append(found[f.Name()], f)
				if f.Embedded() {
					t := f.Type()
					if ptr, ok := types.Unalias(t).(*types.Pointer); ok {
						t = ptr.Elem()
					}
					if inner, ok := t.Underlying().(*types.Struct); ok {
						next = append(next, inner)
					}
				}
			}
		}
		for name, fs := range found {
			if seen[name] {
				continue
			}
			seen[name] = true
			if len(fs) == 1 && token.IsExported(name) {
				out = append(out, fs[0])
			}
		}
		cur = next
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}
