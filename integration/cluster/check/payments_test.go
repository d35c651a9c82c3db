package check

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/integration/cluster/history"
)

// keyspace builds a keyspace history for lock "dlock-<wl>", revision by
// revision, as etcd's watch from revision 1 gives it.
type keyspace struct {
	kvs []history.KV
	rev int64
}

const testQueue, testDir = "dlock/lock/dlock-payments-journal/", "dlock/lock/dlock-payments-journal!intent/"

// grant creates a queue key (a grant's token is its revision).
func (k *keyspace) grant(lease string) uint64 {
	k.rev++
	k.kvs = append(k.kvs, history.KV{Rev: k.rev, Key: testQueue + lease, Create: k.rev})
	return uint64(k.rev)
}

// gone deletes a queue key (a release, or its lease expired).
func (k *keyspace) gone(lease string) {
	k.rev++
	k.kvs = append(k.kvs, history.KV{Rev: k.rev, Del: true, Key: testQueue + lease})
}

// write is one journal Txn by seq: the mark raised, and optionally a
// record put (created when it is new).
func (k *keyspace) write(seq uint64, order int64, done, created bool, raise bool) {
	k.rev++
	if raise {
		k.kvs = append(k.kvs, history.KV{Rev: k.rev, Key: testDir + "mark", Value: fmt.Sprintf("%020d", seq)})
	}
	if order == 0 {
		return
	}
	op := fmt.Sprintf("charge/order-%d", order)
	v, _ := json.Marshal(map[string]any{"op": op, "key": "k", "name": "dlock-payments-journal", "seq": seq, "done": done})
	create := k.rev
	if !created {
		create = 1 // an earlier revision
	}
	k.kvs = append(k.kvs, history.KV{Rev: k.rev, Key: testDir + "op/charge%2Forder-" + fmt.Sprint(order), Value: string(v), Create: create})
}

func TestIntents(t *testing.T) {
	var k keyspace
	a := k.grant("aaaa")
	k.write(a, 0, false, false, true) // Pending: the mark raised
	k.write(a, 1, false, true, false) // order 1 started
	k.write(a, 1, true, false, false) // and finished
	k.write(a, 2, false, true, false) // order 2 started, left open
	k.gone("aaaa")                    // a's session expired
	b := k.grant("bbbb")
	k.write(b, 0, false, false, true) // b's Pending raises the mark
	k.write(b, 2, true, false, false) // and finishes order 2
	ops, stale := intents("dlock-payments-journal", k.kvs)
	assert.Empty(t, stale, "every intent written under a live grant, at the mark")
	require.Len(t, ops, 2)
	assert.Equal(t, started{op: "charge/order-1", order: 1, seq: a, rev: 3, done: true}, ops[0])
	assert.Equal(t, started{op: "charge/order-2", order: 2, seq: a, rev: 5, done: true}, ops[1])

	// The plant's bug: a, resumed after its key was deleted and b raised
	// the mark, starts order 3 (the unfenced store raises no mark for a
	// lower token).
	k.write(a, 3, false, true, false)
	_, stale = intents("dlock-payments-journal", k.kvs)
	require.Len(t, stale, 1)
	assert.Equal(t, staleStart{Op: "charge/order-3", Seq: a, Rev: 10, Deleted: 6, Mark: b, MarkRev: 8}, stale[0])
	assert.Equal(t, "stale start: intent charge/order-3 first written by tok 1 (w3/payments-journal#2) at revision 10, after its grant's key was deleted (revision 6), and while the journal's mark was 7 (since revision 8): a later holder had written",
		stale[0].describe(map[uint64]string{a: "w3/payments-journal#2"}))

	// A token no grant had.
	k.write(99, 4, false, true, false)
	_, stale = intents("dlock-payments-journal", k.kvs)
	require.Len(t, stale, 2)
	assert.Contains(t, stale[1].describe(nil), "no grant of the lock has that token")
}

// payRun writes a run's payments artifacts (the keyspace, and the audit
// of each workload) into a directory and checks it.
func payRun(t *testing.T, kvs []history.KV, audits map[string][]history.Charge) *Result {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, paymentsDir), 0o755))
	w, err := history.Create(filepath.Join(dir, paymentsDir, "etcd.jsonl"))
	require.NoError(t, err)
	var wls []string
	for _, kv := range kvs {
		require.NoError(t, w.Write(kv))
	}
	require.NoError(t, w.Close())
	for wl, cs := range audits {
		wls = append(wls, wl)
		w, err := history.Create(filepath.Join(dir, paymentsDir, wl+".audit.jsonl"))
		require.NoError(t, err)
		for _, c := range cs {
			require.NoError(t, w.Write(c))
		}
		require.NoError(t, w.Close())
	}
	var r Result
	require.NoError(t, r.Check(Settings{Dir: dir, Workloads: wls}))
	return &r
}

