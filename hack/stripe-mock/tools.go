//go:build tools

// Package tools pins stripe-mock as a dependency of this module, so `go build github.com/stripe/stripe-mock`
// builds exactly the version in go.mod/go.sum.
package tools

import _ "github.com/stripe/stripe-mock"
