package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/cli/command"
	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/sessionio"
)

// commandNames are every subcommand, as the help lists them.
var commandNames = []string{"auth", "branch-summary", "compact", "console", "context", "dlq", "enqueue", "events", "experiment", "inspect", "pause", "plan", "prepare", "resume", "run", "setup", "status", "sweep", "version"}

// TestCommandLine runs every subcommand (and the enqueue program) with --help, with a
// flag it does not have, and with bad input, and checks the exit code, which stream the
// first line is on (the other stream must then hold nothing for errors), and that line.
func TestCommandLine(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "s.jsonl")
	data, err := os.ReadFile(filepath.Join(root, "testdata/corpus/10-tricky-parallel.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(good, data, 0o644); err != nil {
		t.Fatal(err)
	}
	notJSON := filepath.Join(root, "testdata/corpus/bad/not-json.jsonl")
	missing := filepath.Join(dir, "missing.jsonl")
	store := filepath.Join(dir, "store")
	if err := os.Mkdir(store, 0o755); err != nil {
		t.Fatal(err)
	}
	nats := filepath.Join(dir, "nats")
	noNATS := "nats://127.0.0.1:1" // nothing listens on port 1

	type tc struct {
		args    []string
		enqueue bool              // the enqueue program (cmd/enqueue) instead of compactor
		env     map[string]string // environment
		code    int
		stderr  bool   // the first line is on stderr (else stdout)
		first   string // the first line starts with this
		usage   bool   // the usage follows the error on stderr
		hint    bool   // a flag error: one line on how to see the usage follows it
	}
	cases := []tc{
		{args: nil, code: 2, stderr: true, first: "compactor: no command given", usage: true},
		{args: []string{"bogus"}, code: 2, stderr: true, first: `compactor: unknown command "bogus"`, usage: true},
		{args: []string{"--help"}, code: 0, first: "compactor compacts and summarizes"},
		{args: []string{"help", "plan"}, code: 0, first: "Usage: compactor plan FILE"},
		{args: []string{"--version"}, code: 0, first: "compactor "},

		{args: []string{"plan", missing}, code: 2, stderr: true, first: "compactor plan: " + missing + ": "},
		{args: []string{"plan", notJSON}, code: 2, stderr: true, first: "compactor plan: " + notJSON},
		{args: []string{"plan"}, code: 2, stderr: true, first: "compactor plan: expected one session FILE, got 0 arguments"},
		{args: []string{"plan", good, "--leaf", "nope"}, code: 2, stderr: true, first: "compactor plan: --leaf nope: "},
		{args: []string{"plan", good, "--context-window", "100"}, code: 2, stderr: true, first: "compactor plan: --context-window 100 is not larger than --reserve-tokens 16384"},
		{args: []string{"plan", good, "--context-window", "40000", "--keep-recent-tokens", "30000"}, code: 2, stderr: true, first: "compactor plan: --keep-recent-tokens 30000 does not fit under the budget (--context-window 40000 - --reserve-tokens 16384 = 23616)"},
		{args: []string{"plan", good, "--policy", "bogus"}, code: 2, stderr: true, first: "compactor plan: --policy: "},
		{args: []string{"inspect", good, "--around", "-2"}, code: 2, stderr: true, first: "compactor inspect: --around -2: must not be negative"},
		{args: []string{"inspect", missing}, code: 2, stderr: true, first: "compactor inspect: " + missing},
		{args: []string{"context", notJSON}, code: 2, stderr: true, first: "compactor context: " + notJSON},
		{args: []string{"context", good, "--leaf", "nope"}, code: 2, stderr: true, first: "compactor context: --leaf nope: "},

		{args: []string{"compact", notJSON}, code: 2, stderr: true, first: "compactor compact: " + notJSON},
		{args: []string{"compact", good, "a.jsonl"}, code: 2, stderr: true, first: "compactor compact: expected one session FILE, got 2 arguments"},
		{args: []string{"compact", good, "--base-url", "http://127.0.0.1:1/v1", "--model", "m", "--api-key-env", "NO_SUCH_KEY"}, code: 2, stderr: true,
			first: "compactor compact: --api-key-env NO_SUCH_KEY: the variable is empty or unset"},
		{args: []string{"compact", good, "--base-url", "http://127.0.0.1:1/v1", "--model", "m", "--api-key-file", missing}, code: 2, stderr: true,
			first: "compactor compact: --api-key-file " + missing + ": "},
		{args: []string{"compact", good, "--summarizer", "gpt"}, code: 2, stderr: true, first: `compactor compact: --summarizer: unknown summarizer "gpt"`},
		{args: []string{"compact", good, "--context-window", "100"}, code: 2, stderr: true, first: "compactor compact: --context-window 100 is not larger than --reserve-tokens 16384"},
		// --dry-run needs no key, even for an endpoint that would want one.
		{args: []string{"compact", good, "--dry-run", "--base-url", "http://127.0.0.1:1/v1", "--model", "m"}, code: 0, first: "dry run: nothing written to " + good},
		{args: []string{"branch-summary", good, "--to", "deadbeef"}, code: 2, stderr: true, first: "compactor branch-summary: " + good + `: --to "deadbeef": no entry with this id in the file`},
		{args: []string{"branch-summary", good}, code: 2, stderr: true, first: "compactor branch-summary: --to ID is required"},

		{args: []string{"run", "--store", store}, code: 2, stderr: true, first: `compactor run: invalid value "` + store + `" for flag -store: "` + store + `": want NAME=DIR (for example default=` + store + ")", hint: true},
		{args: []string{"run", "--store", "x=" + missing}, code: 2, stderr: true, first: "compactor run: --store x=" + missing + ": no such file or directory"},
		{args: []string{"run", "--store", "a.b=" + store}, code: 2, stderr: true, first: `compactor run: invalid value "a.b=`, hint: true},
		{args: []string{"run", "--store", "x=" + store, "--data-dir", nats, "--concurrency", "-1"}, code: 2, stderr: true, first: "compactor run: --concurrency: -1, need at least 1"},
		{args: []string{"run", "--store", "x=" + store, "--data-dir", nats, "extra"}, code: 2, stderr: true, first: `compactor run: unexpected argument "extra"`},
		{args: []string{"run", "--store", "x=" + store, "--data-dir", nats, "--json"}, code: 2, stderr: true, first: "compactor run: --json goes with --once"},
		{args: []string{"run", "--store", "x=" + store, "--data-dir", nats, "--context-window", "10000"}, code: 2, stderr: true, first: "compactor run: --context-window 10000 is not larger than --reserve-tokens 16384"},
		{args: []string{"run"}, env: map[string]string{"COMPACTOR_STORES": store}, code: 2, stderr: true, first: `compactor run: COMPACTOR_STORES: "` + store + `": want NAME=DIR`},
		{args: []string{"sweep", "--store", "x=" + missing}, code: 2, stderr: true, first: "compactor sweep: --store x=" + missing + ": no such file or directory"},
		{args: []string{"sweep", "--store", "x=" + store, "--nats-url", noNATS}, code: 1, stderr: true, first: "compactor sweep: nats: connect " + noNATS},
		{args: []string{"sweep", "--store", "x=" + store, "--tls-cert", missing}, code: 2, stderr: true, first: "compactor sweep: --tls-cert/--tls-key: give both or neither"},

		{args: []string{"experiment"}, code: 2, stderr: true, first: "compactor experiment: --dir is required"},
		{args: []string{"experiment", "--dir", missing}, code: 2, stderr: true, first: "compactor experiment: --dir " + missing},
		{args: []string{"experiment", "--dir", dir, "--out", filepath.Join(dir, "x.xlsx")}, code: 2, stderr: true, first: "compactor experiment: --out "},
		{args: []string{"experiment", "--dir", dir, "--workers", "-1"}, code: 2, stderr: true, first: "compactor experiment: --workers: -1 is negative"},
		{args: []string{"experiment", "--dir", dir, "--context-window", "100"}, code: 2, stderr: true, first: "compactor experiment: --context-window: 100 is not larger than reserveTokens 16384"},
		{args: []string{"version", "extra"}, code: 2, stderr: true, first: `compactor version: unexpected argument "extra"`},
		{args: []string{"version"}, code: 0, first: "compactor "},

		{args: []string{"enqueue", good}, code: 2, stderr: true, first: "compactor enqueue: " + good + ` is in none of the stores "` + command.DefaultStoresSpec(func(string) string { return "" }) + `"; give --store-dir`},
		{args: []string{"enqueue", good, "--store-dir", store}, code: 2, stderr: true, first: "compactor enqueue: " + good + " is not inside the store directory " + store},
		{args: []string{"enqueue", notJSON, "--store-dir", filepath.Dir(notJSON)}, code: 2, stderr: true, first: "compactor enqueue: " + notJSON + ":1: no valid session header"},
		{args: []string{"enqueue", good, "--store-dir", dir, "--nats-url", noNATS}, code: 1, stderr: true, first: "compactor enqueue: nats: connect " + noNATS},
		{args: []string{"version"}, enqueue: true, code: 0, first: "enqueue "},
		{args: []string{"--help"}, enqueue: true, code: 0, first: "Usage: enqueue FILE [flags]"},
		{args: []string{"--bogus"}, enqueue: true, code: 2, stderr: true, first: "enqueue: flag provided but not defined: -bogus", hint: true},
		{args: []string{good, "--kind", "nope", "--store-dir", dir}, enqueue: true, code: 2, stderr: true, first: `enqueue: --kind "nope": want compact or branch_summary`},
		{args: []string{good, "--store-dir", dir, "--nats-url", noNATS}, enqueue: true, code: 1, stderr: true, first: "enqueue: nats: connect " + noNATS},
	}
	for _, name := range commandNames {
		cases = append(cases,
			tc{args: []string{name, "--help"}, code: 0, first: "Usage: compactor " + name},
			tc{args: []string{name, "--bogus"}, code: 2, stderr: true, first: "compactor " + name + ": flag provided but not defined: -bogus", hint: true})
	}
	for _, c := range cases {
		name := strings.Join(c.args, " ")
		if c.enqueue {
			name = "enqueue " + name
		}
		t.Run(strings.ReplaceAll(name, dir, "DIR"), func(t *testing.T) {
			t.Parallel()
			var out, errb bytes.Buffer
			env := &Env{Args: c.args, Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return c.env[k] }}
			// Every case ends by itself; the deadline only keeps a regression (a service
			// that starts instead of refusing its flags) from hanging the suite.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var code int
			if c.enqueue {
				code = RunEnqueue(ctx, env)
			} else {
				code = Run(ctx, env)
			}
			first, other := out.String(), errb.String()
			if c.stderr {
				first, other = other, first
			}
			line, _, _ := strings.Cut(first, "\n")
			if code != c.code || !strings.HasPrefix(line, c.first) {
				t.Fatalf("exit %d, first line on %s %q; want exit %d and %q\nstdout:\n%s\nstderr:\n%s", code, map[bool]string{true: "stderr", false: "stdout"}[c.stderr], line, c.code, c.first, out.String(), errb.String())
			}
			if c.code != 0 && other != "" {
				t.Errorf("an error wrote to stdout:\n%s", other)
			}
			if c.code == 0 && c.first != "" && strings.HasPrefix(c.first, "Usage:") && errb.Len() != 0 {
				t.Errorf("--help wrote to stderr:\n%s", errb.String())
			}
			if n := strings.Count(out.String()+errb.String(), "Usage: "); (c.usage || strings.HasPrefix(c.first, "Usage:")) && n != 1 {
				t.Errorf("the usage is printed %d times, want once", n)
			} else if !c.usage && !strings.HasPrefix(c.first, "Usage:") && strings.Contains(errb.String(), "\nUsage: ") {
				t.Errorf("an input error printed the usage:\n%s", errb.String())
			}
			if c.usage && !strings.Contains(errb.String(), "\n\nUsage: ") {
				t.Errorf("the usage does not follow the error on stderr:\n%s", errb.String())
			}
			if c.hint {
				prog := "compactor " + c.args[0]
				if c.enqueue {
					prog = "enqueue"
				}
				want := "Run '" + prog + " --help' for its flags and examples.\n"
				if lines := strings.Count(errb.String(), "\n"); lines != 2 || !strings.HasSuffix(errb.String(), want) {
					t.Errorf("a flag error printed %d lines, want the error and %q:\n%s", lines, want, errb.String())
				}
			}
		})
	}
}

