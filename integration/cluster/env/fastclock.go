package env

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// FastClockEnv is the environment variable from which the fast-clock shim
// reads its factor.
const FastClockEnv = "DLOCK_FAST_CLOCK"

// fastClockSrc is an LD_PRELOAD shim that runs a process's clocks (all
// but the CPU-time ones) at DLOCK_FAST_CLOCK times the real rate from the
// process's first reading of each: clock_gettime, gettimeofday and time.
// It reads the real clock with the raw system call (no dlsym, no
// allocation), so it works from the first call, even from a malloc's
// initialisation (which is where libfaketime hangs redis-server 7.0).
const fastClockSrc = `#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static double factor;      /* 0 until read */
static long long base[8];  /* per clock: its first real reading (ns) */

static long long scale(clockid_t id, long long now) {
	if (factor == 0) {
		const char *e = getenv("` + FastClockEnv + `");
		double f = e ? strtod(e, NULL) : 1;
		factor = f > 0 ? f : 1;
	}
	long long zero = 0;
	__atomic_compare_exchange_n(&base[id], &zero, now, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	long long b = __atomic_load_n(&base[id], __ATOMIC_SEQ_CST);
	return b + (long long)((double)(now - b) * factor);
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	if (syscall(SYS_clock_gettime, id, ts) != 0)
		return -1;
	if (id < 0 || id >= 8 || id == CLOCK_PROCESS_CPUTIME_ID || id == CLOCK_THREAD_CPUTIME_ID)
		return 0;
	long long t = scale(id, ts->tv_sec * 1000000000LL + ts->tv_nsec);
	ts->tv_sec = t / 1000000000LL;
	ts->tv_nsec = t % 1000000000LL;
	return 0;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
		return -1;
	tv->tv_sec = ts.tv_sec;
	tv->tv_usec = ts.tv_nsec / 1000;
	return 0;
}

time_t time(time_t *t) {
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
		return -1;
	if (t)
		*t = ts.tv_sec;
	return ts.tv_sec;
}
`

// BuildFastClock compiles the fast-clock shim with gcc into dir and
// returns the path of the shared object. A process started with
// fastClockEnv(path, f) runs its clocks f times fast.
func BuildFastClock(dir string) (string, error) {
	if _, err := exec.LookPath("gcc"); err != nil {
		return "", errors.New("cluster: gcc not found (the fast-clock shim is built with it)")
	}
	src := filepath.Join(dir, "fastclock.c")
	so := filepath.Join(dir, "fastclock.so")
	if err := os.WriteFile(src, []byte(fastClockSrc), 0o644); err != nil {
		return "", err
	}
	out, err := exec.Command("gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o", so, src).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("cluster: build the fast-clock shim: %v\n%s", err, out)
	}
	return so, nil
}

// fastClockEnv is the environment that runs a process under the shim so
// at factor.
func fastClockEnv(so string, factor float64) []string {
	return []string{"LD_PRELOAD=" + so, FastClockEnv + "=" + strconv.FormatFloat(factor, 'f', -1, 64)}
}
