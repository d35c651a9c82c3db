package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
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

The same queue also holds the entries of the semaphore NAME (run
--permits) and of the reader/writer lock NAME (run --shared, run --rw):
each row then says its KIND, "write" (a plain run's lock, or the writer
side), "read" (--shared) or "permit" (--permits; the header gives the
number of permits), and whether it holds or waits: a writer holds when it
is first, a reader when no writer is before it, a permit when fewer than
N entries are before it. Several entries may hold at once.

Use --election to inspect an election's candidates instead (the first is
the leader; its token's Seq is the epoch).

With --watch, inspect stays and shows the queue again at every change,
driven by an etcd watch on its keys, until interrupted (SIGINT). On a
terminal it redraws the screen; otherwise (a pipe, a file) it prints one
block per change, each after a line with the time and the revision
("--- <RFC 3339 time> (etcd revision N)"). With --json too, it prints one
JSON document per line per change. TTL LEFT is
read at each change, not counted down between changes.

It talks to etcd: --endpoints (plaintext), or a DSN in --dsn or
$DLOCK_DSN (etcd://, or etcds:// for TLS with cacert, cert and key). It
reads only, but connecting starts a session like run's (a lease that
holds no key, revoked on exit), which also checks that etcd answers.`

// Kinds and states of an inspected entry.
const (
	kindWriteName  = "write"  // a Mutex's key, or an RWMutex's writer
	kindReadName   = "read"   // an RWMutex's reader (under its ReaderPrefix)
	kindPermitName = "permit" // a Semaphore's entry ("permits=N owner")

	stateHolder  = "holder"
	stateWaiting = "waiting"
)

// inspectEntry is one key of the queue, as --json prints it.
type inspectEntry struct {
	Position       int    `json:"position"` // 0: the first key of the queue
	Key            string `json:"key"`
	Kind           string `json:"kind,omitempty"`    // write, read or permit; empty for an election's candidate
	State          string `json:"state"`             // holder or waiting
	Permits        int    `json:"permits,omitempty"` // a permit's semaphore's number of permits
	Token          string `json:"token"`             // fence wire form
	Seq            int64  `json:"seq"`               // the key's create revision
	Owner          string `json:"owner"`
	Lease          string `json:"lease"` // hex, as etcdctl prints it
	lease          int64  // the same, as etcd returns it (0: none)
	TTLLeftSeconds int64  `json:"ttl_left_seconds"`
	GrantedTTL     int64  `json:"granted_ttl_seconds"`
	RevisionsAgo   int64  `json:"revisions_ago"`
}

// inspectResult is the --json document.
type inspectResult struct {
	Name     string         `json:"name"`
	Prefix   string         `json:"prefix"`
	Revision int64          `json:"revision"` // the etcd revision of the read
	Holder   *inspectEntry  `json:"holder"`   // the first holder; null if nobody holds it
	Holders  []inspectEntry `json:"holders"`  // every holder (several: permits, readers)
	Waiting  []inspectEntry `json:"waiting"`
}

// queueKeys is where an inspected queue's keys are.
type queueKeys struct {
	prefix       string // every entry's key is under it
	readerPrefix string // readers' keys, inside prefix; "" for an election
}

func runInspect(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "inspect", "[flags] NAME", inspectDescription)
	var conn connFlags
	conn.register(fs, e, false)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	isElection := fs.Bool("election", false, "inspect the election NAME instead of the lock NAME")
	watch := fs.Bool("watch", false, "stay, and show the queue again at every change (an etcd watch) until interrupted")
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
	client, err := open(ctx, cfg, connHint)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := cleanupContext(context.Background())
		defer cancel()
		client.Close(cctx)
	}()
	keys, err := queueKeysOf(client, name, *isElection)
	if err != nil {
		return err
	}
	in := inspector{cli: client.Source().Client(), name: name, keys: keys, election: *isElection}
	show := func(r inspectResult) error {
		if *asJSON {
			enc := json.NewEncoder(e.stdout)
			if !*watch {
				enc.SetIndent("", "  ")
			}
			return enc.Encode(r)
		}
		printInspect(e.stdout, r, *isElection)
		return nil
	}
	if *watch {
		var before func(inspectResult)
		switch {
		case *asJSON: // one document per line; each has its revision
		case isTerminal(e.stdout):
			before = func(inspectResult) { fmt.Fprint(e.stdout, clearScreen) }
		default:
			before = func(r inspectResult) {
				fmt.Fprintf(e.stdout, "--- %s (etcd revision %d)\n", time.Now().Format(time.RFC3339Nano), r.Revision)
			}
		}
		return in.watch(ctx, before, show)
	}
	res, err := in.read(ctx)
	if err != nil {
		return err
	}
	return show(res)
}

// queueKeysOf returns where the queue of the lock (or election) name is:
// a Mutex's prefix, which the
// Client's Locker of name, an RWMutex or a Semaphore of name share
// (readers' keys under "r/" in it); an election's queue has the same
// layout under "<prefix>/election" (see Client.Election).
func queueKeysOf(client *dlock.Client, name string, isElection bool) (queueKeys, error) {
	root := client.Config().Prefix + "/lock"
	if isElection {
		root = client.Config().Prefix + "/election"
	}
	m, err := lock.New(client.Source(), name, lock.WithPrefix(root))
	if err != nil {
		return queueKeys{}, err
	}
	prefix := m.Prefix()
	if isElection {
		return queueKeys{prefix: prefix}, nil
	}
	return queueKeys{prefix: prefix, readerPrefix: prefix + "r/"}, nil
}

// inspector reads one queue.
type inspector struct {
	cli      *clientv3.Client
	name     string
	keys     queueKeys
	election bool
}

// read reads the queue and the leases of its keys.
func (in *inspector) read(ctx context.Context) (inspectResult, error) {
	res, err := in.queue(ctx)
	if err != nil {
		return res, err
	}
	leases := make(map[string]*clientv3.LeaseTimeToLiveResponse)
	for _, ens := range [][]inspectEntry{res.Holders, res.Waiting} {
		for i := range ens {
			en := &ens[i]
			if en.lease == 0 {
				continue
			}
			ttl, ok := leases[en.Lease]
			if !ok {
				if ttl, err = in.cli.TimeToLive(ctx, clientv3.LeaseID(en.lease)); err != nil {
					return inspectResult{}, fmt.Errorf("lease %s of %s: %w", en.Lease, en.Key, err)
				}
				leases[en.Lease] = ttl
			}
			en.TTLLeftSeconds, en.GrantedTTL = ttl.TTL, ttl.GrantedTTL
		}
	}
	return res, nil
}

// queue reads the queue in one request: its entries, who holds and who
// waits, without their leases' time left (TTLLeftSeconds -1).
func (in *inspector) queue(ctx context.Context) (inspectResult, error) {
	prefix := in.keys.prefix
	resp, err := in.cli.Get(ctx, prefix, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return inspectResult{}, fmt.Errorf("read %s: %w", prefix, err)
	}
	res := inspectResult{Name: in.name, Prefix: prefix, Revision: resp.Header.Revision, Holders: []inspectEntry{}, Waiting: []inspectEntry{}}
	writers := 0 // entries before this one that are not readers
	for i, kv := range resp.Kvs {
		en := inspectEntry{
			Position:       i,
			Key:            string(kv.Key),
			Token:          fence.Token{Name: in.name, Seq: uint64(kv.CreateRevision)}.String(),
			Seq:            kv.CreateRevision,
			Owner:          string(kv.Value),
			Lease:          fmt.Sprintf("%x", kv.Lease),
			lease:          kv.Lease,
			TTLLeftSeconds: -1,
			RevisionsAgo:   resp.Header.Revision - kv.CreateRevision,
		}
		// Who holds, by the rules of lock.Mutex, RWMutex and Semaphore
		// (see their docs), which share this queue.
		holds := i == 0
		switch n, owner, isPermit := semaphoreValue(kv.Value); {
		case in.election:
		case in.keys.readerPrefix != "" && strings.HasPrefix(en.Key, in.keys.readerPrefix):
			en.Kind, holds = kindReadName, writers == 0
		case isPermit:
			en.Kind, en.Permits, en.Owner, holds = kindPermitName, n, owner, i < n
			writers++
		default:
			en.Kind = kindWriteName
			writers++
		}
		if holds {
			en.State = stateHolder
			res.Holders = append(res.Holders, en)
		} else {
			en.State = stateWaiting
			res.Waiting = append(res.Waiting, en)
		}
	}
	if len(res.Holders) > 0 {
		res.Holder = &res.Holders[0]
	}
	return res, nil
}

// clearScreen moves a terminal's cursor home and clears the screen.
const clearScreen = "\x1b[H\x1b[2J"

// watch shows the queue, then again after every change under its prefix,
// until ctx ends (then it returns nil), calling before (if not nil) before
// each show. Changes that come together are shown once.
func (in *inspector) watch(ctx context.Context, before func(inspectResult), show func(inspectResult) error) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	var wch clientv3.WatchChan
	for {
		res, err := in.read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if before != nil {
			before(res)
		}
		if err := show(res); err != nil {
			return err
		}
		if wch == nil {
			// From the revision just shown: no change is missed between
			// the read and the watch.
			wch = in.cli.Watch(wctx, in.keys.prefix, clientv3.WithPrefix(), clientv3.WithRev(res.Revision+1))
		}
		if err := waitChange(ctx, wch); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("watch %s: %w", in.keys.prefix, err)
		}
	}
}

// waitChange waits for the next event on wch, then takes the responses
// already there too.
func waitChange(ctx context.Context, wch clientv3.WatchChan) error {
	got := func(wr clientv3.WatchResponse, ok bool) error {
		switch {
		case !ok:
			if err := ctx.Err(); err != nil {
				return err
			}
			return errors.New("watch ended")
		case wr.Err() != nil:
			return wr.Err()
		}
		return nil
	}
	for {
		wr, ok := <-wch
		if err := got(wr, ok); err != nil {
			return err
		}
		if len(wr.Events) > 0 {
			break
		}
	}
	for {
		select {
		case wr, ok := <-wch:
			if err := got(wr, ok); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

func printInspect(w io.Writer, r inspectResult, isElection bool) {
	kind, holds, holder := "lock", "holder", "nobody holds it"
	if isElection {
		kind, holds, holder = "election", "leader", "no leader"
	}
	// The plain form, for a Mutex's queue (and an election's): one holder,
	// the rest wait. Readers or permits add a KIND column.
	all := append(slices.Clone(r.Holders), r.Waiting...)
	slices.SortFunc(all, func(a, b inspectEntry) int { return a.Position - b.Position })
	mixed, permits := false, 0
	for _, en := range all {
		mixed = mixed || en.Kind == kindReadName || en.Kind == kindPermitName
		if en.Kind == kindPermitName && permits == 0 {
			permits = en.Permits
		}
	}
	fmt.Fprintf(w, "%s %q (keys under %s, read at etcd revision %d)\n", kind, r.Name, r.Prefix, r.Revision)
	if len(all) == 0 {
		fmt.Fprintf(w, "%s, nobody waits\n", holder)
		return
	}
	if mixed {
		fmt.Fprintf(w, "%d holding, %d waiting", len(r.Holders), len(r.Waiting))
		if permits > 0 {
			fmt.Fprintf(w, " (semaphore of %d permits)", permits)
		}
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	cols := "\tTOKEN\tOWNER\tLEASE\tTTL LEFT\tAGE (REVISIONS)"
	if mixed {
		cols = "\tKIND" + cols
	}
	fmt.Fprintln(tw, cols)
	row := func(en inspectEntry) {
		label := holds
		if en.State != stateHolder {
			label = fmt.Sprintf("waiting #%d", en.Position)
		}
		ttl := "-"
		if en.TTLLeftSeconds >= 0 {
			ttl = fmt.Sprintf("%ds of %ds", en.TTLLeftSeconds, en.GrantedTTL)
		}
		if mixed {
			label += "\t" + en.Kind
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", label, en.Token, strings.TrimSpace(en.Owner), en.Lease, ttl, en.RevisionsAgo)
	}
	for _, en := range all {
		row(en)
	}
	tw.Flush()
	fmt.Fprintln(w, "(etcd keeps no timestamps: AGE counts cluster writes since the key was created; TTL LEFT is renewed while the holder's heartbeats arrive)")
}

// semaphoreValue splits the value of a semaphore's key ("permits=N owner",
// as lock.Semaphore stores it) into the number of permits and the owner;
// ok is false for a value of another lock's key (the owner alone).
func semaphoreValue(v []byte) (permits int, owner string, ok bool) {
	tag, rest, _ := strings.Cut(string(v), " ")
	n, err := strconv.Atoi(strings.TrimPrefix(tag, "permits="))
	if !strings.HasPrefix(tag, "permits=") || err != nil || n <= 0 {
		return 0, "", false
	}
	return n, rest, true
}