// The help lists every command, version included.
func TestHelpListsEveryCommand(t *testing.T) {
	t.Parallel()
	code, out, _ := runCLI(t, "help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, name := range commandNames {
		if !strings.Contains(out, "\n  "+name+" ") {
			t.Errorf("help lacks %s:\n%s", name, out)
		}
	}
	if len(command.All()) != len(commandNames) {
		t.Errorf("%d commands registered, the test knows %d: add the new one to commandNames", len(command.All()), len(commandNames))
	}
}

// The exit-code rule for causes a test cannot make as root: permission denied is a failure
// (1), not bad input (2); a file that is not a session file is bad input.
func TestInputErrorRule(t *testing.T) {
	t.Parallel()
	perm := &sessionio.FileError{File: "s.jsonl", Err: &fs.PathError{Op: "open", Path: "s.jsonl", Err: fs.ErrPermission}}
	notFound := &sessionio.FileError{File: "s.jsonl", Err: &fs.PathError{Op: "open", Path: "s.jsonl", Err: fs.ErrNotExist}}
	content := &sessionio.FileError{File: "s.jsonl", Line: 1, Err: sessionio.ErrNoHeader}
	io := &sessionio.FileError{File: "s.jsonl", Err: fmt.Errorf("append: %w", &fs.PathError{Op: "write", Path: "s.jsonl", Err: errors.New("no space left on device")})}
	for _, c := range []struct {
		err  error
		code int
	}{{perm, 1}, {notFound, 2}, {content, 2}, {io, 1}, {sessionio.ErrChanged, 1}, {errors.New("llm timeout"), 1}} {
		if got := command.ExitCode(&bytes.Buffer{}, "compactor x", inputError(c.err)); got != c.code {
			t.Errorf("%v: exit %d, want %d", c.err, got, c.code)
		}
	}
}

