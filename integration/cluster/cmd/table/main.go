// Command table prints the table of saved cluster runs: the checkers run
// again on each run's histories (so a fixed checker can judge an old run),
// one report per directory.
//
//	go run ./cmd/table DIR...
//	go run ./cmd/table -campaign DIR...   # one row per run: the campaign's table
//
// DIR is a run's artifacts directory (DLOCK_ARTIFACTS/<test>-<time>, or
// the one a failed test names). It exits 1 if any run fails a checker.
package main

import (
	"fmt"
	"os"

	"github.com/dlock-go/dlock/integration/cluster"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: table DIR...")
		os.Exit(2)
	}
	if os.Args[1] == "-campaign" {
		table, passed, err := cluster.CampaignTable(os.Args[2:])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Print(table)
		if !passed {
			os.Exit(1)
		}
		return
	}
	code := 0
	for _, dir := range os.Args[1:] {
		rep, err := cluster.Recheck(dir)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", dir, err)
			code = 1
			continue
		}
		fmt.Print(rep)
		if len(rep.Failures) > 0 {
			code = 1
		}
	}
	os.Exit(code)
}
