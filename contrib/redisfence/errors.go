package redisfence

import "errors"

var (
	// ErrInvalidOption is returned by New for a nil client or a bad option
	// value, and by Set for a bad argument; the message names it.
	ErrInvalidOption = errors.New("redisfence: invalid option")

	// ErrCorruptMark is returned when the fence key holds something other
	// than a decimal Seq: someone else wrote to it. The guard admits nothing
	// for that name until the key is repaired.
	ErrCorruptMark = errors.New("redisfence: corrupt high-water mark")
)
