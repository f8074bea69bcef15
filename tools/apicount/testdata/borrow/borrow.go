// Package borrow is the example of TestBorrowedTypesFound: a public
// package with an alias of an internal type, a type defined as one, and a
// type of its own that wraps one.
package borrow

import "github.com/lsmstats/lsmstats/tools/apicount/testdata/borrow/internal/impl"

// Alias is an alias of an internal type: go doc shows one line.
type Alias = impl.Impl

// Defined is defined as an internal type: go doc shows one line.
type Defined impl.Impl

// Own wraps an internal type in an unexported field: go doc shows its
// methods.
type Own struct{ i impl.Impl }

// Method is a method of Own.
func (o Own) Method() { o.i.Method() }
