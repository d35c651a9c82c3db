package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/contrib/cmd/dlock/internal/capacity"
)

// Exit codes shared by every subcommand (run also passes on its child's).
const (
	exitOK       = 0
	exitError    = 1 // a runtime error: unreachable etcd, lock not acquired in time…
	exitUsage    = 2 // bad flags or arguments
	exitLockLost = 3 // the lock (or leadership) was lost while held
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *env, args []string) error
}

var commands = []command{
	{"demo", "replay a paused holder: its stale write (unfenced, fenced) and its payment (without, with the intent journal), on embedded etcd", runDemo},
	{"run", "run a command while holding a lock; its token is in $DLOCK_TOKEN", runRun},
	{"elect", "campaign for leadership, or observe an election's leaders", runElect},
	{"inspect", "show a lock's holder and wait queue", runInspect},
	{"bench", "measure acquire latency, handoff latency and throughput per backend", runBench},
	{"check-fence", "check that an S3-compatible store honours the conditional writes fencing needs", runCheckFence},
	{"version", "print dlock's version: module version, Go version and VCS revision", runVersion},
}

// env is what a subcommand talks to: its output streams and environment.
// Tests of the binary see exactly what a user sees.
type env struct {
	stdout, stderr io.Writer
	getenv         func(key string) string
}

func main() {
	if capacity.IsWorker() { // re-executed by bench --capacity as a load worker
		os.Exit(capacity.WorkerMain())
	}
	// go-redis logs dial failures to stderr on its own; errors reach the
	// user through report, as one line, instead.
	goredis.SetLogger(nopLogger{})
	os.Exit(mainExit(os.Args[1:], &env{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}))
}

// nopLogger discards go-redis's log lines.
type nopLogger struct{}

func (nopLogger) Printf(context.Context, string, ...any) {}

// mainExit runs the subcommand named by args[0] and returns the process's
// exit code. Errors are printed as one line: "dlock <cmd>: <error>". Help
// asked for (--help, help) goes to stdout; usage errors go to stderr.
func mainExit(args []string, e *env) int {
	if len(args) == 0 {
		usage(e.stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(e.stdout)
		return exitOK
	case "help":
		return help(e, args[1:])
	case "-version", "--version":
		args = append([]string{"version"}, args[1:]...)
	}
	c, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(e.stderr, "dlock: unknown command %q (try: dlock --help)\n", args[0])
		return exitUsage
	}
	// The first SIGINT or SIGTERM cancels ctx; subcommands decide what
	// that means (run forwards it to its child).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return report(e, c.name, c.run(ctx, e, args[1:]))
}

// help runs "dlock help [COMMAND]": the overview, or COMMAND's --help.
func help(e *env, args []string) int {
	switch {
	case len(args) == 0:
		usage(e.stdout)
		return exitOK
	case len(args) > 1:
		fmt.Fprintf(e.stderr, "dlock help: want at most one command; got %d (try: dlock --help)\n", len(args))
		return exitUsage
	}
	if _, ok := lookup(args[0]); !ok {
		fmt.Fprintf(e.stderr, "dlock help: unknown command %q (try: dlock --help)\n", args[0])
		return exitUsage
	}
	return mainExit([]string{args[0], "--help"}, e)
}

// lookup returns the subcommand called name.
func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// report prints err as one line and returns the exit code it stands for.
func report(e *env, name string, err error) int {
	var ex *codeError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ex):
		if ex.msg != "" {
			fmt.Fprintf(e.stderr, "dlock %s: %s\n", name, oneLine(ex.msg))
		}
		return ex.code
	}
	fmt.Fprintf(e.stderr, "dlock %s: %s\n", name, oneLine(err.Error()))
	return exitError
}

// codeError is an error that carries an exit code; an empty msg prints
// nothing (the subcommand already said what happened).
type codeError struct {
	code int
	msg  string
}

func (e *codeError) Error() string { return e.msg }

func exitWith(code int, format string, args ...any) error {
	return &codeError{code: code, msg: fmt.Sprintf(format, args...)}
}

// usageError reports bad flags or arguments (exit code 2).
func usageError(format string, args ...any) error {
	return exitWith(exitUsage, format+" (see --help)", args...)
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func usage(w io.Writer) {
	fmt.Fprint(w, `dlock: distributed locks that stay safe when a holder pauses.

Usage:
  dlock <command> [flags] [args]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Run "dlock help <command>" (or "dlock <command> --help") for a command's flags.
$DLOCK_DSN is the default of --dsn (etcd://, etcds:// for TLS, redis://, ...).
Start here: dlock demo
`)
}

// flagSet is a subcommand's flags, with the help text printed by --help.
type flagSet struct {
	*flag.FlagSet
	help func()
}

// newFlagSet returns a flag set that reports errors instead of exiting or
// printing them (report prints them, on one line) and prints its help
// (synopsis, description, flags) to e.stdout on --help: help asked for is
// output, not an error.
func newFlagSet(e *env, name, synopsis, description string) *flagSet {
	fs := flag.NewFlagSet("dlock "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	help := func() {
		fmt.Fprintf(e.stdout, "Usage: %s\n\n%s\n", strings.TrimSpace("dlock "+name+" "+synopsis), strings.TrimSpace(description))
		if hasFlags(fs) {
			fmt.Fprint(e.stdout, "\nFlags:\n")
			fs.SetOutput(e.stdout)
			fs.PrintDefaults()
		}
		fs.SetOutput(io.Discard)
	}
	return &flagSet{FlagSet: fs, help: help}
}

// parse parses args; with interleave, flags may also follow positional
// arguments (up to a "--"). It returns the positional arguments.
func parse(fs *flagSet, args []string, interleave bool) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.help()
				return nil, err
			}
			return nil, flagError(fs, err)
		}
		rest := fs.Args()
		if !interleave || len(rest) == 0 {
			return append(pos, rest...), nil
		}
		// flag stops at the first non-flag or after "--": tell them apart.
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// hasFlags reports whether fs defines any flag.
func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// badValue matches the flag package's error for a value its flag's Set
// refused, e.g. `invalid value "abc" for flag -ttl: parse error`.
var badValue = regexp.MustCompile(`^invalid (?:boolean )?value (".*") for (?:flag )?-(\S+): (.*)$`)

// flagError returns the usage error for err, a flag parse error. A value
// the flag refused is reported with the flag and, where the flag package
// says only "parse error", what was wanted: `--ttl "abc": not a duration
// (e.g. 10s)`.
func flagError(fs *flagSet, err error) error {
	m := badValue.FindStringSubmatch(err.Error())
	if m == nil {
		return usageError("%v", err)
	}
	value, name, why := m[1], m[2], m[3]
	var typed any
	if f := fs.Lookup(name); f != nil {
		if g, ok := f.Value.(flag.Getter); ok {
			typed = g.Get()
		}
	}
	if why == "parse error" {
		switch typed.(type) {
		case time.Duration:
			why = "not a duration (e.g. 10s, 1m30s)"
		case int:
			why = "not a whole number (e.g. 4)"
		case bool:
			why = "not a boolean (true or false)"
		}
	}
	return usageError("--%s %s: %s", name, value, why)
}

// parseNoArgs parses args for a subcommand that takes flags only.
func parseNoArgs(fs *flagSet, args []string) error {
	pos, err := parse(fs, args, false)
	if err == nil && len(pos) > 0 {
		err = usageError("unexpected argument %q", pos[0])
	}
	return err
}
