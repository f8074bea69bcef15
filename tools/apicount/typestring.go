package main

import (
	"fmt"
	"go/types"
	"sort"
	"strconv"
	"strings"
)

// typePrinter writes types as the API dump shows them: what decides
// whether code written against one version compiles against the next, and
// nothing else. Parameter and result names are left out (renaming one
// breaks no caller), the module's own aliases are followed to the type
// they stand for (an alias and its type are the same type), and packages
// are named by the qualify function. Another module's aliases keep their
// name: pebble.Logger, not the internal Pebble type it stands for, which
// a user cannot name.
type typePrinter struct {
	// qualify names a package in a type of another package; "" leaves the
	// name unqualified (the package being dumped).
	qualify func(*types.Package) string
	// module is the import path of the module whose aliases are followed.
	module string
}

// String returns t as the dump shows it.
func (p typePrinter) String(t types.Type) string {
	var b strings.Builder
	p.write(&b, t)
	return b.String()
}

func (p typePrinter) write(b *strings.Builder, t types.Type) {
	switch t := t.(type) {
	case nil:
		b.WriteString("<nil>")
	case *types.Alias:
		obj := t.Obj()
		if obj.Pkg() == nil || !obj.Exported() || obj.Pkg().Path() == p.module || strings.HasPrefix(obj.Pkg().Path(), p.module+"/") {
			p.write(b, types.Unalias(t))
			return
		}
		b.WriteString(p.qualify(obj.Pkg()))
		b.WriteByte('.')
		b.WriteString(obj.Name())
		if args := t.TypeArgs(); args.Len() > 0 {
			b.WriteByte('[')
			for i := 0; i < args.Len(); i++ {
				if i > 0 {
					b.WriteString(", ")
				}
				p.write(b, args.At(i))
			}
			b.WriteByte(']')
		}
	case *types.Basic:
		b.WriteString(t.Name())
	case *types.Named:
		obj := t.Obj()
		if obj.Pkg() != nil {
			if q := p.qualify(obj.Pkg()); q != "" {
				b.WriteString(q)
				b.WriteByte('.')
			}
		}
		b.WriteString(obj.Name())
		if args := t.TypeArgs(); args.Len() > 0 {
			b.WriteByte('[')
			for i := 0; i < args.Len(); i++ {
				if i > 0 {
					b.WriteString(", ")
				}
				p.write(b, args.At(i))
			}
			b.WriteByte(']')
		}
	case *types.TypeParam:
		b.WriteString(t.Obj().Name())
	case *types.Pointer:
		b.WriteByte('*')
		p.write(b, t.Elem())
	case *types.Slice:
		b.WriteString("[]")
		p.write(b, t.Elem())
	case *types.Array:
		fmt.Fprintf(b, "[%d]", t.Len())
		p.write(b, t.Elem())
	case *types.Map:
		b.WriteString("map[")
		p.write(b, t.Key())
		b.WriteByte(']')
		p.write(b, t.Elem())
	case *types.Chan:
		switch t.Dir() {
		case types.SendRecv:
			b.WriteString("chan ")
		case types.SendOnly:
			b.WriteString("chan<- ")
		case types.RecvOnly:
			b.WriteString("<-chan ")
		}
		p.write(b, t.Elem())
	case *types.Signature:
		b.WriteString("func")
		p.signature(b, t)
	case *types.Struct:
		b.WriteString("struct{")
		for i := 0; i < t.NumFields(); i++ {
			if i > 0 {
				b.WriteString("; ")
			}
			f := t.Field(i)
			if !f.Embedded() {
				b.WriteString(f.Name())
				b.WriteByte(' ')
			}
			p.write(b, f.Type())
			if tag := t.Tag(i); tag != "" {
				b.WriteByte(' ')
				b.WriteString(strconv.Quote(tag))
			}
		}
		b.WriteByte('}')
	case *types.Interface:
		p.iface(b, t)
	case *types.Union:
		for i := 0; i < t.Len(); i++ {
			if i > 0 {
				b.WriteString(" | ")
			}
			if t.Term(i).Tilde() {
				b.WriteByte('~')
			}
			p.write(b, t.Term(i).Type())
		}
	case *types.Tuple:
		p.tuple(b, t, false)
	default:
		b.WriteString(t.String())
	}
}

// signature writes a function's type parameters, parameters and results,
// without names and without the func keyword.
func (p typePrinter) signature(b *strings.Builder, sig *types.Signature) {
	if tps := sig.TypeParams(); tps.Len() > 0 {
		p.typeParams(b, tps)
	}
	p.tuple(b, sig.Params(), sig.Variadic())
	res := sig.Results()
	switch res.Len() {
	case 0:
	case 1:
		b.WriteByte(' ')
		p.write(b, res.At(0).Type())
	default:
		b.WriteByte(' ')
		p.tuple(b, res, false)
	}
}

// typeParams writes [A constraint, B constraint].
func (p typePrinter) typeParams(b *strings.Builder, tps *types.TypeParamList) {
	b.WriteByte('[')
	for i := 0; i < tps.Len(); i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(tps.At(i).Obj().Name())
		b.WriteByte(' ')
		p.write(b, tps.At(i).Constraint())
	}
	b.WriteByte(']')
}

// tuple writes (A, B, ...C) without names.
func (p typePrinter) tuple(b *strings.Builder, t *types.Tuple, variadic bool) {
	b.WriteByte('(')
	for i := 0; i < t.Len(); i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		typ := t.At(i).Type()
		if variadic && i == t.Len()-1 {
			if s, ok := typ.(*types.Slice); ok {
				b.WriteString("...")
				typ = s.Elem()
			}
		}
		p.write(b, typ)
	}
	b.WriteByte(')')
}

// iface writes an interface type: its methods (its own and those it
// embeds) sorted by name, then the terms of its type set; "any" for the
// empty one.
func (p typePrinter) iface(b *strings.Builder, t *types.Interface) {
	var parts []string
	for i := 0; i < t.NumMethods(); i++ {
		m := t.Method(i)
		var mb strings.Builder
		mb.WriteString(m.Name())
		p.signature(&mb, m.Type().(*types.Signature))
		parts = append(parts, mb.String())
	}
	sort.Strings(parts)
	for i := 0; i < t.NumEmbeddeds(); i++ {
		if _, isIface := t.EmbeddedType(i).Underlying().(*types.Interface); isIface {
			continue // its methods are among t's; its terms are its own line
		}
		parts = append(parts, p.String(t.EmbeddedType(i)))
	}
	if t.IsComparable() && len(parts) == 0 {
		b.WriteString("comparable")
		return
	}
	if len(parts) == 0 {
		b.WriteString("any")
		return
	}
	b.WriteString("interface{")
	b.WriteString(strings.Join(parts, "; "))
	b.WriteByte('}')
}
