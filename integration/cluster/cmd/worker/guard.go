package main

// The guards (-guard): the fenced register on a real resource, written
// through the guard users deploy, as an application writes it, beside a
// control on the same resource written without it.
//
// -guard pg: the register is the lock's row of PostgreSQL's table
// register (the harness creates it, env/guardserver_pg.go):
//
//   - a fenced read is pgfence's Guard.Do(tok, SELECT v): the guard admits
//     it as it admits any transaction, so it raises the mark (Event Raise);
//   - a fenced write is Guard.Do(tok, UPDATE register SET v; INSERT INTO
//     audit): the audit row commits with the write or not at all, the
//     resource-side record of what the guard admitted;
//   - the control is the same row's counter ctl, read, then written as
//     read + 1 after the fenced write, with plain statements.
//
// -guard redis: the register is the key "reg:<lock>", holding
// "<tok>:<v>" (env/guardserver_redis.go):
//
//   - a fenced read is redisfence's Guard.Admit(tok) (it raises the mark),
//     then a plain GET: redisfence has no guarded read, so the op is
//     recorded blind (Event Blind: only its admission is checked);
//   - a fenced write is Guard.Set(tok, "reg:<lock>", "<tok>:<v>"): the
//     check and the SET in one script, whose effects the server's AOF
//     logs (the resource-side record);
//   - the control is the key "ctl:<lock>", GET then SET read + 1.
//
// -guard s3: the register is the object "reg/<lock>" of an S3 bucket
// (versitygw, env/guardserver_s3.go), holding "<tok>:<v>":
//
//   - a fenced read is a plain GetObject: s3fence guards writes only (it
//     has no Admit and keeps no mark apart from the object), so the
//     worker checks the token the object was written under (its body's,
//     which must be its dlock-token metadata's) as Put would, refusing
//     its own lower token (stale); the read does not raise the mark;
//   - a fenced write is s3fence's Guard.Put(tok, "reg/<lock>",
//     "<tok>:<v>"): the token in the object's metadata, the PUT
//     conditional on the ETag Put read. Every admitted write is a version
//     of the object (the bucket is versioned): the resource-side record;
//   - the control is the object "ctl/<lock>", GetObject then PutObject
//     read + 1, unconditional.
//
// An op that returns fence.ErrStaleToken is "stale"; one that failed
// before anything was sent (no connection: the server is down or cut
// off) is "unsent"; any other error leaves its outcome unknown (Ret 0):
// a commit whose reply was lost may have committed.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dlock-go/dlock/contrib/grpcfence"
	"github.com/dlock-go/dlock/contrib/httpfence"
	"github.com/dlock-go/dlock/contrib/pgfence"
	"github.com/dlock-go/dlock/contrib/redisfence"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/integration/cluster/history"
)

var (
	guardName = flag.String("guard", "", `the guard in front of the fenced register: "pg" (PostgreSQL through contrib/pgfence), "redis" (contrib/redisfence), "http", "grpc", "s3" (contrib/s3fence); "": the resource's /fenced`)
	guardDSN  = flag.String("guard-dsn", "", "the guard's server (-guard pg: a postgres:// URL; -guard redis: host:port; -guard s3: http://access:secret@host:port/bucket)")
)

// store is a guard's resource: the fenced register through the guard,
// and the control without it.
type store interface {
	// read reads the fenced register through the guard. blind: the value
	// is read after the admission, in a separate command; admitErr is the
	// admission's error, valueErr the read's.
	read(ctx context.Context, lock string, tok uint64) (v int64, blind bool, admitErr, valueErr error)
	write(ctx context.Context, lock string, tok uint64, v int64) error // through the guard
	admit(ctx context.Context, lock string, tok uint64) error          // the guard's check alone
	plainWrite(ctx context.Context, lock string, tok uint64, v int64) error
	controlRead(ctx context.Context, lock string) (int64, error)
	controlWrite(ctx context.Context, lock string, v int64) error
	control() bool         // whether the control is on this store (http: the resource's unfenced register is)
	raises() bool          // whether an admitted read raises the guard's mark (s3fence guards writes only)
	unsent(err error) bool // nothing reached the server
	Close()
}

