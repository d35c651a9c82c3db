//go:build linux

package guardian

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestLookPathAsOSExec: the guardian's lookPath finds what os/exec's
// Command finds, and fails with its messages.
func TestLookPathAsOSExec(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "dlock-test-exe")
	require.NoError(t, os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "not-exec"), nil, 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "a-dir"), 0o755))
	rel, err := filepath.Rel(mustGetwd(t), dir)
	require.NoError(t, err)

	for _, path := range []string{
		os.Getenv("PATH"),
		dir,
		"/nonexistent:" + dir + ":",
		":" + dir,
		rel, // a relative entry: refused
		"",
	} {
		t.Setenv("PATH", path)
		for _, name := range []string{"sh", "dlock-test-exe", "not-exec", "a-dir", "no-such-command", "/bin/sh", "./x"} {
			want := exec.Command(name) // what run's exec.Command did
			got, err := lookPath(name)
			if want.Err != nil {
				assert.EqualError(t, err, want.Err.Error(), "PATH=%q, name %q", path, name)
				continue
			}
			assert.NoError(t, err, "PATH=%q, name %q", path, name)
			assert.Equal(t, want.Path, got, "PATH=%q, name %q", path, name)
		}
	}
}

func mustGetwd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	require.NoError(t, err)
	return wd
}

func TestItoaAtoi(t *testing.T) {
	for _, n := range []int{0, 1, 9, 10, 4194304, 1<<62 - 1} {
		s := itoa(n)
		assert.Equal(t, strconv.Itoa(n), s)
		if len(s) <= 18 {
			got, ok := atoi(s)
			assert.True(t, ok, s)
			assert.Equal(t, n, got)
		}
	}
	for _, s := range []string{"", "-1", "1a", " 1", "self", "1234567890123456789"} {
		_, ok := atoi(s)
		assert.False(t, ok, "%q", s)
	}
}

func TestParseStat(t *testing.T) {
	for stat, want := range map[string]procStat{
		"4242 (sleep) S 4241 4240 4240 0 -1 4194304 95 0 0 0\n": {ppid: 4241, pgrp: 4240},
		"7 (x) (y) Z 1 7 7 0 -1 4194316 0 0 0 0\n":              {ppid: 1, pgrp: 7, zombie: true},
		"8 (a b)) X 2 3 3 0\n":                                  {ppid: 2, pgrp: 3, zombie: true},
	} {
		got, ok := parseStat([]byte(stat))
		assert.True(t, ok, stat)
		assert.Equal(t, want, got, stat)
	}
	for _, stat := range []string{"", "9 (x)", "9 (x) S", "9 (x) S x 1"} {
		_, ok := parseStat([]byte(stat))
		assert.False(t, ok, "%q", stat)
	}
}

// TestDescendants starts a shell whose child is a sleep, and finds both,
// with their parents and process group, from this process.
func TestDescendants(t *testing.T) {
	cmd := exec.Command("sh", "-c", `sleep 60 & echo $!; wait`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // sh's group: sh and sleep
		cmd.Wait()
	})
	var sleepPID int
	_, err = fmt.Fscan(out, &sleepPID) // sleep is forked
	require.NoError(t, err)

	self := os.Getpid()
	procs, err := descendants(self)
	require.NoError(t, err)
	sh, ok := procs[cmd.Process.Pid]
	require.True(t, ok, "sh in %v", procs)
	assert.Equal(t, self, sh.ppid)
	assert.False(t, sh.zombie)
	sleep, ok := procs[sleepPID]
	require.True(t, ok, "sleep in %v", procs)
	assert.Equal(t, cmd.Process.Pid, sleep.ppid)
	assert.Equal(t, cmd.Process.Pid, sh.pgrp)
	assert.Equal(t, sh.pgrp, sleep.pgrp)
}
