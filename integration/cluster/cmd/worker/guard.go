package main

// The guards (-guard): the fenced register on a real resource, written
// through the guard users deploy, as an application writes it. With
// -guard pg the register is the row of the lock in PostgreSQL's table
// register (the harness creates it, pg.go), and:
//
//   - a fenced read is pgfence's Guard.Do(tok, SELECT v): the guard admits
//     it as it admits any transaction, so it raises the mark (Event Raise);
//   - a fenced write is Guard.Do(tok, UPDATE register SET v; INSERT INTO
//     audit): the audit row commits with the write or not at all, the
//     resource-side record of what the guard admitted;
//   - the control is the same row's counter ctl, read, then written as
//     read + 1 after the fenced write, with plain statements and no guard.
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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock/contrib/pgfence"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/integration/cluster/history"
)

var (
	guardName = flag.String("guard", "", `the guard in front of the fenced register: "pg" (PostgreSQL through contrib/pgfence); "": the resource's /fenced`)
	guardDSN  = flag.String("guard-dsn", "", "the guard's server (-guard pg: a postgres:// URL)")
)

// pgStore is the fenced register and the control in PostgreSQL.
type pgStore struct {
	pool  *pgxpool.Pool
	guard *pgfence.Guard
}

// openGuard opens the -guard's store (nil when there is none).
func openGuard(ctx context.Context) (*pgStore, error) {
	switch *guardName {
	case "":
		return nil, nil
	case "pg":
	default:
		return nil, fmt.Errorf("-guard %q: want pg or nothing", *guardName)
	}
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
}

func (s *pgStore) Close() { s.pool.Close() }

// pgFenced reads the fenced register through the guard, or writes v to
// it (with its audit row), and records the op.
func (u *use) pgFenced(read bool, v int64) (int64, bool) {
	lock := u.w.cfg.lock
	ev := history.Event{G: u.g, Kind: history.Op, Tok: u.tok, Mode: u.mode, Reg: history.Fenced, Read: read, Raise: read, Result: "error"}
	if !read {
		ev.Value = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), u.w.cfg.ttl)
	defer cancel()
	tok := fence.Token{Name: lock, Seq: u.tok}
	var got int64
	planted := !read && u.w.cfg.plant == plantCheckAfterWrite
	ev.Call = history.Now()
	ev.T = ev.Call
	if planted {
		// The write lands first, in a transaction of its own; the check
		// comes after (its error is the op's).
		_ = pgx.BeginFunc(ctx, u.w.pg.pool, func(tx pgx.Tx) error { return pgWrite(ctx, tx, lock, u.tok, v) })
	}
	err := u.w.pg.guard.Do(ctx, tok, func(tx pgx.Tx) error {
		switch {
		case read:
			return tx.QueryRow(ctx, `SELECT v FROM register WHERE lock = $1`, lock).Scan(&got)
		case planted:
			return nil
		}
		return pgWrite(ctx, tx, lock, u.tok, v)
	})
	return u.pgRecord(ev, err, got)
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

// pgRecord fills ev from the op's outcome, records it, and returns the
// value read and whether the op succeeded.
func (u *use) pgRecord(ev history.Event, err error, got int64) (int64, bool) {
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
	case unsent(err):
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
	var got int64
	ev.Call = history.Now()
	ev.T = ev.Call
	err := u.w.pg.pool.QueryRow(ctx, `SELECT ctl FROM register WHERE lock = $1`, u.w.cfg.lock).Scan(&got)
	return u.pgRecord(ev, err, got)
}

// controlWrite writes v to the control's counter, without the guard.
func (u *use) controlWrite(v int64) {
	ev := history.Event{G: u.g, Kind: history.Op, Tok: u.tok, Mode: u.mode, Reg: history.Control, Value: v, Result: "error"}
	ctx, cancel := context.WithTimeout(context.Background(), u.w.cfg.ttl)
	defer cancel()
	ev.Call = history.Now()
	ev.T = ev.Call
	_, err := u.w.pg.pool.Exec(ctx, `UPDATE register SET ctl = $2 WHERE lock = $1`, u.w.cfg.lock, v)
	u.pgRecord(ev, err, 0)
}

// plantCheckAfterWrite is the guard plant check-after-write (-guard pg):
// the fenced write is committed in a transaction of its own before the
// guard admits the token, as an application does that calls Admit and
// writes outside its transaction (pgfence's doc names that as its limit).
// A stale holder's write lands, then the check refuses it.
const plantCheckAfterWrite = "check-after-write"

// unsent tells whether err shows that nothing reached the server: no
// connection could be made, or pgx says so (pgconn.SafeToRetry).
func unsent(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || pgconn.SafeToRetry(err)
}
