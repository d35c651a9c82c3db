package pgfence

import "errors"

var (
	// ErrInvalidOption is returned by New for a nil database or a bad option
	// value; the message names the option.
	ErrInvalidOption = errors.New("pgfence: invalid option")
)
