//go:build race

package main

// Under "go test -race", the binary under test is built with -race too.
func init() { buildFlags = append(buildFlags, "-race") }
