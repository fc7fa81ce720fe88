package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

var errHelp = errors.New("help requested")

// newFlagSet returns a FlagSet that reports errors instead of exiting, with a usage line.
func newFlagSet(env *Env, name, usage, description string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	if env.onFlagSet != nil {
		env.onFlagSet(fs, usage, description) // the configuration reference (configref.go)
	}
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		w := env.Stdout
		fmt.Fprintf(w, "Usage: %s\n\n%s\n\nFlags:\n", usage, strings.TrimSpace(description))
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// parseFlags parses args allowing flags and positional arguments in any order
// (compactor plan FILE --json as well as compactor plan --json FILE).
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.Usage()
				return nil, errHelp
			}
			return nil, &UsageError{Err: err}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
