package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/cleanup"
	"github.com/dlock-go/dlock/lock"
)

const inspectDescription = `
Shows who holds the lock NAME on etcd and who waits for it, in grant order:
for each key under <prefix>/lock/NAME/, its fencing token, its owner (the
value the holder stored: "<hostname>/<pid>" unless set with run --owner),
its lease and the time left on that lease.

etcd stores no timestamps, so there is no wall-clock age: AGE is counted in
etcd revisions (writes to the whole cluster) since the key was created, and
TTL LEFT is how long the lease would last if its holder's heartbeats
stopped now. A live holder's TTL LEFT keeps being renewed.

Use --election to inspect an election's candidates instead (the first is
the leader; its token's Seq is the epoch).

It talks to etcd: --endpoints (plaintext), or a DSN in --dsn or
$DLOCK_DSN (etcd://, or etcds:// for TLS with cacert, cert and key). It
reads only, but connecting starts a session like run's (a lease that
holds no key, revoked on exit), which also checks that etcd answers.`

// inspectEntry is one key of the queue, as --json prints it.
type inspectEntry struct {
	Position       int    `json:"position"` // 0: the holder
	Key            string `json:"key"`
	Token          string `json:"token"` // fence wire form
	Seq            int64  `json:"seq"`   // the key's create revision
	Owner          string `json:"owner"`
	Lease          string `json:"lease"` // hex, as etcdctl prints it
	TTLLeftSeconds int64  `json:"ttl_left_seconds"`
	GrantedTTL     int64  `json:"granted_ttl_seconds"`
	RevisionsAgo   int64  `json:"revisions_ago"`
}

// inspectResult is the --json document.
type inspectResult struct {
	Name     string         `json:"name"`
	Prefix   string         `json:"prefix"`
	Revision int64          `json:"revision"` // the etcd revision of the read
	Holder   *inspectEntry  `json:"holder"`   // null if nobody holds it
	Waiting  []inspectEntry `json:"waiting"`
}

func runInspect(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "inspect", "[flags] NAME", inspectDescription)
	var conn connFlags
	conn.register(fs, e, false)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	isElection := fs.Bool("election", false, "inspect the election NAME instead of the lock NAME")
	pos, err := parse(fs, args, true)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("want exactly one argument, the lock's NAME; got %d", len(pos))
	}
	name := pos[0]
	if err := lock.ValidateName(name); err != nil {
		return usageError("%v", err)
	}
	cfg, err := conn.config(fs)
	if err != nil {
		return err
	}
	client, err := open(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := cleanup.Context(context.Background())
		defer cancel()
		client.Close(cctx)
	}()
	prefix, err := queuePrefix(client, name, *isElection)
	if err != nil {
		return err
	}

	res, err := inspect(ctx, client.Source().Client(), name, prefix)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	printInspect(e.stdout, res, *isElection)
	return nil
}

// queuePrefix returns the etcd key prefix of the queue of the lock (or
// election) name, from the Client's own Mutex (Election), so that the key
// layout lives in one place.
func queuePrefix(client *dlock.Client, name string, isElection bool) (string, error) {
	if isElection {
		el, err := client.Election(name)
		if err != nil {
			return "", err
		}
		return el.Prefix(), nil
	}
	l, err := client.Locker(name)
	if err != nil {
		return "", err
	}
	m, ok := l.(*lock.Mutex)
	if !ok {
		return "", fmt.Errorf("lock %q: a %T has no etcd queue to inspect", name, l)
	}
	return m.Prefix(), nil
}

func inspect(ctx context.Context, cli *clientv3.Client, name, prefix string) (inspectResult, error) {
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return inspectResult{}, fmt.Errorf("read %s: %w", prefix, err)
	}
	res := inspectResult{Name: name, Prefix: prefix, Revision: resp.Header.Revision, Waiting: []inspectEntry{}}
	for i, kv := range resp.Kvs {
		en := inspectEntry{
			Position:       i,
			Key:            string(kv.Key),
			Token:          fence.Token{Name: name, Seq: uint64(kv.CreateRevision)}.String(),
			Seq:            kv.CreateRevision,
			Owner:          string(kv.Value),
			Lease:          fmt.Sprintf("%x", kv.Lease),
			TTLLeftSeconds: -1,
			RevisionsAgo:   resp.Header.Revision - kv.CreateRevision,
		}
		if kv.Lease != 0 {
			ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
			if err != nil {
				return inspectResult{}, fmt.Errorf("lease %x of %s: %w", kv.Lease, kv.Key, err)
			}
			en.TTLLeftSeconds, en.GrantedTTL = ttl.TTL, ttl.GrantedTTL
		}
		if i == 0 {
			res.Holder = &en
		} else {
			res.Waiting = append(res.Waiting, en)
		}
	}
	return res, nil
}

func printInspect(w io.Writer, r inspectResult, isElection bool) {
	kind, holds, holder := "lock", "holder", "nobody holds it"
	if isElection {
		kind, holds, holder = "election", "leader", "no leader"
	}
	fmt.Fprintf(w, "%s %q (keys under %s, read at etcd revision %d)\n", kind, r.Name, r.Prefix, r.Revision)
	if r.Holder == nil {
		fmt.Fprintf(w, "%s, nobody waits\n", holder)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\tTOKEN\tOWNER\tLEASE\tTTL LEFT\tAGE (REVISIONS)")
	row := func(label string, en inspectEntry) {
		ttl := "-"
		if en.TTLLeftSeconds >= 0 {
			ttl = fmt.Sprintf("%ds of %ds", en.TTLLeftSeconds, en.GrantedTTL)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", label, en.Token, strings.TrimSpace(en.Owner), en.Lease, ttl, en.RevisionsAgo)
	}
	row(holds, *r.Holder)
	for _, en := range r.Waiting {
		row(fmt.Sprintf("waiting #%d", en.Position), en)
	}
	tw.Flush()
	fmt.Fprintln(w, "(etcd keeps no timestamps: AGE counts cluster writes since the key was created; TTL LEFT is renewed while the holder's heartbeats arrive)")
}