// openGuard opens the -guard's store (nil when there is none).
func openGuard(ctx context.Context, ttl time.Duration) (store, error) {
	switch *guardName {
	case "":
		return nil, nil
	case "pg":
		cfg, err := pgxpool.ParseConfig(*guardDSN)
		if err != nil {
			return nil, fmt.Errorf("-guard-dsn: %w", err)
		}
		cfg.MaxConns = 2
		pool, err := pgxpool.NewWithConfig(ctx, cfg) // connects lazily
		if err != nil {
			return nil, err
		}
		g, err := pgfence.New(pool)
		if err != nil {
			pool.Close()
			return nil, err
		}
		return &pgStore{pool: pool, guard: g}, nil
	case "redis":
		c := goredis.NewClient(&goredis.Options{
			Addr: *guardDSN, DialTimeout: time.Second, ReadTimeout: ttl, WriteTimeout: ttl,
			MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 2,
		})
		g, err := redisfence.New(c)
		if err != nil {
			c.Close()
			return nil, err
		}
		return &redisStore{c: c, guard: g}, nil
	case "http":
		return &httpStore{url: *guardDSN, c: &http.Client{Timeout: ttl, Transport: &httpfence.Transport{}}}, nil
	case "s3":
		return openS3(ctx, ttl)
	case "grpc":
		conn, err := grpc.NewClient(*guardDSN,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithUnaryInterceptor(grpcfence.UnaryClientInterceptor()))
		if err != nil {
			return nil, err
		}
		return &grpcStore{conn: conn}, nil
	}
	return nil, fmt.Errorf("-guard %q: want pg, redis, http, grpc, s3 or nothing", *guardName)
}

// pgStore is the fenced register and the control in PostgreSQL.
type pgStore struct {
	pool  *pgxpool.Pool
	guard *pgfence.Guard
}

func (s *pgStore) Close() { s.pool.Close() }

func (s *pgStore) read(ctx context.Context, lock string, tok uint64) (int64, bool, error, error) {
	var v int64
	err := s.guard.Do(ctx, fence.Token{Name: lock, Seq: tok}, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT v FROM register WHERE lock = $1`, lock).Scan(&v)
	})
	return v, false, err, nil
}

func (s *pgStore) write(ctx context.Context, lock string, tok uint64, v int64) error {
	return s.guard.Do(ctx, fence.Token{Name: lock, Seq: tok}, func(tx pgx.Tx) error { return pgWrite(ctx, tx, lock, tok, v) })
}

func (s *pgStore) admit(ctx context.Context, lock string, tok uint64) error {
	return s.guard.Admit(ctx, fence.Token{Name: lock, Seq: tok})
}

func (s *pgStore) plainWrite(ctx context.Context, lock string, tok uint64, v int64) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return pgWrite(ctx, tx, lock, tok, v) })
}

// pgWrite is the fenced write's statements: the register, and its audit
// row.
func pgWrite(ctx context.Context, tx pgx.Tx, lock string, tok uint64, v int64) error {
	if _, err := tx.Exec(ctx, `UPDATE register SET v = $2 WHERE lock = $1`, lock, v); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO audit (lock, tok, v, t) VALUES ($1, $2, $3, (extract(epoch FROM clock_timestamp()) * 1e9)::bigint)`,
		lock, int64(tok), v)
	return err
}

func (s *pgStore) controlRead(ctx context.Context, lock string) (int64, error) {
	var v int64
	err := s.pool.QueryRow(ctx, `SELECT ctl FROM register WHERE lock = $1`, lock).Scan(&v)
	return v, err
}

func (s *pgStore) controlWrite(ctx context.Context, lock string, v int64) error {
	_, err := s.pool.Exec(ctx, `UPDATE register SET ctl = $2 WHERE lock = $1`, lock, v)
	return err
}

func (s *pgStore) control() bool { return true }
func (s *pgStore) raises() bool  { return true }

// unsent: no connection could be made, or pgx says nothing was sent
// (pgconn.SafeToRetry).
func (s *pgStore) unsent(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || pgconn.SafeToRetry(err)
}

// redisStore is the fenced register and the control in Redis.
type redisStore struct {
	c     *goredis.Client
	guard *redisfence.Guard
}

func (s *redisStore) Close() { s.c.Close() }

func (s *redisStore) read(ctx context.Context, lock string, tok uint64) (int64, bool, error, error) {
	if err := s.admit(ctx, lock, tok); err != nil {
		return 0, true, err, nil
	}
	text, err := s.c.Get(ctx, "reg:"+lock).Result()
	if errors.Is(err, goredis.Nil) {
		return 0, true, nil, nil
	}
	if err != nil {
		return 0, true, nil, err
	}
	_, v, _ := strings.Cut(text, ":")
	n, err := strconv.ParseInt(v, 10, 64)
	return n, true, nil, err
}

func (s *redisStore) write(ctx context.Context, lock string, tok uint64, v int64) error {
	return s.guard.Set(ctx, fence.Token{Name: lock, Seq: tok}, "reg:"+lock, fmt.Sprintf("%d:%d", tok, v), 0)
}

