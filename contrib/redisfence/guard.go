package redisfence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/telemetry"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/fence"
)

// check is the compare-and-set shared by both scripts. KEYS[1] is the fence
// key, ARGV[1] the token's Seq in canonical decimal. Decimal strings without
// leading zeros compare by length, then lexically: exact for every uint64,
// where Lua numbers (doubles) are not. It returns nil when the token is
// admitted (the mark is raised to it), or the reply to return.
const check = `
local seq = ARGV[1]
local cur = redis.call('GET', KEYS[1])
if cur then
	if not string.match(cur, '^[1-9][0-9]*$') then
		return redis.error_reply('CORRUPT fence key ' .. KEYS[1] .. ' holds ' .. string.format('%q', cur))
	end
	if #seq < #cur or (#seq == #cur and seq < cur) then
		return {0, cur}
	end
end
if cur ~= seq then
	redis.call('SET', KEYS[1], seq)
end
`

var (
	admitScript = goredis.NewScript(check + `
return {1, seq}
`)
	// KEYS[2] is the data key, ARGV[2] the value, ARGV[3] the expiry in
	// milliseconds (0: none).
	setScript = goredis.NewScript(check + `
if ARGV[3] ~= '0' then
	redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
else
	redis.call('SET', KEYS[2], ARGV[2])
end
return {1, seq}
`)
)

// Guard is a fence.Guard that keeps its high-water marks in Redis. It is
// safe for concurrent use. The zero value is not usable; call New.
type Guard struct {
	client goredis.UniversalClient
	prefix string
	tel    *telemetry.Fence
}

var _ fence.Guard = (*Guard)(nil)

// New returns a Guard that stores its marks through client. It does not
// contact the server.
func New(client goredis.UniversalClient, opts ...Option) (*Guard, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: client is nil", ErrInvalidOption)
	}
	o := defaults()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	return &Guard{client: client, prefix: o.prefix, tel: telemetry.NewFence("redis", o.tel)}, nil
}

// Key returns the fence key that holds the mark for lock name.
func (g *Guard) Key(name string) string { return g.prefix + name }

// Admit admits t in one script: nil if t.Seq is at least the stored mark for
// t.Name (raising the mark to t.Seq), a *fence.StaleTokenError (matching
// fence.ErrStaleToken) with the stored mark if it is lower, an error
// matching fence.ErrNoToken for Seq 0 and fence.ErrInvalidToken for an empty
// Name. Admit alone does not protect a write made elsewhere; see Set.
func (g *Guard) Admit(ctx context.Context, t fence.Token) error {
	if err := t.Check(); err != nil {
		return err
	}
	return g.tel.Write(ctx, t, func(ctx context.Context) error {
		res, err := admitScript.Run(ctx, g.client, []string{g.Key(t.Name)}, strconv.FormatUint(t.Seq, 10)).Result()
		return g.result(t, "admit", res, err)
	})
}

// Set admits t and, in the same script, sets key to value (with the given
// expiration; 0 means none), so the value is written only if t is current.
// It returns the errors Admit returns; on any error nothing is written.
// value is encoded as go-redis encodes command arguments (string, []byte,
// numbers, encoding.BinaryMarshaler).
func (g *Guard) Set(ctx context.Context, t fence.Token, key string, value any, expiration time.Duration) error {
	if err := t.Check(); err != nil {
		return err
	}
	if key == "" {
		return fmt.Errorf("%w: Set: key is empty", ErrInvalidOption)
	}
	if key == g.Key(t.Name) {
		return fmt.Errorf("%w: Set: key %q is the fence key of %q", ErrInvalidOption, key, t.Name)
	}
	if expiration < 0 {
		return fmt.Errorf("%w: Set: negative expiration %v", ErrInvalidOption, expiration)
	}
	ms := expiration.Milliseconds()
	if expiration > 0 && ms == 0 {
		ms = 1 // Redis counts in milliseconds; never round down to "no expiry"
	}
	return g.tel.Write(ctx, t, func(ctx context.Context) error {
		res, err := setScript.Run(ctx, g.client, []string{g.Key(t.Name), key},
			strconv.FormatUint(t.Seq, 10), value, strconv.FormatInt(ms, 10)).Result()
		return g.result(t, "set "+strconv.Quote(key), res, err)
	})
}

// Highest returns the stored mark for name, or 0 if no token was admitted
// for it.
func (g *Guard) Highest(ctx context.Context, name string) (uint64, error) {
	s, err := g.client.Get(ctx, g.Key(name)).Result()
	if errors.Is(err, goredis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("redisfence: highest %q: %w", name, err)
	}
	return parseMark(g.Key(name), s)
}

func (g *Guard) result(t fence.Token, op string, res any, err error) error {
	if err != nil {
		if strings.HasPrefix(err.Error(), "CORRUPT ") {
			return fmt.Errorf("%w: %s: %s", ErrCorruptMark, t, strings.TrimPrefix(err.Error(), "CORRUPT "))
		}
		return fmt.Errorf("redisfence: %s %s: %w", op, t, err)
	}
	vals, ok := res.([]any)
	if !ok || len(vals) != 2 {
		return fmt.Errorf("redisfence: %s %s: unexpected reply %v", op, t, res)
	}
	admitted, ok1 := vals[0].(int64)
	markText, ok2 := vals[1].(string)
	if !ok1 || !ok2 {
		return fmt.Errorf("redisfence: %s %s: unexpected reply %v", op, t, res)
	}
	if admitted == 1 {
		return nil
	}
	mark, err := parseMark(g.Key(t.Name), markText)
	if err != nil {
		return err
	}
	return &fence.StaleTokenError{Name: t.Name, Seq: t.Seq, Highest: mark}
}

func parseMark(key, s string) (uint64, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v == 0 || strconv.FormatUint(v, 10) != s {
		return 0, fmt.Errorf("%w: key %q holds %q", ErrCorruptMark, key, s)
	}
	return v, nil
}
