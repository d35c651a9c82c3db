// Package intent makes a lock useful at resources that cannot check a
// fencing token: a payment provider's API, an e-mail relay, a partner's
// webhook, a cloud API.
//
// A guard (package fence) turns a stale holder away at the resource. When
// the resource cannot run one, a holder that pauses after calling it and
// before recording that it did (or crashes there) leaves the next holder
// unable to tell whether the call happened: it calls again, and the
// invoice is charged twice, though every component behaved correctly.
//
// A [Journal] closes that gap with the resource's own deduplication. Before
// the call, [Journal.Do] writes an intent (the operation's id, an
// idempotency key, the holder's token) to a journal that is fenced by the
// grant's token; it calls the resource with the key; then it records the
// outcome, fenced too. The next holder first reads, with [Journal.Pending],
// the intents its predecessors left open, and finishes each with the same
// key: the resource's deduplication turns "the call may have happened"
// into "the call happened once". Pending raises the journal's mark, so a
// stale holder cannot start anything new from then on: its Do returns
// [ErrSuperseded] without calling the resource.
//
// # Guarantee
//
// With a linearizable Store (Memory, Etcd, contrib/pgfence's journal),
// holders that run every operation through Do and call Pending after each
// grant, at a resource that deduplicates by key: each operation takes
// effect once, provided that no call reaches the resource later than the
// resource's deduplication window (24 hours at Stripe) after the first
// call with its key.
//
// # Limits
//
//   - The window: a holder that pauses between writing its intent and its
//     call for longer than the resource keeps keys can make a second effect.
//     The journal cannot stop a call already decided; Done (the local
//     deadline) is checked just before fn runs, which shortens this gap but
//     cannot close it.
//   - A resource that neither checks a token nor deduplicates nor can be
//     queried cannot be made safe by any lock. Look the operation up where
//     the resource allows it (see Journal.Pending).
//   - A Redlock grant has no token (Seq 0): the journal refuses it.
//   - The journal orders the holders of one lock name by token: it is for
//     exclusive locks (a Mutex, an RWMutex's writer). The concurrent
//     holders of a Semaphore would supersede one another. An election's
//     Term is not a lock.Held.
//   - The journal is as durable as its store: an etcd cluster restored
//     from an older snapshot forgets the intents written since.
//
// # Stores
//
// [NewMemory] (for tests, beside lock/locktest's Memory), [NewEtcd] (beside
// the lock's queue; a Client's Journal on etcd), and contrib/pgfence's
// journal on PostgreSQL, which shares its mark with pgfence's guard. Each
// passes the suite in intent/intenttest. Journals are bounded: a finished
// intent is removed after the retention ([DefaultRetention], or
// [Journal.WithRetention]); an open one is never removed.
package intent