func (s *redisStore) admit(ctx context.Context, lock string, tok uint64) error {
	return s.guard.Admit(ctx, fence.Token{Name: lock, Seq: tok})
}

func (s *redisStore) plainWrite(ctx context.Context, lock string, tok uint64, v int64) error {
	return s.c.Set(ctx, "reg:"+lock, fmt.Sprintf("%d:%d", tok, v), 0).Err()
}

func (s *redisStore) controlRead(ctx context.Context, lock string) (int64, error) {
	v, err := s.c.Get(ctx, "ctl:"+lock).Int64()
	if errors.Is(err, goredis.Nil) {
		return 0, nil
	}
	return v, err
}

func (s *redisStore) controlWrite(ctx context.Context, lock string, v int64) error {
	return s.c.Set(ctx, "ctl:"+lock, v, 0).Err()
}

func (s *redisStore) control() bool { return true }
func (s *redisStore) raises() bool  { return true }

// unsent: the dial failed.
func (s *redisStore) unsent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// httpStore is the resource's fenced register served behind
// httpfence.Middleware (cmd/resource -guard http): the token goes in the
// request's context, and httpfence.Transport sends it in its header.
// The control is the resource's unfenced register.
type httpStore struct {
	url string
	c   *http.Client
}

func (s *httpStore) Close() { s.c.CloseIdleConnections() }

func (s *httpStore) do(ctx context.Context, method, lock string, tok uint64, q url.Values) (int64, error) {
	q.Set("lock", lock)
	ctx = fence.NewContext(ctx, fence.Token{Name: lock, Seq: tok})
	// net/http sends a GET again on a new connection when a reused one
	// fails: a dial error then may follow a request the server applied (a
	// read raises the guard's mark). Only a request never written is
	// unsent.
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() { wrote.Store(true) }})
	req, err := http.NewRequestWithContext(ctx, method, s.url+"/guarded?"+q.Encode(), nil)
	if err != nil {
		return 0, err
	}
	resp, err := s.c.Do(req)
	if err != nil {
		if wrote.Load() {
			err = errors.Join(errSent, err)
		}
		return 0, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, err
	}
	text := strings.TrimSpace(string(body))
	switch resp.StatusCode {
	case http.StatusOK:
		return strconv.ParseInt(text, 10, 64)
	case http.StatusConflict:
		return 0, fmt.Errorf("%w: %s", fence.ErrStaleToken, text)
	}
	return 0, fmt.Errorf("HTTP %d: %s", resp.StatusCode, text)
}

func (s *httpStore) read(ctx context.Context, lock string, tok uint64) (int64, bool, error, error) {
	v, err := s.do(ctx, http.MethodGet, lock, tok, url.Values{})
	return v, false, err, nil
}

func (s *httpStore) write(ctx context.Context, lock string, tok uint64, v int64) error {
	_, err := s.do(ctx, http.MethodPost, lock, tok, url.Values{"v": {strconv.FormatInt(v, 10)}})
	return err
}

var errNoControl = errors.New("-guard http, grpc: the control is the resource's unfenced register")

func (s *httpStore) admit(context.Context, string, uint64) error { return errNoControl }
func (s *httpStore) plainWrite(context.Context, string, uint64, int64) error {
	return errNoControl
}
func (s *httpStore) controlRead(context.Context, string) (int64, error) { return 0, errNoControl }
func (s *httpStore) controlWrite(context.Context, string, int64) error  { return errNoControl }
func (s *httpStore) control() bool                                      { return false }
func (s *httpStore) raises() bool                                       { return true }

// errSent marks an error after the request was written (at least once).
var errSent = errors.New("the request was sent")

// unsent: the dial failed, and no earlier attempt was written.
func (s *httpStore) unsent(err error) bool {
	var op *net.OpError
	return !errors.Is(err, errSent) && errors.As(err, &op) && op.Op == "dial"
}

// grpcStore is the resource's register service behind grpcfence's
// interceptors (cmd/resource -guard grpc): the token goes in the call's
// context, and grpcfence's client interceptor sends it in its metadata
// and turns a stale-token status back into fence.ErrStaleToken. The
// control is the resource's unfenced register.
type grpcStore struct{ conn *grpc.ClientConn }

func (s *grpcStore) Close() { s.conn.Close() }

func (s *grpcStore) call(ctx context.Context, method, lock string, tok uint64, arg string) (int64, error) {
	ctx = fence.NewContext(ctx, fence.Token{Name: lock, Seq: tok})
	out := new(wrapperspb.Int64Value)
	if err := s.conn.Invoke(ctx, "/dlock.cluster.Register/"+method, wrapperspb.String(arg), out); err != nil {
		return 0, err
	}
	return out.GetValue(), nil
}

