package redis

import (
	"crypto/rand"
	"encoding/hex"

	goredis "github.com/redis/go-redis/v9"
)

// keys are the Redis names of one lock. The hash tag {name} puts them in one
// Redis Cluster slot, so one script may touch the lock key and its counter.
type keys struct {
	lock    string // the lock key: holds the grant's value, with a PX expiry
	seq     string // the token counter: INCRed per grant, never deleted
	channel string // the release channel: a release PUBLISHes here
}

func newKeys(prefix, name string) keys {
	base := prefix + "{" + name + "}"
	return keys{lock: base, seq: base + ":seq", channel: base + ":released"}
}

// newValue returns a fresh grant value: 128 random bits, so compare-and-delete
// never matches another grant's value, followed by the owner if any.
func newValue(owner string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	v := hex.EncodeToString(b[:])
	if owner != "" {
		v += " " + owner
	}
	return v
}

// ownerOf returns the owner part of a grant value.
func ownerOf(value string) string {
	if len(value) > 33 && value[32] == ' ' {
		return value[33:]
	}
	return ""
}

// acquireScript grants the lock if it is free and mints the token.
//
//	KEYS[1] lock key, KEYS[2] counter key; ARGV[1] value, ARGV[2] ttl (ms),
//	ARGV[3] "1" to mint a token.
//
// Returns {1, token} when granted ({1, 0} without a token), {0, pttl} when
// another grant holds the lock (pttl: its remaining validity in ms).
var acquireScript = goredis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if ARGV[3] == '1' then
    return {1, redis.call('INCR', KEYS[2])}
  end
  return {1, 0}
end
return {0, redis.call('PTTL', KEYS[1])}
`)

// releaseScript deletes the lock key only if it still holds this grant's
// value, and then wakes the waiters.
//
//	KEYS[1] lock key; ARGV[1] value, ARGV[2] release channel.
//
// Returns 1 if the key was this grant's and is now deleted, else 0.
var releaseScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], '1')
  return 1
end
return 0
`)

// extendScript resets the lock key's expiry only if it still holds this
// grant's value: it never re-creates an expired key.
//
//	KEYS[1] lock key; ARGV[1] value, ARGV[2] ttl (ms).
//
// Returns 1 if extended, else 0.
var extendScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)
