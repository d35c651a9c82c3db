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
	channel string // the release channel of a Redlock: a release PUBLISHes here
	waiters string // a Mutex's waiters: a sorted set of waiter IDs, oldest first
	wake    string // a Mutex waiter's channel is wake + its ID
}

func newKeys(prefix, name string) keys {
	base := prefix + "{" + name + "}"
	return keys{lock: base, seq: base + ":seq", channel: base + ":released", waiters: base + ":waiters", wake: base + ":w:"}
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

// acquireScript grants the lock if it is free and mints the token; a
// refused waiter is registered (a Mutex's wake-one release).
//
//	KEYS[1] lock key, KEYS[2] counter key, KEYS[3] waiters key (with a
//	waiter ID); ARGV[1] value, ARGV[2] ttl (ms), ARGV[3] "1" to mint a
//	token, ARGV[4] the waiter ID or absent, ARGV[5] the waiters key's
//	expiry (ms).
//
// Returns {1, token} when granted ({1, 0} without a token), {0, pttl} when
// another grant holds the lock (pttl: its remaining validity in ms). A
// waiter that is granted leaves the waiters; one that is refused joins
// them at the end if it is not there yet (its place is kept across
// refusals), and the waiters key's expiry is renewed.
var acquireScript = goredis.NewScript(acquireSrc)

const acquireSrc = `
local wid = ARGV[4]
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if wid then
    redis.call('ZREM', KEYS[3], wid)
  end
  if ARGV[3] == '1' then
    return {1, redis.call('INCR', KEYS[2])}
  end
  return {1, 0}
end
if wid then
  if not redis.call('ZSCORE', KEYS[3], wid) then
    local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
    local score = 1
    if last[2] then
      score = tonumber(last[2]) + 1
    end
    redis.call('ZADD', KEYS[3], score, wid)
  end
  redis.call('PEXPIRE', KEYS[3], ARGV[5])
end
return {0, redis.call('PTTL', KEYS[1])}
`

// wakeOne is the Lua that wakes the oldest waiter of KEYS[2] through its
// channel (ARGV[2] .. ID): a waiter that nobody receives for (its process
// is gone, or it stopped listening) is removed and the next one tried, at
// most ARGV[3] times. The woken waiter stays registered until it is
// granted or leaves, so a waiter that loses the race to a newcomer keeps
// its place.
const wakeOne = `
for _ = 1, tonumber(ARGV[3]) do
  local w = redis.call('ZRANGE', KEYS[2], 0, 0)
  if #w == 0 then
    break
  end
  if redis.call('PUBLISH', ARGV[2] .. w[1], '1') > 0 then
    break
  end
  redis.call('ZREM', KEYS[2], w[1])
end
`

// wakeTries bounds the waiters one release tries to wake (see wakeOne).
// Past it the rest find the lock free at their next poll.
const wakeTries = 8

// releaseOneScript is a Mutex's release: it deletes the lock key only if
// it still holds this grant's value, and then wakes one waiter.
//
//	KEYS[1] lock key, KEYS[2] waiters key; ARGV[1] value, ARGV[2] the
//	waiters' channel prefix, ARGV[3] the waiters to try at most.
//
// Returns 1 if the key was this grant's and is now deleted, else 0.
var releaseOneScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
` + wakeOne + `
return 1
`)

// leaveScript removes a waiter that gave up, and wakes the next one if
// the lock is free (the leaver may have taken a wake-up with it).
//
//	KEYS[1] lock key, KEYS[2] waiters key; ARGV[1] waiter ID, ARGV[2] the
//	waiters' channel prefix, ARGV[3] the waiters to try at most.
var leaveScript = goredis.NewScript(`
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
` + wakeOne + `
end
return 0
`)

// releaseScript is a Redlock node's release of a grant: it deletes the
// lock key only if it still holds this grant's value, and then wakes every
// waiter. An attempt that was never a grant uses discardScript.
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

// discardScript deletes what a Redlock acquire that was never a grant
// left on a node (the failed attempt's partial key, or a key that landed
// after its round was decided without it): the lock key, only if it
// still holds that attempt's value. Unlike releaseScript it publishes
// nothing: a failed attempt freed no lock (no majority was ever held),
// and a wake-up would send every waiter at the lock at once, to split
// the nodes between them again. A waiter that such a key refused polls
// instead (see acquire).
//
//	KEYS[1] lock key; ARGV[1] value.
//
// Returns 1 if the key was this attempt's and is now deleted, else 0.
var discardScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
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
