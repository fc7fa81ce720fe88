package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
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
	// "enqueue"); cli.Run sets it.
	Prog string

	// OnFlagSet, when set, is told of every FlagSet the command creates (cli.Describe).
	OnFlagSet func(fs *flag.FlagSet, usage, description string)
	// Signals: this is the process's own command line (cli.Main), whose signals it may
	// take (run reloads on SIGHUP); a command run in process by a test does not.
	Signals bool
}

// ProgName is Prog, or "compactor" when none is set.
func (env *Env) ProgName() string {
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

// commands is the registry: a command's file adds it with Register in its init.
var commands = map[string]*Command{}

// Register adds a command to the registry; a name registered twice panics.
func Register(c *Command) {
	if _, dup := commands[c.Name]; dup {
		panic("cli: command " + c.Name + " registered twice")
	}
	commands[c.Name] = c
}

// Lookup is the registered command of that name, or nil.
func Lookup(name string) *Command { return commands[name] }

// All are the registered commands, by name.
func All() []*Command {
	out := make([]*Command, 0, len(commands))
	for _, c := range commands {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
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

// Usagef is a UsageError of a formatted message.
func Usagef(format string, args ...any) error {
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

// ExitCode prints err (first, on stderr; then the usage for a flag error) and returns the
// exit code: ExitError's own, 2 for a UsageError, 0 for help, 1 for anything else.
func ExitCode(stderr io.Writer, prog string, err error) int {
	if err == nil || errors.Is(err, ErrHelp) {
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
