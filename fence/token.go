package fence

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Token is the fencing token of one lock grant. Successive holders of one
// lock get strictly increasing Seq values (how far that holds depends on the
// backend; each backend documents it). The zero Seq means "no token".
//
// Token is a small value type: copy it freely.
type Token struct {
	Name string // the lock's name
	Seq  uint64 // the grant's sequence number; 0 means no token
}

// IsZero reports whether t carries no token (Seq 0).
func (t Token) IsZero() bool { return t.Seq == 0 }

// Check reports whether t can be presented to a guard: it returns an error
// matching ErrNoToken for Seq 0 and ErrInvalidToken for an empty Name.
func (t Token) Check() error {
	if t.Seq == 0 {
		return fmt.Errorf("%w: lock %q", ErrNoToken, t.Name)
	}
	if t.Name == "" {
		return fmt.Errorf("%w: empty name (seq %d)", ErrInvalidToken, t.Seq)
	}
	return nil
}

// String returns the token's stable wire form, "<name>:<seq>", with the name
// percent-encoded so that the form is printable ASCII without spaces or
// colons (safe in HTTP headers and gRPC metadata). Letters, digits and
// "-._~/" are kept as they are; every other byte becomes %XX (upper case).
// For example Token{"orders/eu", 42} is "orders/eu:42".
func (t Token) String() string {
	var b strings.Builder
	b.Grow(len(t.Name) + 21)
	for i := 0; i < len(t.Name); i++ {
		c := t.Name[i]
		if plain(c) {
			b.WriteByte(c)
			continue
		}
		const hex = "0123456789ABCDEF"
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	b.WriteByte(':')
	b.WriteString(strconv.FormatUint(t.Seq, 10))
	return b.String()
}

// ParseToken parses the wire form produced by Token.String. It accepts only
// the canonical form, so ParseToken(s) succeeds exactly when
// ParseToken(s).String() == s, and it rejects what Check calls invalid (an
// empty name with a Seq, ":5"); a token without a Seq ("orders:0", ":0")
// parses, so that a guard can answer ErrNoToken. Errors match
// ErrInvalidToken.
func ParseToken(s string) (Token, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return Token{}, fmt.Errorf("%w: %q has no ':'", ErrInvalidToken, s)
	}
	seqText := s[i+1:]
	if seqText == "" || (len(seqText) > 1 && seqText[0] == '0') {
		return Token{}, fmt.Errorf("%w: %q: seq must be a decimal number without leading zeros", ErrInvalidToken, s)
	}
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if err != nil {
		return Token{}, fmt.Errorf("%w: %q: seq: %v", ErrInvalidToken, s, err)
	}
	name, err := unescape(s[:i])
	if err != nil {
		return Token{}, fmt.Errorf("%w: %q: name: %v", ErrInvalidToken, s, err)
	}
	if name == "" && seq != 0 {
		return Token{}, fmt.Errorf("%w: %q: empty name", ErrInvalidToken, s)
	}
	return Token{Name: name, Seq: seq}, nil
}

func plain(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~' || c == '/'
}

func unescape(s string) (string, error) {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case plain(c):
			b.WriteByte(c)
		case c == '%':
			if i+2 >= len(s) {
				return "", fmt.Errorf("truncated escape at byte %d", i)
			}
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			v := hi<<4 | lo
			if !ok1 || !ok2 || plain(v) {
				return "", fmt.Errorf("bad escape %q at byte %d", s[i:i+3], i)
			}
			b.WriteByte(v)
			i += 2
		default:
			return "", fmt.Errorf("byte %q at %d must be escaped", c, i)
		}
	}
	return b.String(), nil
}

// unhex decodes one upper-case hex digit (the canonical form).
func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

type ctxKey struct{}

// NewContext returns a copy of ctx that carries t. Client-side helpers (the
// HTTP RoundTripper and gRPC interceptors in contrib) read it from there.
func NewContext(ctx context.Context, t Token) context.Context {
	return context.WithValue(ctx, ctxKey{}, t)
}

// FromContext returns the token stored in ctx by NewContext, if any.
func FromContext(ctx context.Context) (Token, bool) {
	t, ok := ctx.Value(ctxKey{}).(Token)
	return t, ok
}
