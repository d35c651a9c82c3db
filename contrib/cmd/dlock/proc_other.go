//go:build !unix

package main

import (
	"os"
	"os/exec"
)

// setGroup does nothing here: on systems other than Unix (Windows), CMD
// gets no process group of its own and no parent-death signal, so a CMD
// outlives a dlock that is killed.
func setGroup(cmd *exec.Cmd) {}

func signalGroup(cmd *exec.Cmd, sig os.Signal) error { return cmd.Process.Signal(sig) }

func signalCode(state *os.ProcessState) int { return -1 }
