package history

import "slices"

// What the payments workload leaves (docs/faults.md, "The payments
// workload"): each payments server's audit of the charges it made
// (payments/<workload>.audit.jsonl, one Charge a line, synced), and the
// run's etcd keyspace history read at the end (payments/etcd.jsonl, one KV
// a line, in revision order).

// The payments workloads: instances of one workload, side by side in a
// run, each with a lock, a state key, a journal and a payments server of
// its own (the Workload of their events).
const (
	// PaymentsJournal runs every charge through the intent journal, sends
	// its idempotency key, and finishes the intents earlier holders left
	// open (Journal.Pending): each order is charged once.
	PaymentsJournal = "payments-journal"
	// PaymentsNoKeys is the control without keys: the charge carries no
	// Idempotency-Key, so a charge finished by the next holder can be
	// made twice.
	PaymentsNoKeys = "payments-nokeys"
	// PaymentsNoPending is the control without Pending: no holder
	// finishes its predecessors' intents, so an order whose holder died
	// after claiming it is never charged.
	PaymentsNoPending = "payments-nopending"
	// PaymentsShort is PaymentsJournal at a payments server that keeps
	// keys for less time than a pause lasts: the journal's documented
	// limit.
	PaymentsShort = "payments-short"
)

// PaymentsWorkloads lists the payments workloads.
var PaymentsWorkloads = []string{PaymentsJournal, PaymentsNoKeys, PaymentsNoPending, PaymentsShort}

// IsPayments tells whether wl is a payments workload.
func IsPayments(wl string) bool { return slices.Contains(PaymentsWorkloads, wl) }

// Charge is one effect of a payments server: a charge it made, in the
// order it made them. A request it answered from its stored response (the
// same Idempotency-Key, the same payload, within its window), or refused
// (409, 422), made none.
type Charge struct {
	T      int64  `json:"t"`               // when the charge was made (Unix ns)
	ID     string `json:"id"`              // the server's charge ID ("ch_<n>")
	Order  int64  `json:"order"`           // the order charged
	Amount int64  `json:"amount"`          // in cents
	Key    string `json:"key,omitempty"`   // the request's Idempotency-Key ("": none)
	Token  string `json:"token,omitempty"` // the request's Dlock-Fence-Token, recorded, not checked ("": none)
}

// KV is one event of etcd's keyspace history: a put (with the key's
// create revision and lease) or a delete, at revision Rev. Several events
// of one transaction share a revision.
type KV struct {
	Rev    int64  `json:"rev"`
	Del    bool   `json:"del,omitempty"`
	Key    string `json:"key"`
	Value  string `json:"v,omitempty"`
	Create int64  `json:"create,omitempty"` // the key's create revision (a put)
	Lease  int64  `json:"lease,omitempty"`
}