func (s *grpcStore) read(ctx context.Context, lock string, tok uint64) (int64, bool, error, error) {
	v, err := s.call(ctx, "Read", lock, tok, lock)
	return v, false, err, nil
}

func (s *grpcStore) write(ctx context.Context, lock string, tok uint64, v int64) error {
	_, err := s.call(ctx, "Write", lock, tok, fmt.Sprintf("%s=%d", lock, v))
	return err
}

func (s *grpcStore) admit(context.Context, string, uint64) error { return errNoControl }
func (s *grpcStore) plainWrite(context.Context, string, uint64, int64) error {
	return errNoControl
}
func (s *grpcStore) controlRead(context.Context, string) (int64, error) { return 0, errNoControl }
func (s *grpcStore) controlWrite(context.Context, string, int64) error  { return errNoControl }
func (s *grpcStore) control() bool                                      { return false }
func (s *grpcStore) raises() bool                                       { return true }

// unsent: gRPC does not say whether a failed call was sent.
func (s *grpcStore) unsent(error) bool { return false }

// guardFenced reads the fenced register through the guard, or writes v
// to it, and records the op.
func (u *use) guardFenced(read bool, v int64) (int64, bool) {
	lock, st := u.w.cfg.lock, u.w.guard
	ev := history.Event{G: u.g, Kind: history.Op, Tok: u.tok, Mode: u.mode, Reg: history.Fenced, Read: read, Raise: read && st.raises(), Result: "error"}
	if !read {
		ev.Value = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), u.w.cfg.ttl)
	defer cancel()
	var got int64
	var err, valueErr error
	ev.Call = history.Now()
	ev.T = ev.Call
	switch {
	case read:
		got, ev.Blind, err, valueErr = st.read(ctx, lock, u.tok)
	case u.w.cfg.plant == plantCheckAfterWrite:
		// The write lands first, on its own; the check comes after (its
		// error is the op's).
		_ = st.plainWrite(ctx, lock, u.tok, v)
		err = st.admit(ctx, lock, u.tok)
	default:
		err = st.write(ctx, lock, u.tok, v)
	}
	_, ok := u.record(ev, err, got)
	if valueErr != nil {
		ok = false // admitted, but the value is unknown: no write follows
	}
	return got, ok
}

// record fills ev from the op's outcome, records it, and returns the
// value read and whether the op succeeded.
func (u *use) record(ev history.Event, err error, got int64) (int64, bool) {
	switch {
	case err == nil:
		ev.Ret = history.Now()
		ev.Result = "ok"
		if ev.Read {
			ev.Value = got
		}
	case errors.Is(err, fence.ErrStaleToken):
		ev.Ret = history.Now()
		ev.Result = "stale"
	case u.w.guard.unsent(err):
		ev.Ret = history.Now()
		ev.Result = history.Unsent
		ev.Err = err.Error()
	default:
		ev.Err = err.Error() // outcome unknown: Ret 0
	}
	u.w.emit(ev)
	return got, ev.Result == "ok"
}

// controlRead reads the control's counter, without the guard.
func (u *use) controlRead() (int64, bool) {
	ev := history.Event{G: u.g, Kind: history.Op, Tok: u.tok, Mode: u.mode, Reg: history.Control, Read: true, Result: "error"}
	ctx, cancel := context.WithTimeout(context.Background(), u.w.cfg.ttl)
	defer cancel()
	ev.Call = history.Now()
	ev.T = ev.Call
	got, err := u.w.guard.controlRead(ctx, u.w.cfg.lock)
	return u.record(ev, err, got)
}

// controlWrite writes v to the control's counter, without the guard.
func (u *use) controlWrite(v int64) {
	ev := history.Event{G: u.g, Kind: history.Op, Tok: u.tok, Mode: u.mode, Reg: history.Control, Value: v, Result: "error"}
	ctx, cancel := context.WithTimeout(context.Background(), u.w.cfg.ttl)
	defer cancel()
	ev.Call = history.Now()
	ev.T = ev.Call
	u.record(ev, u.w.guard.controlWrite(ctx, u.w.cfg.lock, v), 0)
}

// plantCheckAfterWrite is the guard plant check-after-write (-guard): the
// fenced write is made on its own, without the guard, before the guard
// admits the token, as an application does that calls Admit and writes
// outside its transaction or script (the limit pgfence's and
// redisfence's docs name). A stale holder's write lands, then the check
// refuses it.
const plantCheckAfterWrite = "check-after-write"