// A keyless OpenAI-compatible endpoint (a local Ollama) works without a key: no
// Authorization header is sent. With a key, it is sent; an endpoint that refuses the
// credentials is a configuration problem (exit 2) and says where the key goes.
func TestKeylessEndpoint(t *testing.T) {
	t.Parallel()
	llm := fakellm.Start(t)
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "testdata/corpus/10-tricky-parallel.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	run := func(key string, args ...string) (int, string, string) {
		file := filepath.Join(t.TempDir(), "s.jsonl")
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		env := &Env{Args: append([]string{"compact", file, "--base-url", llm.URL(), "--model", "local", "--keep-recent-tokens", "2000"}, args...),
			Stdout: &out, Stderr: &errb, Getenv: func(k string) string {
				if k == "OPENAI_API_KEY" {
					return key
				}
				return ""
			}}
		return Run(context.Background(), env), out.String(), errb.String()
	}
	code, out, errOut := run("")
	if code != 0 || !strings.HasPrefix(out, "done: compaction ") {
		t.Fatalf("keyless: exit %d\n%s\n%s", code, out, errOut)
	}
	reqs := llm.Requests()
	if len(reqs) == 0 || reqs[len(reqs)-1].Header.Get("Authorization") != "" {
		t.Fatalf("keyless: %d requests, Authorization %q", len(reqs), reqs[len(reqs)-1].Header.Get("Authorization"))
	}
	if code, _, _ := run("sk-local"); code != 0 || llm.Requests()[len(llm.Requests())-1].Header.Get("Authorization") != "Bearer sk-local" {
		t.Fatalf("with a key: exit %d", code)
	}
	llm.SetDefault(fakellm.Behavior{Status: 401})
	code, out, errOut = run("", "--json")
	if code != 2 || !strings.Contains(errOut, "OPENAI_API_KEY") || !strings.Contains(out, `"outcome": "failed"`) {
		t.Fatalf("refused credentials: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
}
