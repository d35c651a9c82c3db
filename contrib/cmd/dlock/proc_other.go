//go:build !unix

package main

import (
	"os"
	"os/exec"
)

func setGroup(cmd *exec.Cmd) {}

func signalGroup(cmd *exec.Cmd, sig os.Signal) error { return cmd.Process.Signal(sig) }

func signalCode(state *os.ProcessState) int { return -1 }
