// Package errs is the one error story of dlock's packages: operation
// errors printed "pkg: "name": op: cause", and sentinels that also match
// another package's.
package errs

import (
	"strconv"
	"strings"
)

// Op is the error of one operation on one named object (a lock, an
// election). It prints as
//
//	pkg: "name": op: cause
//
// with a leading "pkg: " of the cause dropped, so that a package's own
// sentinel reads once (`lock: "orders": unlock: lock lost`), and a cause
// that is itself an Op of the same object continuing the path
// (`election: "leader": run: campaign: session done`).
type Op struct {
	Pkg  string // "lock", "election", "redis"
	Name string // the object's name
	Op   string // "lock", "try lock", "unlock", "campaign", ...
	Err  error
}

func (e *Op) Error() string {
	var b strings.Builder
	b.WriteString(e.Pkg)
	b.WriteString(": ")
	b.WriteString(strconv.Quote(e.Name))
	b.WriteString(": ")
	b.WriteString(e.rest())
	return b.String()
}

// rest is the message after "pkg: "name": ".
func (e *Op) rest() string {
	var cause string
	if in, ok := e.Err.(*Op); ok && in.Pkg == e.Pkg && in.Name == e.Name {
		cause = in.rest()
	} else {
		cause = strings.TrimPrefix(e.Err.Error(), e.Pkg+": ")
	}
	if e.Op == "" {
		return cause
	}
	return e.Op + ": " + cause
}

func (e *Op) Unwrap() error { return e.Err }

// New returns an operation error, or nil if err is nil.
func New(pkg, name, op string, err error) error {
	if err == nil {
		return nil
	}
	return &Op{Pkg: pkg, Name: name, Op: op, Err: err}
}

// Also returns a sentinel with its own message that also matches each of
// also under errors.Is (a package's error that matches a more general
// one, like redis.ErrLocked and lock.ErrLocked).
func Also(msg string, also ...error) error { return &sentinel{msg: msg, also: also} }

type sentinel struct {
	msg  string
	also []error
}

func (e *sentinel) Error() string   { return e.msg }
func (e *sentinel) Unwrap() []error { return e.also }
