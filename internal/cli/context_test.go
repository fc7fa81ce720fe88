package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/internal/pigolden"
	"github.com/compactor-dev/compactor/sessionio"
)

// runCLI runs a compactor subcommand in process and returns its exit code and output.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), &Env{Args: args, Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
	return code, out.String(), errb.String()
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// corpusFiles lists every session file whose Pi output is in testdata/expected.
func corpusFiles(t *testing.T) []string {
	t.Helper()
	root := repoRoot(t)
	var files []string
	for _, pattern := range []string{"testdata/corpus/*.jsonl", "testdata/corpus/pi-repo/*.jsonl", "testdata/corpus/pi-generated/synthetic-v3-session.jsonl"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 15 {
		t.Fatalf("found only %d corpus files; is testdata/ complete?", len(files))
	}
	return files
}

func decodeJSON(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("decode: %v\n%.300s", err, data)
	}
	return v
}

// TestContextMatchesPi compares `compactor context --json --pi-version V` with what the
// real Pi V printed (interop/pi/pi context) for every corpus file and every Pi of the
// matrix; where Pi V cannot load a file (its error golden), compactor refuses it too (exit 2,
// naming the file).
func TestContextMatchesPi(t *testing.T) {
	t.Parallel()
	versions, err := pigolden.Versions()
	if err != nil {
		t.Fatal(err)
	}
	files, err := pigolden.CorpusFiles()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range versions {
		for _, f := range files {
			t.Run(v+"/"+f.Name, func(t *testing.T) {
				t.Parallel()
				contextMatchesPi(t, v, f)
			})
		}
	}
}

func contextMatchesPi(t *testing.T, version string, f pigolden.File) {
	name, file := f.Name, f.Path
	{
		{
			var refused struct {
				Error string `json:"error"`
			}
			if err := pigolden.Load(version, name, "error", &refused); err == nil {
				code, stdout, stderr := runCLI(t, "context", file, "--json", "--pi-version", version)
				if code != 2 || stdout != "" || !strings.Contains(stderr, filepath.Base(file)) {
					t.Fatalf("Pi %s refuses the file (%s); compactor: exit %d, stderr %q", version, refused.Error, code, stderr)
				}
				return
			}
			want, err := pigolden.Bytes(version, name, "context")
			if err != nil {
				t.Fatal(err)
			}
			code, stdout, stderr := runCLI(t, "context", file, "--json", "--pi-version", version)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			got, exp := decodeJSON(t, []byte(stdout)), decodeJSON(t, want)
			gc, ec := got["context"].(map[string]any), exp["context"].(map[string]any)
			for _, k := range []string{"messages", "thinkingLevel", "model"} {
				if !reflect.DeepEqual(gc[k], ec[k]) {
					t.Errorf("context.%s differs from Pi's", k)
					if k == "messages" {
						reportFirstDiff(t, gc[k], ec[k])
					} else {
						t.Logf("got %v, Pi %v", gc[k], ec[k])
					}
				}
			}
			v3 := got["version"].(float64) == 3
			if v3 {
				for _, k := range []string{"leafId", "pathIds", "messageEntryIds", "sessionName", "labels", "entryCount"} {
					if !reflect.DeepEqual(got[k], exp[k]) {
						t.Errorf("%s: got %v, Pi %v", k, got[k], exp[k])
					}
				}
			} else if len(got["pathIds"].([]any)) != len(exp["pathIds"].([]any)) {
				t.Errorf("pathIds length: got %d, Pi %d", len(got["pathIds"].([]any)), len(exp["pathIds"].([]any)))
			}
		}
	}
}

func reportFirstDiff(t *testing.T, got, want any) {
	t.Helper()
	g, _ := got.([]any)
	w, _ := want.([]any)
	if len(g) != len(w) {
		t.Logf("message count: got %d, Pi %d", len(g), len(w))
	}
	for i := 0; i < len(g) && i < len(w); i++ {
		if !reflect.DeepEqual(g[i], w[i]) {
			gb, _ := json.Marshal(g[i])
			wb, _ := json.Marshal(w[i])
			t.Logf("first difference at message %d:\n got %.400s\n Pi  %.400s", i, gb, wb)
			return
		}
	}
}

// TestContextBadFiles checks the documented outcome for every file in corpus/bad: exit 2
// with a message naming the file for the ones Pi cannot load, Pi's context plus a
// diagnostic for the ones it loads.
func TestContextBadFiles(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(repoRoot(t), "testdata/corpus/bad")
	unreadable := map[string]string{
		"empty.jsonl":     "file is empty",
		"no-header.jsonl": "no valid session header",
		"not-json.jsonl":  "no valid session header",
	}
	for name, reason := range unreadable {
		code, stdout, stderr := runCLI(t, "context", filepath.Join(bad, name), "--json")
		if code != 2 || stdout != "" || !strings.Contains(stderr, name) || !strings.Contains(stderr, reason) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2 naming the file and %q", name, code, stdout, stderr, reason)
		}
	}
	readable := map[string]string{
		"malformed-line": `"kind":"malformed-line"`,
		"orphan-and-dup": `"kind":"duplicate-id"`,
		"legacy-v1":      `"kind":"migrated"`,
	}
	for name, diag := range readable {
		code, stdout, stderr := runCLI(t, "context", filepath.Join(bad, name+".jsonl"), "--json")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", name, code, stderr)
		}
		if !strings.Contains(stdout, diag) {
			t.Errorf("%s: no %s diagnostic in output", name, diag)
		}
		want, err := pigolden.Bytes("0.73.1", "bad-"+name, "context")
		if err != nil {
			t.Fatal(err)
		}
		got, exp := decodeJSON(t, []byte(stdout)), decodeJSON(t, want)
		if !reflect.DeepEqual(got["context"], exp["context"]) {
			t.Errorf("%s: context differs from Pi's", name)
		}
	}
	// The malformed line is reported with the line number Pi's harness gives.
	_, stdout, _ := runCLI(t, "context", filepath.Join(bad, "malformed-line.jsonl"), "--json")
	if !strings.Contains(stdout, `{"line":3,"kind":"malformed-line"`) {
		t.Errorf("malformed line not reported as line 3:\n%s", stdout)
	}
}

