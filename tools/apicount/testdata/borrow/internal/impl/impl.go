// Package impl is the internal package of the apicount test's example.
package impl

// Impl is an internal type with a field and a method.
type Impl struct{ Field int }

// Method is a method of Impl.
func (Impl) Method() {}
