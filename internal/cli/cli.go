// Package cli holds compactor's subcommands. Each subcommand lives in its own file and
// registers itself in commands; cmd/compactor/main.go only calls Main.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// Exit codes (design §8): 0 done, 1 failed, 2 bad usage or bad input.
const (
	ExitOK      = 0
	ExitFailed  = 1
	ExitBadUse  = 2
	ExitBadFile = 2
)

// Env is what a subcommand may touch: its arguments and standard streams.
type Env struct {
	Args   []string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string

	// onFlagSet, when set, is told of every FlagSet the command creates (Describe).
	onFlagSet func(fs *flag.FlagSet, usage, description string)
}

// Command is one subcommand.
type Command struct {
	Name    string
	Summary string
	Run     func(ctx context.Context, env *Env) error
}

var commands = map[string]*Command{}

func register(c *Command) { commands[c.Name] = c }

// UsageError is an error caused by the command line or by an input file; it exits 2.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usageErrorf(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// ExitError carries an explicit exit code (for example enqueue --wait on a failed job).
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// Main runs the compactor command line and returns the process exit code.
func Main(args []string) int {
	env := &Env{Args: args, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, env)
}

// Run dispatches env.Args (without the program name) to a subcommand.
func Run(ctx context.Context, env *Env) int {
	if len(env.Args) == 0 || env.Args[0] == "-h" || env.Args[0] == "--help" || env.Args[0] == "help" {
		printUsage(env.Stdout)
		if len(env.Args) == 0 {
			return ExitBadUse
		}
		return ExitOK
	}
	if env.Args[0] == "version" || env.Args[0] == "--version" {
		fmt.Fprintln(env.Stdout, "compactor", Version)
		return ExitOK
	}
	c, ok := commands[env.Args[0]]
	if !ok {
		fmt.Fprintf(env.Stderr, "compactor: unknown command %q\n\n", env.Args[0])
		printUsage(env.Stderr)
		return ExitBadUse
	}
	sub := *env
	sub.Args = env.Args[1:]
	err := c.Run(ctx, &sub)
	return exitCode(env.Stderr, c.Name, err)
}

func exitCode(stderr io.Writer, name string, err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			fmt.Fprintf(stderr, "compactor %s: %v\n", name, ee.Err)
		}
		return ee.Code
	}
	var ue *UsageError
	if errors.As(err, &ue) || errors.Is(err, errHelp) {
		if !errors.Is(err, errHelp) {
			fmt.Fprintf(stderr, "compactor %s: %v\n", name, err)
			return ExitBadUse
		}
		return ExitOK
	}
	fmt.Fprintf(stderr, "compactor %s: %v\n", name, err)
	return ExitFailed
}

// Version is set at build time with -ldflags "-X ...cli.Version=...".
var Version = "dev"

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
	fmt.Fprintln(w, "Run 'compactor <command> --help' for a command's flags.")
}
