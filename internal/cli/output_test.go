package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/engine"
	"github.com/compactor-dev/compactor/internal/sessiongen"
	"github.com/compactor-dev/compactor/outcome"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/pipeline/pipelinetest"
	"github.com/compactor-dev/compactor/tokenize"
	"github.com/compactor-dev/compactor/wire"
)

// plan explains the context's size: the reported usage plus the counted messages add up
// to it, and right after a compaction it says the usage predates the compaction.
func TestPlanExplainsTheContext(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	for _, name := range []string{"10-tricky-parallel", "08-large", "09-ends-with-compaction"} {
		file := filepath.Join(root, "testdata/corpus", name+".jsonl")
		p, err := engine.Plan(file, engine.Settings{Pi: "0.73.1", KeepRecentTokens: 5000, ReserveTokens: 16384}, engine.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cp := splitContext(p.Path, p.Release, p.Counter)
		if cp.usage+cp.counted != p.Plan.TokensBefore || cp.usage != 0 && cp.usageFrom == "" {
			t.Errorf("%s: %d reported + %d counted != context %d", name, cp.usage, cp.counted, p.Plan.TokensBefore)
		}
		if (cp.before != "") != (name == "09-ends-with-compaction") {
			t.Errorf("%s: usage before compaction %q", name, cp.before)
		}
		if cp.usage != 0 && cutpoint.ContextTokens(p.Path, p.Release, tokenize.EstimateFor(p.Release)) < cp.usage {
			t.Errorf("%s: the estimate counter's context is below the reported usage", name)
		}
	}
	code, out, _ := runCLI(t, "plan", filepath.Join(root, "testdata/corpus/09-ends-with-compaction.jsonl"), "--context-window", "30000", "--keep-recent-tokens", "5000", "--pi-version", "0.73.1")
	if code != 0 || !strings.Contains(out, "reported by the last answer (a15c541b") || !strings.Contains(out, "predates compaction fafb6c86") ||
		!strings.Contains(out, "OVER BUDGET") || !strings.Contains(out, "why a just-compacted session still shows OVER BUDGET") {
		t.Errorf("plan right after a compaction, Pi 0.73.1 (exit %d):\n%s", code, out)
	}
	// Pi 1.6 does not take a usage from before the compaction: the session is under budget.
	code, out, _ = runCLI(t, "plan", filepath.Join(root, "testdata/corpus/09-ends-with-compaction.jsonl"), "--context-window", "30000", "--keep-recent-tokens", "5000")
	if code != 0 || !strings.Contains(out, "does not take the usage of the last answer (a15c541b),") || !strings.Contains(out, "which predates fafb6c86") ||
		!strings.Contains(out, "within budget") {
		t.Errorf("plan right after a compaction, Pi 1.6 (exit %d):\n%s", code, out)
	}
}

// inspect --json is one document: the plan as plan --json prints it, the context's parts,
// the entries; --around keeps the path near the range start and the cut.
func TestInspectJSONAndAround(t *testing.T) {
	t.Parallel()
	file := filepath.Join(repoRoot(t), "testdata/corpus/08-large.jsonl")
	code, out, errOut := runCLI(t, "inspect", file, "--json", "--around", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc struct {
		SessionID string `json:"sessionId"`
		Plan      struct {
			FirstKeptEntryID    string `json:"firstKeptEntryId"`
			FirstKeptEntryIndex int    `json:"firstKeptEntryIndex"`
			BoundaryStartIndex  int    `json:"boundaryStartIndex"`
			TurnStartIndex      int    `json:"turnStartIndex"`
			TokensBefore        int    `json:"tokensBefore"`
		} `json:"plan"`
		Context struct {
			Tokens, ReportedUsage, Counted int
			ReportedBy                     *string
		} `json:"context"`
		Entries []struct {
			ID        string `json:"id"`
			PathIndex *int   `json:"pathIndex"`
			Status    string `json:"status"`
			Tokens    *int   `json:"tokens"`
		} `json:"entries"`
		Explanation string `json:"explanation"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%.300s", err, out)
	}
	_, planOut, _ := runCLI(t, "plan", file, "--json")
	var plan map[string]any
	_ = json.Unmarshal([]byte(planOut), &plan)
	if doc.Plan.FirstKeptEntryID != plan["firstKeptEntryId"] || doc.Context.Tokens != doc.Plan.TokensBefore ||
		doc.Context.ReportedUsage+doc.Context.Counted != doc.Context.Tokens || doc.Context.ReportedBy == nil || doc.Explanation == "" {
		t.Fatalf("inspect --json plan/context: %+v %+v", doc.Plan, doc.Context)
	}
	// 2 entries each side of the range start, the split turn's start and the cut.
	near := func(i int) bool {
		return abs(i-doc.Plan.BoundaryStartIndex) <= 2 || abs(i-doc.Plan.TurnStartIndex) <= 2 || abs(i-doc.Plan.FirstKeptEntryIndex) <= 2
	}
	kept := false
	for _, e := range doc.Entries {
		if e.PathIndex == nil || !near(*e.PathIndex) {
			t.Fatalf("entry %s (path index %v) is not near the range start or the cut", e.ID, e.PathIndex)
		}
		kept = kept || (e.ID == doc.Plan.FirstKeptEntryID && e.Status == "kept" && e.Tokens != nil)
	}
	if doc.Plan.TurnStartIndex < 0 || len(doc.Entries) < 8 || len(doc.Entries) > 15 || !kept {
		t.Fatalf("%d entries around; first kept shown as kept: %v", len(doc.Entries), kept)
	}
	code, out, _ = runCLI(t, "inspect", file, "--around", "1")
	if code != 0 || !strings.Contains(out, "... 1198 entries (indices 0-1197) ...") || !strings.Contains(out, "==== CUT (nearest)") || strings.Count(out, "\n* ") > 10 {
		t.Errorf("inspect --around 1 (exit %d):\n%s", code, out)
	}
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// compact prints a short summary by default and the result document with --json.
func TestCompactSummaryAndJSON(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "testdata/corpus/10-tricky-parallel.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "s.jsonl")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runCLI(t, "compact", file, "--dry-run", "--keep-recent-tokens", "2000")
	if code != 0 || strings.Count(out, "\n") > 6 || !strings.Contains(out, "would summarize") {
		t.Fatalf("dry run (exit %d):\n%s", code, out)
	}
	code, out, _ = runCLI(t, "compact", file, "--dry-run", "--json", "--keep-recent-tokens", "2000")
	var res engine.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 || res.Outcome != outcome.DryRun || res.Kind != engine.KindCompact || res.Plan == nil {
		t.Fatalf("dry run --json (exit %d, %v): %+v", code, err, res)
	}
	code, out, _ = runCLI(t, "compact", file, "--keep-recent-tokens", "2000")
	if code != 0 || !strings.HasPrefix(out, "done: compaction ") || !strings.Contains(out, "note: a running Pi keeps its leaf in memory") {
		t.Fatalf("compact (exit %d):\n%s", code, out)
	}
	code, out, _ = runCLI(t, "compact", file, "--json", "--keep-recent-tokens", "2000")
	res = engine.Result{}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 || res.Outcome != outcome.Skipped || !strings.Contains(res.Reason, "already compacted") || res.Plan != nil {
		t.Fatalf("second compact --json (exit %d, %v): %+v", code, err, res)
	}
}

// The JSON log writes durations in seconds (Go's default is nanoseconds).
func TestJSONLogDurationsInSeconds(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	log, err := newLogger(&b, "json", "info", new(slog.LevelVar))
	if err != nil {
		t.Fatal(err)
	}
	log.Info("job done", "duration", 1500*time.Millisecond, slog.Int("n", 3))
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil || m["duration"] != 1.5 || m["n"] != float64(3) {
		t.Fatalf("log line %s (%v)", b.String(), err)
	}
}

// experiment --out infers the format only from known extensions.
func TestExperimentOutFormat(t *testing.T) {
	t.Parallel()
	dir := experimentDir(t)
	out := filepath.Join(t.TempDir(), "report.txt")
	code, _, errOut := runCLI(t, "experiment", "--dir", dir, "--counter", "estimate", "--out", out)
	b, _ := os.ReadFile(out)
	if code != 0 || !strings.Contains(string(b), "SNAPSHOT TOTALS") || !strings.Contains(errOut, "(table)") {
		t.Fatalf("--out report.txt: exit %d, %s\n%.200s", code, errOut, b)
	}
	xlsx := filepath.Join(t.TempDir(), "report.xlsx")
	code, _, errOut = runCLI(t, "experiment", "--dir", dir, "--out", xlsx)
	if _, err := os.Stat(xlsx); code != 2 || err == nil || !strings.Contains(errOut, `".xlsx"`) {
		t.Fatalf("--out report.xlsx: exit %d, %s (file written: %v)", code, errOut, err == nil)
	}
	code, _, _ = runCLI(t, "experiment", "--dir", dir, "--counter", "estimate", "--out", xlsx, "--format", "csv")
	if b, _ := os.ReadFile(xlsx); code != 0 || !strings.HasPrefix(string(b), "file,") {
		t.Fatalf("--format csv wins over the extension: exit %d, %.100s", code, b)
	}
}

// sweep is a client: against a running service's NATS it enqueues what is over budget,
// logs nothing at its default level (no summarizer, no "pipeline ready"), prints one
// summary line, or its stats document with --json.
func TestSweepClient(t *testing.T) {
	t.Parallel()
	skip := pipeline.HandlerFunc(func(ctx context.Context, job wire.Job, f string) (wire.Result, error) {
		return wire.Result{Tally: wire.Tally{Outcome: pipeline.OutcomeSkipped, Reason: "nothing to do"}}, nil
	})
	srv := pipelinetest.Start(t, pipelinetest.Options{Handler: skip}) // a worker serves the store
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "testdata/corpus/10-tricky-parallel.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(srv.StoreDir, "--p--"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(srv.StoreDir, "--p--", "s.jsonl"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"sweep", "--store", "default=" + srv.StoreDir, "--nats-url", srv.URL(), "--nats-token-file", srv.NATS().TokenFile, "--idle", "0", "--context-window", "40000"}
	code, out, errOut := runCLI(t, args...)
	if code != 0 || errOut != "" || !strings.HasPrefix(out, "sweep: 1 files in 1 stores: ") || strings.Count(out, "\n") != 1 || !strings.Contains(out, "1 enqueued") {
		t.Fatalf("sweep: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	code, out, errOut = runCLI(t, append(args, "--json")...)
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != 0 || errOut != "" {
		t.Fatalf("sweep --json: exit %d, %v\n%s\n%s", code, err, out, errOut)
	}
	for _, k := range []string{"stores", "files", "unchanged", "active", "assessed", "overBudget", "underBudget", "ineligible", "enqueued", "alreadyQueued", "errors", "durationSeconds"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("sweep --json lacks %s: %s", k, out)
		}
	}
	if doc["unchanged"] != float64(1) {
		t.Errorf("second sweep: %s", out)
	}
}

// wideSession writes a session whose summarized part reads many files: its file lists
// are most of its summary.
func wideSession(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "wide.jsonl")
	if err := (sessiongen.Wide{Turns: 30, Reads: 10, ReadFiles: 300}).WriteFile(file); err != nil {
		t.Fatal(err)
	}
	return file
}

// A compaction that would leave the session over budget lists fewer files and says so:
// a line in the summary for people, the trimmed object in the JSON.
func TestCompactSaysWhatItTrimmed(t *testing.T) {
	t.Parallel()
	args := []string{"--context-window", "20384", "--keep-recent-tokens", "2000"}
	code, out, errOut := runCLI(t, append([]string{"compact", wideSession(t)}, args...)...)
	if code != 0 || !regexp.MustCompile(`\n  trimmed to fit the budget of 4000 tokens: listed the \d+ most recent of \d{3} read files and 0 of 0 modified files \(the details keep them all\); context \d+ -> \d+ tokens\n`).MatchString(out) {
		t.Fatalf("compact (exit %d):\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, append([]string{"compact", wideSession(t), "--json"}, args...)...)
	var res engine.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 {
		t.Fatalf("compact --json (exit %d, %v): %s%s", code, err, out, errOut)
	}
	if tr := res.Trimmed; tr == nil || tr.Threshold != 4000 || tr.ReadFiles < 200 || tr.ReadFilesListed >= tr.ReadFiles || tr.TokensAfter != res.TokensAfter || res.TokensAfter > 4000 || tr.TokensUntrimmed <= 4000 {
		t.Fatalf("result %d tokens after, trimmed %+v", res.TokensAfter, res.Trimmed)
	}
}
