package lock

import (
	"fmt"
	"strings"
)

// MaxNameLen is the longest lock name, in bytes.
const MaxNameLen = 128

// ValidateName reports whether name is a valid lock name, shared by every
// backend: 1 to MaxNameLen bytes of ASCII letters, digits and "-._", with "/"
// separating non-empty segments, no segment "." or "..", and no leading or
// trailing "/". For example "orders", "billing/invoice-7", "jobs/v2.nightly".
// Errors match ErrInvalidName and quote the name.
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: name is empty", ErrInvalidName)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: name %.20q... is %d bytes, longer than %d", ErrInvalidName, name, len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '/'
		if !ok {
			return fmt.Errorf("%w: name %q: byte %q at %d is not in [A-Za-z0-9._/-]", ErrInvalidName, name, c, i)
		}
	}
	for _, seg := range strings.Split(name, "/") {
		switch seg {
		case "":
			return fmt.Errorf("%w: name %q: empty segment (leading, trailing or double '/')", ErrInvalidName, name)
		case ".", "..":
			return fmt.Errorf("%w: name %q: segment %q is not allowed", ErrInvalidName, name, seg)
		}
	}
	return nil
}
