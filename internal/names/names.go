// Package names holds the rules for what users name: lock and election
// names, key prefixes, owners. Each package that takes one wraps these
// errors in its own sentinel (lock.ErrInvalidName, redis.ErrInvalidOption,
// dlock.ErrInvalidConfig), so the rules are written once.
package names

import (
	"errors"
	"fmt"
	"strings"
)

// MaxLen is the longest lock or election name, in bytes.
const MaxLen = 128

// MaxOwnerLen is the longest owner, in bytes.
const MaxOwnerLen = 256

// Name reports whether name is a valid lock or election name: 1 to MaxLen
// bytes of ASCII letters, digits and "-._", with "/" separating non-empty
// segments, no segment "." or "..".
func Name(name string) error {
	if name == "" {
		return errors.New("name is empty")
	}
	if len(name) > MaxLen {
		return fmt.Errorf("name %.20q... is %d bytes, longer than %d", name, len(name), MaxLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '/'
		if !ok {
			return fmt.Errorf("name %q: byte %q at %d is not in [A-Za-z0-9._/-]", name, c, i)
		}
	}
	for _, seg := range strings.Split(name, "/") {
		switch seg {
		case "":
			return fmt.Errorf("name %q: empty segment (leading, trailing or double '/')", name)
		case ".", "..":
			return fmt.Errorf("name %q: segment %q is not allowed", name, seg)
		}
	}
	return nil
}

// EtcdPrefix reports whether p is a valid etcd key prefix for queues: not
// empty, not ending with "/", and without "%" (which escapes "/" in names
// and marks a queue's side keys).
func EtcdPrefix(p string) error {
	switch {
	case p == "":
		return errors.New("prefix is empty")
	case strings.HasSuffix(p, "/"):
		return fmt.Errorf("prefix %q must not end with '/'", p)
	case strings.Contains(p, "%"):
		return fmt.Errorf("prefix %q must not contain '%%'", p)
	}
	return nil
}

// RedisPrefix reports whether p is a valid Redis key prefix: not empty,
// and without "{" or "}" (the lock name's hash tag goes there).
func RedisPrefix(p string) error {
	switch {
	case p == "":
		return errors.New("prefix is empty")
	case strings.ContainsAny(p, "{}"):
		return fmt.Errorf("prefix %q must not contain '{' or '}'", p)
	}
	return nil
}

// Owner reports whether owner is a valid owner label (stored with a grant
// and shown by inspection tools): printable ASCII without spaces, at most
// MaxOwnerLen bytes.
func Owner(owner string) error {
	if len(owner) > MaxOwnerLen {
		return fmt.Errorf("owner is %d bytes, longer than %d", len(owner), MaxOwnerLen)
	}
	for i := 0; i < len(owner); i++ {
		if c := owner[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("owner %q: byte %q at %d is not printable ASCII", owner, c, i)
		}
	}
	return nil
}
