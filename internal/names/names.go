// Package names holds the rules for what users name: lock and election
// names, key prefixes, owners. Each package that takes one wraps these
// errors in its own sentinel (lock.ErrInvalidName, redis.ErrInvalidOption,
// dlock.ErrInvalidConfig), so the rules are written once.
package names

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
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
	if bad, ok := firstBad(name, func(c rune) bool {
		return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '/'
	}); !ok {
		return fmt.Errorf("name %q: %s is not in [A-Za-z0-9._/-]", name, bad)
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
	if bad, ok := firstBad(owner, func(c rune) bool { return ' ' < c && c <= '~' }); !ok {
		return fmt.Errorf("owner %q: %s is not printable ASCII", owner, bad)
	}
	return nil
}

// firstBad describes the first character of s that allowed refuses, with
// its byte offset: a character as itself and its code point ("'é'
// (U+00E9) at byte 3"), a byte that is not UTF-8 by its value. ok is true
// if there is none.
func firstBad(s string, allowed func(rune) bool) (bad string, ok bool) {
	for i, c := range s {
		if c == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return fmt.Sprintf("byte %#02x at %d (not UTF-8)", s[i], i), false
			}
		}
		if !allowed(c) {
			return fmt.Sprintf("%q (%U) at byte %d", c, c, i), false
		}
	}
	return "", true
}
