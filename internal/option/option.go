// Package option applies functional options the same way in every
// package: in order, and a nil option is an error, not a panic.
package option

import "fmt"

// Apply applies opts to o in order. It returns an error naming the first
// nil option; the caller wraps it in its package's ErrInvalidOption.
func Apply[O any, F ~func(*O)](o *O, opts []F) error {
	for i, f := range opts {
		if f == nil {
			return fmt.Errorf("option %d is nil", i)
		}
		f(o)
	}
	return nil
}
