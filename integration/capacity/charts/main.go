// Command charts draws the capacity figures of issue 37 from the JSON
// document that `dlock bench --capacity --json` writes: four SVG charts,
// and with -markdown the six tables of BENCHMARKS.md's "Capacity" section.
// Run it from the repository's root:
//
//	go run ./integration/capacity/charts -in capacity.json                          # SVGs into docs/capacity/
//	go run ./integration/capacity/charts -in capacity.json -markdown                 # and the tables on stdout
//	go run ./integration/capacity/charts -in capacity.json -splice BENCHMARKS.md     # and the tables into BENCHMARKS.md
//
// -out "" draws no chart. -splice replaces the text between the two marker
// lines (capacity.BeginMarker, capacity.EndMarker) in the file. The output
// depends on the document only, so regenerating gives the same bytes.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/dlock-go/dlock/integration/capacity"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "charts:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("charts", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "", "the JSON document of `dlock bench --capacity --json` (required)")
	out := fs.String("out", "docs/capacity", `the directory for the SVG charts ("" for none)`)
	md := fs.Bool("markdown", false, "print the six markdown tables on stdout")
	splice := fs.String("splice", "", "a markdown file whose generated tables (between the capacity markers) to replace")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *in == "" || fs.NArg() > 0 {
		return errors.New("usage: charts -in FILE.json [-out DIR] [-markdown] [-splice BENCHMARKS.md]")
	}
	f, err := os.Open(*in)
	if err != nil {
		return err
	}
	rep, err := capacity.Read(*in, f)
	f.Close()
	if err != nil {
		return err
	}
	if *out != "" {
		paths, err := rep.WriteCharts(*out)
		if err != nil {
			return err
		}
		for _, p := range paths {
			fmt.Fprintln(stderr, "wrote", p)
		}
	}
	var tables bytes.Buffer
	if err := rep.Markdown(&tables); err != nil {
		return err
	}
	if *md {
		if _, err := stdout.Write(tables.Bytes()); err != nil {
			return err
		}
	}
	if *splice != "" {
		doc, err := os.ReadFile(*splice)
		if err != nil {
			return err
		}
		s, err := capacity.Splice(string(doc), tables.String())
		if err != nil {
			return fmt.Errorf("%s: %w", *splice, err)
		}
		if err := os.WriteFile(*splice, []byte(s), 0o644); err != nil {
			return err
		}
		fmt.Fprintln(stderr, "updated", *splice)
	}
	return nil
}
