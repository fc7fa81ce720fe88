// Package cli holds compactor's subcommands and is its composition root: it parses the
// flags, builds the engine, the summarizers and the pipeline's service, wires them together
// (package worker joins the engine to the pipeline) and prints what they return. A
// subcommand that runs the engine or the service lives in a file of its own and registers
// itself with command.Register; the operator's and admin's programs (auth, setup, dlq,
// status, events, pause and resume) live in packages named for them, registered in
// commands.go; all share the frame of package command. cmd/compactor and cmd/enqueue only
// call Main and MainEnqueue.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/compactor-dev/compactor/internal/cli/command"
)

// Exit codes, for every command (docs/architecture.md, "Exit codes"): 0 done (a skip with
// its reason is done), 1 failed, 2 bad usage, bad input or bad configuration.
const (
	ExitOK     = command.ExitOK
	ExitFailed = command.ExitFailed
	ExitBadUse = command.ExitBadUse
)

// Env is what a subcommand may touch: its arguments and standard streams.
type Env = command.Env

// Main runs the compactor command line and returns the process exit code.
func Main(args []string) int {
	env := &Env{Args: args, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, Signals: true}
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
		fmt.Fprintln(env.Stdout, "enqueue", command.Version())
		return ExitOK
	}
	sub := *env
	sub.Prog = "enqueue"
	return command.ExitCode(env.Stderr, sub.Prog, command.Lookup("enqueue").Run(ctx, &sub))
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
		if len(env.Args) == 2 && env.Args[0] == "help" && command.Lookup(env.Args[1]) != nil {
			return Run(ctx, &Env{Args: []string{env.Args[1], "--help"}, Stdin: env.Stdin, Stdout: env.Stdout, Stderr: env.Stderr, Getenv: env.Getenv})
		}
		printUsage(env.Stdout)
		return ExitOK
	case "--version":
		env.Args[0] = "version"
	}
	c := command.Lookup(env.Args[0])
	if c == nil {
		fmt.Fprintf(env.Stderr, "compactor: unknown command %q\n\n", env.Args[0])
		printUsage(env.Stderr)
		return ExitBadUse
	}
	tuneGC(c.Name, env.Getenv)
	sub := *env
	sub.Args = env.Args[1:]
	sub.Prog = "compactor " + c.Name
	return command.ExitCode(env.Stderr, sub.Prog, c.Run(ctx, &sub))
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

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "compactor compacts and summarizes Pi coding-agent sessions in the background.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: compactor <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range command.All() {
		fmt.Fprintf(w, "  %-15s %s\n", c.Name, c.Summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'compactor <command> --help' for a command's flags. Exit codes: 0 done (a skip")
	fmt.Fprintln(w, "with its reason is done), 1 failed, 2 bad usage, input or configuration.")
}

func init() {
	command.Register(&command.Command{Name: "version", Summary: "print the version", Run: func(ctx context.Context, env *Env) error {
		fs := command.NewFlagSet(env, "version", "", "Print compactor's version: the release it was built from, or the commit.")
		args, err := fs.ParseArgs(env.Args)
		if err != nil {
			return err
		}
		if len(args) > 0 {
			return command.Usagef("unexpected argument %q", args[0])
		}
		fmt.Fprintln(env.Stdout, "compactor", command.Version())
		return nil
	}})
}
