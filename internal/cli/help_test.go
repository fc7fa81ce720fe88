package cli

import (
	"bytes"
	"context"
	"flag"
	"io"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/internal/cli/command"
)

// Every command's --help (every command registered, and the enqueue program): exit 0,
// nothing on stderr, and on stdout one well-formed usage line (the program named once,
// then its arguments, no stray spaces), a blank line, the description and the flags, once.
// `compactor help NAME` prints the same.
func TestEveryHelp(t *testing.T) {
	t.Parallel()
	type program struct {
		name, prog string
		run        func(*Env) int
	}
	var progs []program
	for _, c := range command.All() {
		name := c.Name
		progs = append(progs, program{name, "compactor " + name, func(e *Env) int {
			e.Args = append([]string{name}, e.Args...)
			return Run(context.Background(), e)
		}})
	}
	sort.Slice(progs, func(i, j int) bool { return progs[i].name < progs[j].name })
	progs = append(progs, program{"enqueue program", "enqueue", func(e *Env) int { return RunEnqueue(context.Background(), e) }})
	for _, p := range progs {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			var out, errb bytes.Buffer
			code := p.run(&Env{Args: []string{"--help"}, Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
			if code != ExitOK || errb.Len() != 0 {
				t.Fatalf("exit %d, stderr %q", code, errb.String())
			}
			text := out.String()
			lines := strings.Split(text, "\n")
			// "Usage: PROG" and the arguments: words (no empty one: no double or trailing
			// space), none of them the program's name again.
			usage := regexp.MustCompile(`^Usage: ` + regexp.QuoteMeta(p.prog) + `((?: \S+)*)$`)
			m := usage.FindStringSubmatch(lines[0])
			if m == nil {
				t.Fatalf("usage line %q: want %q and its arguments", lines[0], "Usage: "+p.prog)
			}
			if strings.Contains(m[1], "compactor") || strings.Contains(m[1], " "+p.prog+" ") {
				t.Errorf("usage line %q names the program twice", lines[0])
			}
			if n := strings.Count(text, "Usage:"); n != 1 {
				t.Errorf("%d usage lines, want 1", n)
			}
			if len(lines) < 4 || lines[1] != "" || strings.TrimSpace(lines[2]) == "" {
				t.Errorf("want the usage line, a blank line and the description:\n%s", text)
			}
			if n := strings.Count(text, "\nFlags:\n"); n != 1 {
				t.Errorf("%d flag lists, want 1:\n%s", n, text)
			}
			if p.prog == "enqueue" {
				return
			}
			var helpOut, helpErr bytes.Buffer
			code = Run(context.Background(), &Env{Args: []string{"help", p.name}, Stdout: &helpOut, Stderr: &helpErr, Getenv: func(string) string { return "" }})
			if code != ExitOK || helpOut.String() != text || helpErr.Len() != 0 {
				t.Errorf("compactor help %s: exit %d, stderr %q, same text as --help: %v", p.name, code, helpErr.String(), helpOut.String() == text)
			}
		})
	}
}

// Every flag in every command's --help shows a placeholder meant as one: none for a
// boolean, else a type (string, int, duration...) or a name in capitals (NAME=DIR, BYTES),
// never a word or command taken from the usage's backticks (it showed -setup compactor
// setup, -nats-token token, -inbox-prefix compactor auth).
func TestHelpPlaceholders(t *testing.T) {
	t.Parallel()
	types := map[string]bool{"string": true, "int": true, "uint": true, "int64": true, "uint64": true, "float": true, "duration": true, "value": true}
	line := regexp.MustCompile(`^  -([a-z0-9-]+)(?: (.+))?$`)
	for _, name := range commandNames {
		var sets []*flag.FlagSet
		var out bytes.Buffer
		env := &Env{Args: []string{name, "--help"}, Stdout: &out, Stderr: io.Discard, Getenv: func(string) string { return "" },
			OnFlagSet: func(fs *flag.FlagSet, _, _ string) { sets = append(sets, fs) }}
		if code := Run(context.Background(), env); code != 0 {
			t.Fatalf("%s --help: exit %d", name, code)
		}
		isBool := map[string]bool{}
		for _, fs := range sets {
			fs.VisitAll(func(f *flag.Flag) {
				if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
					isBool[f.Name] = true
				}
			})
		}
		seen := 0
		for l := range strings.Lines(out.String()) {
			m := line.FindStringSubmatch(strings.TrimRight(l, "\n"))
			if m == nil {
				continue
			}
			seen++
			flagName, ph := m[1], m[2]
			switch {
			case isBool[flagName] && ph != "":
				t.Errorf("%s --help: boolean -%s shows a placeholder %q", name, flagName, ph)
			case !isBool[flagName] && ph == "":
				t.Errorf("%s --help: -%s shows no placeholder", name, flagName)
			case ph != "" && !types[ph] && (strings.ContainsAny(ph, " \t") || strings.ToLower(ph) == ph):
				t.Errorf("%s --help: -%s shows %q, not a type nor a name in capitals", name, flagName, ph)
			}
		}
		if seen == 0 && name != "version" {
			t.Errorf("%s --help lists no flag", name)
		}
	}
}
