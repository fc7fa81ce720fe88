package cli

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/internal/pigolden"
	"github.com/compactor-dev/compactor/sessionio"
)

// TestPlanMatchesPiOracle runs `compactor plan --json --policy pi --counter estimate
// --pi-version V` on every corpus file and compares the fields Pi V's own cut printed
// (interop/pi/pi cut), at keepRecentTokens 20000, 5000 and 1000 and with the per-model
// settings of testdata/pi-settings/model-overrides.json (--pi-settings), for every Pi of
// the matrix; where Pi V cannot load the file, compactor refuses it too. v1 files (pi-repo)
// are migrated with fresh ids by each reader: there only what does not name an id is
// compared.
func TestPlanMatchesPiOracle(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	versions, err := pigolden.Versions()
	if err != nil {
		t.Fatal(err)
	}
	files, err := pigolden.CorpusFiles()
	if err != nil {
		t.Fatal(err)
	}
	settings := filepath.Join(root, "testdata/pi-settings/model-overrides.json")
	for _, v := range versions {
		for _, f := range files {
			for _, kind := range []string{"cut-20000", "cut-5000", "cut-1000", "cut-override"} {
				raw, err := pigolden.Bytes(v, f.Name, kind)
				if errors.Is(err, os.ErrNotExist) {
					// A file Pi cannot load (its error golden): compactor refuses to plan it too.
					if _, err := pigolden.Bytes(v, f.Name, "error"); err != nil {
						t.Fatalf("%s %s: neither a %s golden nor an error golden: %v", v, f.Name, kind, err)
					}
					t.Run(v+"/"+f.Name+"/"+kind, func(t *testing.T) {
						t.Parallel()
						code, out, errOut := runCLI(t, "plan", f.Path, "--json", "--policy", "pi", "--counter", "estimate", "--pi-version", v)
						if code != 2 || out != "" || !strings.Contains(errOut, filepath.Base(f.Path)) {
							t.Fatalf("Pi %s refuses the file; compactor plan: exit %d, stderr %q", v, code, errOut)
						}
					})
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				t.Run(v+"/"+f.Name+"/"+kind, func(t *testing.T) {
					t.Parallel()
					args := []string{"plan", f.Path, "--json", "--policy", "pi", "--counter", "estimate", "--pi-version", v}
					if kind == "cut-override" {
						args = append(args, "--pi-settings", settings)
					} else {
						args = append(args, "--keep-recent-tokens", strings.TrimPrefix(kind, "cut-"))
					}
					code, out, errOut := runCLI(t, args...)
					if code != 0 {
						t.Fatalf("exit %d: %s", code, errOut)
					}
					s, err := sessionio.ReadFileWith(f.Path, sessionio.Options{Light: true})
					if err != nil {
						t.Fatal(err)
					}
					planMatches(t, decodeJSON(t, []byte(out)), decodeJSON(t, raw), s.Version() < 2)
				})
			}
		}
	}
}

// planMatches compares plan --json with Pi's cut, field by field.
func planMatches(t *testing.T, got, want map[string]any, v1 bool) {
	t.Helper()
	keys := []string{"prepared", "firstKeptEntryId", "firstKeptEntryIndex", "isSplitTurn", "turnStartIndex", "turnStartEntryId",
		"tokensBefore", "boundaryStartIndex", "boundaryStartEntryId", "previousCompactionId", "previousSummary",
		"messagesToSummarize", "turnPrefix", "fileOps"}
	if v1 {
		keys = []string{"prepared", "firstKeptEntryIndex", "isSplitTurn", "turnStartIndex", "tokensBefore", "boundaryStartIndex", "previousSummary"}
	}
	if want["prepared"] == false {
		keys = []string{"prepared"}
	}
	for _, k := range keys {
		g, _ := json.Marshal(got[k])
		w, _ := json.Marshal(want[k])
		if string(g) != string(w) {
			t.Errorf("%s = %.200s, want %.200s", k, g, w)
		}
	}
	extra := []string{"policy", "counter", "piVersion", "contextWindow", "shouldCompact", "overBudget"}
	if want["prepared"] == true {
		extra = append(extra, "keptTokens", "summarizedTokens", "turnPrefixTokens")
	}
	for _, k := range extra {
		if _, ok := got[k]; !ok {
			t.Errorf("missing field %s", k)
		}
	}
}

func TestPlanBudgetAndPolicies(t *testing.T) {
	t.Parallel()
	file := filepath.Join(repoRoot(t), "testdata/corpus/10-tricky-parallel.jsonl")
	// 31120 tokens against 40000 - 16384: over budget.
	code, out, errOut := runCLI(t, "plan", file, "--json", "--context-window", "40000", "--policy", "nearest", "--counter", "estimate")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	got := decodeJSON(t, []byte(out))
	if got["shouldCompact"] != true || got["contextWindow"] != float64(40000) || got["policy"] != "nearest" {
		t.Errorf("shouldCompact %v contextWindow %v policy %v", got["shouldCompact"], got["contextWindow"], got["policy"])
	}
	if got["firstKeptEntryId"] != "aaaa0006" {
		t.Errorf("nearest firstKeptEntryId = %v, want aaaa0006", got["firstKeptEntryId"])
	}
	// Default window from the catalog (claude-sonnet-4-5: 200000) and the tiktoken counter.
	code, out, errOut = runCLI(t, "plan", file, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	got = decodeJSON(t, []byte(out))
	if got["shouldCompact"] != false || got["contextWindow"] != float64(200000) || !strings.HasPrefix(got["counter"].(string), "tiktoken") {
		t.Errorf("defaults: shouldCompact %v contextWindow %v counter %v", got["shouldCompact"], got["contextWindow"], got["counter"])
	}
	// Human summary.
	code, out, _ = runCLI(t, "plan", file, "--counter", "estimate", "--policy", "pi")
	if code != 0 || !strings.Contains(out, "first kept aaaa000a") || !strings.Contains(out, "kept 16 tokens") {
		t.Errorf("summary (exit %d):\n%s", code, out)
	}
}

func TestPlanErrors(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"plan", filepath.Join(root, "testdata/corpus/bad/not-json.jsonl")}, "not-json.jsonl"},
		{[]string{"plan", filepath.Join(root, "testdata/corpus/bad/empty.jsonl")}, "empty.jsonl"},
		{[]string{"plan", filepath.Join(root, "testdata/corpus/does-not-exist.jsonl")}, "does-not-exist.jsonl"},
		{[]string{"plan", filepath.Join(root, "testdata/corpus/01-minimal.jsonl"), "--policy", "bogus"}, "bogus"},
		{[]string{"plan", filepath.Join(root, "testdata/corpus/01-minimal.jsonl"), "--counter", "bogus"}, "bogus"},
		{[]string{"plan", filepath.Join(root, "testdata/corpus/01-minimal.jsonl"), "--leaf", "nope"}, "nope"},
		{[]string{"plan"}, "FILE"},
		{[]string{"inspect", filepath.Join(root, "testdata/corpus/bad/no-header.jsonl")}, "no-header.jsonl"},
	}
	for _, tc := range tests {
		code, _, errOut := runCLI(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 naming %q", tc.args[1:], code, errOut, tc.want)
		}
	}
}

func TestInspect(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	code, out, errOut := runCLI(t, "inspect", filepath.Join(root, "testdata/corpus/10-tricky-parallel.jsonl"), "--counter", "estimate", "--policy", "pi")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"==== CUT (pi)", "* K aaaa000a", "* P aaaa0007", "10000", "moves FORWARD", "within budget"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
	}
	// Branches and labels.
	code, out, errOut = runCLI(t, "inspect", filepath.Join(root, "testdata/corpus/03-branches-labels-name.jsonl"), "--counter", "estimate")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"+-- branch 1 of 2", "[label \"start\"]", "branch_summary"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
	}
	// A compacted session shows the range start.
	code, out, _ = runCLI(t, "inspect", filepath.Join(root, "testdata/corpus/05-compactions.jsonl"), "--counter", "estimate", "--path-only", "--pi-version", "0.73.1")
	if code != 0 || !strings.Contains(out, "range start") || !strings.Contains(out, "compaction: keeps from") {
		t.Errorf("inspect 05 (exit %d) lacks the range start or compaction line", code)
	}
}