// TestGoldensAgainstLivePi (make interop) re-runs the real Pi 0.73.1 on every corpus file and
// checks that the committed goldens are still what it prints, for context and for cut at
// both budgets. Without COMPACTOR_INTEROP=1 it is skipped: `make test` needs no Node.
func TestGoldensAgainstLivePi(t *testing.T) {
	if os.Getenv("COMPACTOR_INTEROP") != "1" {
		t.Skip("set COMPACTOR_INTEROP=1 (make interop) to run the real Pi")
	}
	harness, err := pigolden.Harness()
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range corpusFiles(t) {
		name := strings.TrimSuffix(filepath.Base(file), ".jsonl")
		v3 := !strings.Contains(file, "pi-repo")
		for _, kind := range []string{"context", "cut-20000", "cut-5000"} {
			args := []string{"context", file}
			if kind != "context" {
				args = []string{"cut", file, "--keep-recent-tokens", strings.TrimPrefix(kind, "cut-")}
			}
			cmd := exec.Command(harness, args...)
			cmd.Env = append(os.Environ(), "PI_VERSION=0.73.1") // the goldens these tests read
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s %s: %v", name, kind, err)
			}
			golden, err := pigolden.Bytes("0.73.1", name, kind)
			if err != nil {
				t.Fatal(err)
			}
			live, want := decodeJSON(t, out), decodeJSON(t, golden)
			keys := []string{"context", "leafId", "pathIds"}
			if kind != "context" {
				keys = []string{"prepared", "firstKeptEntryId", "isSplitTurn", "turnStartEntryId", "messagesToSummarize", "turnPrefix", "tokensBefore", "fileOps"}
			}
			for _, k := range keys {
				if !v3 && k != "context" && k != "tokensBefore" && k != "prepared" && k != "isSplitTurn" {
					continue // v1 ids are random per Pi run
				}
				if !reflect.DeepEqual(live[k], want[k]) {
					t.Errorf("%s %s: the live Pi's %s differs from the golden", name, kind, k)
				}
			}
		}
	}
}

// TestCheckpointsGiveTheSameOutput: context and plan print the same bytes with checkpoints
// (the first run writes one, the next runs read only what follows it) as without, before
// and after Pi appends to the session, and the checkpoint is used.
func TestCheckpointsGiveTheSameOutput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "testdata/corpus/08-large.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "s.jsonl")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(dir, "checkpoints")
	run := func(args ...string) string {
		t.Helper()
		code, out, errOut := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		return strings.ReplaceAll(out, file, "FILE")
	}
	compare := func(stage string) {
		t.Helper()
		for _, cmd := range []string{"context", "plan"} {
			want := run(cmd, file, "--json", "--checkpoints", "off")
			for i := range 2 {
				if got := run(cmd, file, "--json", "--checkpoints", ck); got != want {
					t.Fatalf("%s, %s run %d with checkpoints: output differs from the full read's", stage, cmd, i+1)
				}
			}
		}
	}
	compare("before")
	written, _ := filepath.Glob(filepath.Join(ck, "*.ckpt"))
	if len(written) != 1 {
		t.Fatalf("%d checkpoint files, want 1", len(written))
	}
	tl, err := sessionio.ReadTailWith(file, sessionio.NeedContext|sessionio.NeedRoot|sessionio.NeedFile, sessionio.TailOptions{Checkpoints: &sessionio.Checkpoints{Dir: ck}})
	if err != nil || tl.CheckpointAt == 0 {
		t.Fatalf("the checkpoint is not used: %v %q", err, tl.CheckpointNote)
	}
	// Pi appends a turn: a user message, then an assistant answer.
	f, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, `{"type":"message","id":"cc000001","parentId":%q,"timestamp":"2026-12-02T00:00:00.000Z","message":{"role":"user","content":"and now?","timestamp":1}}`+"\n", tl.LeafID)
	fmt.Fprintf(f, `{"type":"message","id":"cc000002","parentId":"cc000001","timestamp":"2026-12-02T00:00:01.000Z","message":{"role":"assistant","content":[{"type":"text","text":"done"}],"api":"x","provider":"anthropic","model":"claude-sonnet-4-5","usage":{"input":9,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":10},"stopReason":"stop","timestamp":2}}`+"\n")
	f.Close()
	compare("after an append")
}
