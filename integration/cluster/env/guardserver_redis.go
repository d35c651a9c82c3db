package env

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/history"
	goredis "github.com/redis/go-redis/v9"
)

// redisGuardPort is the guard's Redis server's port on the resource's
// host.
const redisGuardPort = 6380

// RedisGuard is a guard run's Redis server ("redis"): one redis-server in
// the resource's namespace, with its data in a temporary directory of
// its own, AOF on with appendfsync always (an acknowledged write
// survives a SIGKILL), AOF rewrites off, and a timestamp annotation per
// second. The workers write the fenced register through
// contrib/redisfence's Guard.Set, whose script's effects (the fence key,
// the register's key) the AOF logs in the order the server applied them:
// at the end the harness reads the register's writes from the AOF, the
// resource-side record of what the guard admitted.
//
// Keys, per lock L: the register "reg:L" holds "<tok>:<v>" (the token is
// in the value so that the AOF shows which token wrote it), the control
// "ctl:L" a counter, the fence key redisfence's ("dlock:fence:L").
type RedisGuard struct {
	Host *Host
	h    *Harness
	dir  string
	as   []string // setpriv, to run as the user redis

	serverProc
}

func (h *Harness) startRedisGuard(ctx context.Context, host *Host) (*RedisGuard, error) {
	dir, err := os.MkdirTemp("", "dlock-cluster-redis-")
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.cleanups = append(h.cleanups, func() { os.RemoveAll(dir) })
	h.mu.Unlock()
	rg := &RedisGuard{Host: host, h: h, dir: dir}
	// As the user redis, when there is one.
	if u, err := user.Lookup("redis"); err == nil {
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
		rg.as = []string{"setpriv", "--reuid=redis", "--regid=redis", "--init-groups"}
	}
	if err := rg.Start(ctx); err != nil {
		return nil, err
	}
	return rg, nil
}

// DSN is host:port.
func (rg *RedisGuard) DSN() string {
	return net.JoinHostPort(rg.Host.IP, strconv.Itoa(redisGuardPort))
}

// Start starts the server from its directory (after a kill: the AOF is
// replayed) and waits until it answers PING.
func (rg *RedisGuard) Start(ctx context.Context) error {
	p, err := StartProc(rg.Host, "redis-guard", filepath.Join(rg.h.Dir, "logs", "redis-guard.log"), nil, nil, append(slices.Clone(rg.as),
		"redis-server", "--bind", rg.Host.IP, "--port", strconv.Itoa(redisGuardPort), "--protected-mode", "no",
		"--dir", rg.dir, "--save", "", "--appendonly", "yes", "--appendfsync", "always",
		"--aof-timestamp-enabled", "yes", "--auto-aof-rewrite-percentage", "0", "--maxmemory-policy", "noeviction")...)
	if err != nil {
		return err
	}
	if err := rg.started(rg.h, p); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return waitPing(wctx, rg.DSN(), p)
}

// Collect writes audit.jsonl (the register's writes, from the AOF) and
// control.json (the control's counters).
func (rg *RedisGuard) Collect(ctx context.Context) error {
	c := goredis.NewClient(&goredis.Options{Addr: rg.DSN(), DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second, MaxRetries: -1})
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ctl := map[string]int64{}
	for _, wl := range rg.h.Cfg.Workloads {
		lock := "dlock-" + wl
		v, err := c.Get(cctx, "ctl:"+lock).Int64()
		if err != nil && !errors.Is(err, goredis.Nil) {
			return err
		}
		ctl[lock] = v
	}
	recs, err := readAOF(filepath.Join(rg.dir, "appendonlydir"))
	if err != nil {
		return fmt.Errorf("aof: %w", err)
	}
	return writeGuardRecords(rg.h.Dir, recs, ctl)
}

// readAOF reads the SETs of register keys ("reg:L" to "<tok>:<v>") from a
// Redis 7 multi-part AOF directory's incremental files, in the manifest's
// order, as Write records (T: the last timestamp annotation, to the
// second).
func readAOF(dir string) ([]history.Record, error) {
	manifest, err := os.ReadFile(filepath.Join(dir, "appendonly.aof.manifest"))
	if err != nil {
		return nil, err
	}
	type part struct {
		name string
		seq  int
	}
	var incr []part
	for _, line := range strings.Split(string(manifest), "\n") {
		f := strings.Fields(line)
		kv := map[string]string{}
		for i := 0; i+1 < len(f); i += 2 {
			kv[f[i]] = f[i+1]
		}
		if kv["type"] == "i" {
			seq, _ := strconv.Atoi(kv["seq"])
			incr = append(incr, part{kv["file"], seq})
		}
	}
	slices.SortFunc(incr, func(a, b part) int { return a.seq - b.seq })
	var out []history.Record
	for _, p := range incr {
		f, err := os.Open(filepath.Join(dir, p.name))
		if err != nil {
			return nil, err
		}
		recs, err := aofWrites(bufio.NewReader(f))
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		out = append(out, recs...)
	}
	return out, nil
}

// aofWrites parses one AOF file: RESP arrays of bulk strings, and "#..."
// annotation lines. A torn last command (a kill mid-write) ends it.
func aofWrites(r *bufio.Reader) ([]history.Record, error) {
	var out []history.Record
	var ts int64
	for {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0:
			continue
		case line[0] == '#':
			if s, ok := strings.CutPrefix(string(line), "#TS:"); ok {
				sec, _ := strconv.ParseInt(s, 10, 64)
				ts = sec * int64(time.Second)
			}
			continue
		case line[0] != '*':
			return nil, fmt.Errorf("unexpected %q", line)
		}
		n, err := strconv.Atoi(string(line[1:]))
		if err != nil {
			return nil, err
		}
		args := make([]string, 0, n)
		for range n {
			hdr, err := r.ReadBytes('\n')
			if err != nil {
				return out, nil // torn
			}
			size, err := strconv.Atoi(string(bytes.TrimRight(hdr, "\r\n")[1:]))
			if err != nil {
				return nil, err
			}
			buf := make([]byte, size+2)
			if _, err := io.ReadFull(r, buf); err != nil {
				return out, nil // torn
			}
			args = append(args, string(buf[:size]))
		}
		if len(args) >= 3 && strings.EqualFold(args[0], "SET") && strings.HasPrefix(args[1], "reg:") {
			tok, v, ok := strings.Cut(args[2], ":")
			t, err1 := strconv.ParseUint(tok, 10, 64)
			val, err2 := strconv.ParseInt(v, 10, 64)
			if !ok || err1 != nil || err2 != nil {
				return nil, fmt.Errorf("register %s holds %q", args[1], args[2])
			}
			out = append(out, history.Record{Kind: history.Write, Lock: strings.TrimPrefix(args[1], "reg:"), T: ts, Tok: t, Value: val})
		}
	}
}
