package cli

import (
	"context"
	"flag"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/compactor-dev/compactor/internal/cli/command"
)

// CommandFlags is one command's settings as its FlagSet declares them: what the
// configuration reference (docs/configuration.md, internal/cmd/genconfigref) is made of.
type CommandFlags struct {
	Name    string
	Summary string
	Usage   string
	// ConfigFile: the command takes --config, whose JSON keys are its flag names.
	ConfigFile bool
	Flags      []FlagInfo
	// EnvRead lists the environment variables the command read while declaring its flags
	// (defaults taken from the environment).
	EnvRead []string
}

// FlagInfo is one flag.
type FlagInfo struct {
	Name    string
	Type    string // as flag.UnquoteUsage names it ("duration", "int", "string", "" for a bool)
	Default string // the user's home directory is written ~
	Usage   string
}

// Describe runs every registered command with --help, with an empty environment, and
// returns the flags each one declares, sorted by command and flag name. Nothing else runs:
// every command parses its flags before it does anything.
func Describe() []CommandFlags {
	home, _ := os.UserHomeDir()
	var out []CommandFlags
	for _, c := range command.All() {
		cf := CommandFlags{Name: c.Name, Summary: c.Summary}
		seen := map[string]bool{}
		env := &Env{Args: []string{"--help"}, Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard,
			Getenv: func(k string) string {
				if !seen[k] {
					seen[k] = true
					cf.EnvRead = append(cf.EnvRead, k)
				}
				return ""
			}}
		var sets []*flag.FlagSet
		env.OnFlagSet = func(fs *flag.FlagSet, usage, _ string) {
			sets = append(sets, fs)
			if cf.Usage == "" {
				cf.Usage = usage
			}
		}
		_ = c.Run(context.Background(), env)
		for _, fs := range sets {
			fs.VisitAll(func(f *flag.Flag) {
				typ, usage := command.FlagPlaceholder(f)
				def := f.DefValue
				if home != "" && strings.HasPrefix(def, home) {
					def = "~" + strings.TrimPrefix(def, home)
				}
				cf.Flags = append(cf.Flags, FlagInfo{Name: f.Name, Type: typ, Default: def, Usage: usage})
				if f.Name == "config" {
					cf.ConfigFile = true
				}
			})
		}
		sort.Strings(cf.EnvRead)
		out = append(out, cf)
	}
	return out
}
