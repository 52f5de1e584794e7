// Package apicheck holds no code, only a test that guards the module's
// public surface for code outside the module: no exported identifier of a
// public package may mention a type of an internal package (an outside
// caller could not name it), and no Example of a public package may import
// one (an outside caller could not copy it).
//
// Run it with the rest of the module's tests, or alone:
//
//	go test ./internal/apicheck/
package apicheck
