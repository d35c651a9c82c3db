package lock

import (
	"fmt"

	"github.com/dlock-go/dlock/internal/names"
)

// MaxNameLen is the longest lock name, in bytes.
const MaxNameLen = names.MaxLen

// ValidateName reports whether name is a valid lock name, shared by every
// backend: 1 to MaxNameLen bytes of ASCII letters, digits and "-._", with "/"
// separating non-empty segments, no segment "." or "..", and no leading or
// trailing "/". For example "orders", "billing/invoice-7", "jobs/v2.nightly".
// Errors match ErrInvalidName and quote the name.
func ValidateName(name string) error {
	if err := names.Name(name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidName, err)
	}
	return nil
}
