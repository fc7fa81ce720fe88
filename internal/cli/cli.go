// Package cli holds compactor's subcommands and is its composition root: the engine, the
// pipeline and the summarizers are put together here. Each subcommand lives in its own
// file and registers itself with register; cmd/compactor and cmd/enqueue only call Main
// and MainEnqueue.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"syscall"
)

// Exit codes, for every command (docs/architecture.md, "Exit codes"): 0 done (a skip with
// its reason is done), 1 failed, 2 bad usage, bad input or bad configuration.
const (
	ExitOK     = 0
	ExitFailed = 1
	ExitBadUse = 2
)

// Env is what a subcommand may touch: its arguments and standard streams.
type Env struct {
	Args   []string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
	// Prog is the command as invoked, for usage lines and messages ("compactor plan",
	// "enqueue"); Run sets it.
	Prog string

	// onFlagSet, when set, is told of every FlagSet the command creates (Describe).
	onFlagSet func(fs *flag.FlagSet, usage, description string)
	// signals: this is the process's own command line (Main), whose signals it may take
	// (run reloads on SIGHUP); a command run in process by a test does not.
	signals bool
}

func (env *Env) prog() string {
	if env.Prog == "" {
		return "compactor"
	}
	return env.Prog
}

// Command is one subcommand.
type Command struct {
	Name    string
	Summary string
	Run     func(ctx context.Context, env *Env) error
}

// commands is the registry: a command's file adds it with register in its init.
var commands = map[string]*Command{}

func register(c *Command) {
	if _, dup := commands[c.Name]; dup {
		panic("cli: command " + c.Name + " registered twice")
	}
	commands[c.Name] = c
}

// UsageError is an error caused by the command line, an input file or the configuration;
// it exits 2. When usage is set (a flag error), a line saying how to see the usage follows
// the error on stderr.
type UsageError struct {
	Err   error
	usage func(io.Writer)
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usageErrorf(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// ExitError carries an explicit exit code (for example enqueue --wait on a failed job).
// An ExitError without Err prints nothing: the command already said what happened.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit %d", e.Code)
	}
	return e.Err.Error()
}
func (e *ExitError) Unwrap() error { return e.Err }

// Main runs the compactor command line and returns the process exit code.
func Main(args []string) int {
	env := &Env{Args: args, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, signals: true}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, env)
}

// MainEnqueue runs the enqueue command line (cmd/enqueue): `compactor enqueue`'s code
// under the program name enqueue.
func MainEnqueue(args []string) int {
	env := &Env{Args: args, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return RunEnqueue(ctx, env)
}

// RunEnqueue is MainEnqueue with its environment given. `enqueue version` prints the
// version (a session file called "version" is ./version).
func RunEnqueue(ctx context.Context, env *Env) int {
	if len(env.Args) == 1 && (env.Args[0] == "version" || env.Args[0] == "--version") {
		fmt.Fprintln(env.Stdout, "enqueue", Version())
		return ExitOK
	}
	sub := *env
	sub.Prog = "enqueue"
	return exitCode(env.Stderr, sub.Prog, commands["enqueue"].Run(ctx, &sub))
}

// Run dispatches env.Args (without the program name) to a subcommand.
func Run(ctx context.Context, env *Env) int {
	if len(env.Args) == 0 {
		fmt.Fprintln(env.Stderr, "compactor: no command given")
		fmt.Fprintln(env.Stderr)
		printUsage(env.Stderr)
		return ExitBadUse
	}
	switch env.Args[0] {
	case "-h", "--help", "help":
		if len(env.Args) == 2 && env.Args[0] == "help" && commands[env.Args[1]] != nil {
			return Run(ctx, &Env{Args: []string{env.Args[1], "--help"}, Stdin: env.Stdin, Stdout: env.Stdout, Stderr: env.Stderr, Getenv: env.Getenv})
		}
		printUsage(env.Stdout)
		return ExitOK
	case "--version":
		env.Args[0] = "version"
	}
	c, ok := commands[env.Args[0]]
	if !ok {
		fmt.Fprintf(env.Stderr, "compactor: unknown command %q\n\n", env.Args[0])
		printUsage(env.Stderr)
		return ExitBadUse
	}
	tuneGC(c.Name, env.Getenv)
	sub := *env
	sub.Args = env.Args[1:]
	sub.Prog = "compactor " + c.Name
	return exitCode(env.Stderr, sub.Prog, c.Run(ctx, &sub))
}

// shortLivedGCPercent is the collector's target for the one-shot commands. They read a file,
// count, print and exit, with a heap of a few tens of MB; at the default (100) a cold
// `compactor plan` of a 7.6 MiB session spends a quarter of its time collecting garbage,
// most of it assists, while the peak RSS is no lower than at 400 (measured on this project's
// machine: 65.6 ms at 100, 48.9 ms at 400, 37 MB either way; docs/performance.md). The
// long-running service keeps Go's default.
const shortLivedGCPercent = 400

// tuneGC sets the collector's target for a one-shot command, unless GOGC says otherwise.
func tuneGC(command string, getenv func(string) string) {
	if command == "run" || getenv == nil || getenv("GOGC") != "" {
		return
	}
	debug.SetGCPercent(shortLivedGCPercent)
}

// exitCode prints err (first, on stderr; then the usage for a flag error) and returns the
// exit code: ExitError's own, 2 for a UsageError, 0 for help, 1 for anything else.
func exitCode(stderr io.Writer, prog string, err error) int {
	if err == nil || errors.Is(err, errHelp) {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", prog, ee.Err)
		}
		return ee.Code
	}
	fmt.Fprintf(stderr, "%s: %v\n", prog, err)
	var ue *UsageError
	if errors.As(err, &ue) {
		if ue.usage != nil {
			// A flag error: one line on where the flags are, not the whole usage.
			fmt.Fprintf(stderr, "Run '%s --help' for its flags and examples.\n", prog)
		}
		return ExitBadUse
	}
	return ExitFailed
}

// version is set at build time: go build -ldflags "-X github.com/compactor-dev/compactor/internal/cli.version=v1.2.3"
// (the Makefile stamps `git describe`).
var version = ""

// Version is the version stamped at build time, else the module version a `go install
// module@version` recorded, else the VCS revision Go recorded for a build in a checkout,
// else "dev".
func Version() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		return "dev-" + rev + dirty
	}
	return "dev"
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "compactor compacts and summarizes Pi coding-agent sessions in the background.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: compactor <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-15s %s\n", n, commands[n].Summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'compactor <command> --help' for a command's flags. Exit codes: 0 done (a skip")
	fmt.Fprintln(w, "with its reason is done), 1 failed, 2 bad usage, input or configuration.")
}

func init() {
	register(&Command{Name: "version", Summary: "print the version", Run: func(ctx context.Context, env *Env) error {
		fs := newFlagSet(env, "version", "", "Print compactor's version: the release it was built from, or the commit.")
		args, err := fs.parse(env.Args)
		if err != nil {
			return err
		}
		if len(args) > 0 {
			return usageErrorf("unexpected argument %q", args[0])
		}
		fmt.Fprintln(env.Stdout, "compactor", Version())
		return nil
	}})
}
