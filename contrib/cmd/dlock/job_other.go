//go:build !linux

package main

// startJob starts spec's CMD directly: only Linux has a guardian (see
// package guardian).
func startJob(spec jobSpec) (job, error) { return startDirect(spec) }