// rename copies kvs with the journal's lock renamed to that of wl.
func rename(kvs []history.KV, wl string) []history.KV {
	out := make([]history.KV, len(kvs))
	for i, kv := range kvs {
		kv.Key = strings.Replace(kv.Key, "dlock-payments-journal", "dlock-"+wl, 1)
		out[i] = kv
	}
	return out
}

// TestCheckPayments: each workload is held to what it promises: the
// journal to once, the control without keys to at least once, the one
// without Pending to at most once, the short window to at least once;
// the rest is measured. Stray charges and stale starts fail every one.
func TestCheckPayments(t *testing.T) {
	var k keyspace
	a := k.grant("aaaa")
	for order := int64(1); order <= 3; order++ {
		k.write(a, order, false, true, order == 1)
		k.write(a, order, true, false, false)
	}
	charge := func(order int64, key string) history.Charge {
		return history.Charge{T: 1, ID: fmt.Sprintf("ch_%d_%s", order, key), Order: order, Amount: 100, Key: key}
	}
	once := []history.Charge{charge(1, "a"), charge(2, "a"), charge(3, "a")}
	twice := append([]history.Charge{charge(2, "b")}, once...)
	short := []history.Charge{charge(1, "a"), charge(3, "a")}

	r := payRun(t, k.kvs, map[string][]history.Charge{history.PaymentsJournal: once})
	assert.Empty(t, r.Failures)
	assert.Equal(t, []PaymentsRow{{Workload: history.PaymentsJournal, Started: 3, Charges: 3, MinEffects: 1, MaxEffects: 1}}, r.Payments)

	for _, c := range []struct {
		wl      string
		charges []history.Charge
		fail    string // a failure's substring; "" for none
		note    string
	}{
		{history.PaymentsJournal, twice, "payments-journal: duplicate: order 2 charged 2 times: ch_2_b at", ""},
		{history.PaymentsJournal, short, "payments-journal: lost: charge/order-2 started by tok 1 at revision 4, never charged (its intent done)", ""},
		{history.PaymentsNoKeys, twice, "", "payments-nokeys: 1 orders charged more than once (the control without keys)"},
		{history.PaymentsNoKeys, short, "payments-nokeys: lost", ""},
		{history.PaymentsNoPending, short, "", "payments-nopending: 1 orders claimed and never charged (the control without Pending)"},
		{history.PaymentsNoPending, twice, "payments-nopending: duplicate", ""},
		{history.PaymentsShort, twice, "", "the journal's documented limit"},
		{history.PaymentsShort, short, "payments-short: lost", ""},
		{history.PaymentsShort, append(once, charge(9, "z")), "payments-short: stray charge: ch_9_z of order 9", ""},
		{history.PaymentsJournal, nil, "payments-journal: lost", ""},
	} {
		r := payRun(t, rename(k.kvs, c.wl), map[string][]history.Charge{c.wl: c.charges})
		if c.fail == "" {
			assert.Empty(t, r.Failures, "%s %v", c.wl, c.charges)
		} else {
			assert.True(t, contains(r.Failures, c.fail), "%s: want %q in %q", c.wl, c.fail, r.Failures)
		}
		if c.note != "" {
			assert.True(t, contains(r.Notes, c.note), "%s: want %q in %q", c.wl, c.note, r.Notes)
		}
	}

	// A stale start fails every workload, whatever its effects.
	k.gone("aaaa")
	b := k.grant("bbbb")
	k.write(b, 0, false, false, true)
	k.write(a, 4, false, true, false)
	for _, wl := range history.PaymentsWorkloads {
		r := payRun(t, rename(k.kvs, wl), map[string][]history.Charge{wl: append(once, charge(4, "a"))})
		assert.True(t, contains(r.Failures, wl+": stale start: intent charge/order-4 first written by tok 1"), "%s: %q", wl, r.Failures)
	}

	// Nothing started; no history at all.
	r = payRun(t, nil, map[string][]history.Charge{history.PaymentsJournal: nil})
	assert.True(t, contains(r.Failures, "payments-journal: no order started"), "%q", r.Failures)
	var none Result
	require.NoError(t, none.Check(Settings{Dir: t.TempDir(), Workloads: []string{history.PaymentsJournal}}))
	assert.True(t, contains(none.Failures, "payments: no history of etcd's keyspace"), "%q", none.Failures)
	assert.True(t, contains(none.Failures, "payments-journal: no audit"), "%q", none.Failures)
}

func contains(ss []string, sub string) bool {
	for _, s := range ss {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func TestPaymentsTable(t *testing.T) {
	got := PaymentsTable([]PaymentsRow{{Workload: "payments-journal", Started: 3, Charges: 4, MinEffects: 1, MaxEffects: 2, Duplicates: 1}})
	assert.Equal(t, "| workload | orders started | charges | effects per order min/max | duplicates | lost | stray | stale starts | open at the end |\n"+
		"|---|---:|---:|---|---:|---:|---:|---:|---:|\n"+
		"| payments-journal | 3 | 4 | 1 / 2 | 1 | 0 | 0 | 0 | 0 |\n", got)
}
