package cli

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/internal/scriptllm"
)

// experimentDir copies a few corpus sessions (one v1) and one unreadable file into a
// temporary directory, with a subdirectory to check the recursive walk.
func experimentDir(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{
		"testdata/corpus/07-long-outputs.jsonl":              "07-long-outputs.jsonl",
		"testdata/corpus/10-tricky-parallel.jsonl":           "10-tricky-parallel.jsonl",
		"testdata/corpus/bad/legacy-v1.jsonl":                "sub/legacy-v1.jsonl",
		"testdata/corpus/bad/not-json.jsonl":                 "sub/not-json.jsonl",
		"testdata/corpus/12-tricky-custom-message-cut.jsonl": "sub/12.jsonl",
	} {
		b, err := os.ReadFile(filepath.Join(root, src))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not a session"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestExperimentJSON(t *testing.T) {
	t.Parallel()
	dir := experimentDir(t)
	code, out, errOut := runCLI(t, "experiment", "--dir", dir, "--counter", "estimate", "--keep-recent-tokens", "5000,20000",
		"--replay", "--context-window", "40000", "--format", "json", "--workers", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res struct {
		Files, Sessions int
		Snapshot        []map[string]any
		Replay          []map[string]any
		ReplayTotals    []map[string]any
		Errors          []struct{ File, Reason string }
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("output is not JSON: %v\n%.300s", err, out)
	}
	if res.Files != 5 || res.Sessions != 4 || len(res.Snapshot) != 4*3*2 || len(res.Replay) != 4*3*2 || len(res.ReplayTotals) != 3*2 {
		t.Fatalf("files %d sessions %d snapshot %d replay %d totals %d", res.Files, res.Sessions, len(res.Snapshot), len(res.Replay), len(res.ReplayTotals))
	}
	if len(res.Errors) != 1 || res.Errors[0].File != "sub/not-json.jsonl" || res.Errors[0].Reason == "" {
		t.Fatalf("errors %+v, want sub/not-json.jsonl with a reason", res.Errors)
	}
	compactions := 0.0
	for _, r := range res.Replay {
		compactions += r["compactions"].(float64)
		if r["policy"] != "pi" && r["violations"].(float64) != 0 {
			t.Errorf("%v %v: violations", r["file"], r["policy"])
		}
	}
	if compactions == 0 {
		t.Error("nothing compacted with a 40000 window")
	}
}

func TestExperimentTableCSVAndHTML(t *testing.T) {
	t.Parallel()
	dir := experimentDir(t)
	code, out, errOut := runCLI(t, "experiment", dir, "--counter", "estimate", "--policies", "pi,nearest")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"SNAPSHOT TOTALS", "nearest", "10-tricky-parallel.jsonl", "SKIPPED 1 files", "sub/not-json.jsonl"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "REPLAY") {
		t.Error("table has a replay section without --replay")
	}

	code, out, errOut = runCLI(t, "experiment", "--dir", dir, "--counter", "estimate", "--format", "csv", "--replay", "--summarizer", "none", "--context-window", "40000")
	if code != 0 {
		t.Fatalf("csv: exit %d: %s", code, errOut)
	}
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1+4*3 || recs[0][0] != "file" || !strings.Contains(strings.Join(recs[0], ","), "summarizerTokens") {
		t.Fatalf("csv: %d records, header %v", len(recs), recs[0])
	}

	html := filepath.Join(t.TempDir(), "report.html")
	code, _, errOut = runCLI(t, "experiment", "--dir", dir, "--counter", "estimate", "--replay", "--context-window", "40000", "--out", html)
	if code != 0 {
		t.Fatalf("html: exit %d: %s", code, errOut)
	}
	b, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "<!DOCTYPE html>") || !strings.Contains(string(b), `<script type="application/json" id="data">`) || !strings.Contains(string(b), "<svg") {
		t.Errorf("--out report.html did not write an HTML report: %.200s", b)
	}
	if !strings.Contains(errOut, "wrote "+html) {
		t.Errorf("stderr %q does not say where the report went", errOut)
	}
}

func TestExperimentUsageErrors(t *testing.T) {
	t.Parallel()
	dir := experimentDir(t)
	for _, args := range [][]string{
		{"experiment"},
		{"experiment", "--dir", filepath.Join(dir, "missing")},
		{"experiment", "--dir", dir, "--policies", "pi,bogus"},
		{"experiment", "--dir", dir, "--counter", "words"},
		{"experiment", "--dir", dir, "--keep-recent-tokens", "5k"},
		{"experiment", "--dir", dir, "--format", "xml"},
		{"experiment", "--dir", dir, "--summarizer", "gpt"},
		{"experiment", "--dir", t.TempDir()},
		{"experiment", "--dir", dir, "extra"},
	} {
		code, _, errOut := runCLI(t, args...)
		if code != ExitBadUse || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q; want %d with a message", args, code, errOut, ExitBadUse)
		}
	}
}

// evalDir holds one session that compacts many times at a 46,384-token window.
func evalDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "testdata/corpus/pi-generated/before-compaction.migrated-v3.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "s.jsonl"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// --eval with the extractive summarizer and the scripted model over HTTP: recall per probe
// kind and summarizer, the first span after later compactions, the LLM's calls and tokens
// as the server counted them, an estimate printed before it starts.
func TestExperimentEvalWithLLM(t *testing.T) {
	t.Parallel()
	srv := scriptllm.StartTest(t, scriptllm.WithSummaryDelay(0))
	dir := evalDir(t)
	args := []string{"experiment", "--dir", dir, "--counter", "estimate", "--policies", "nearest", "--keep-recent-tokens", "5000",
		"--context-window", "46384", "--replay", "--eval", "--summarizer", "extractive,llm", "--base-url", srv.URL(), "--model", "scripted"}
	code, out, errOut := runCLI(t, append(args, "--format", "json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res struct {
		Summarizers  []string
		Evaluated    bool
		ReplayTotals []struct {
			Summarizer                                             string
			Compactions, LLMCalls, LLMInputTokens, LLMOutputTokens int
			LLMCachedInputTokens                                   int
			SummaryTokensMean                                      int
		}
		RecallTotals []struct {
			Summarizer, ProbeKind string
			Probes, Found         int
		}
		EarlyTotals []struct {
			Summarizer        string
			After, Sessions   int
			FactProbes        int
			SummaryTokensMean int
		}
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("output is not JSON: %v\n%.300s", err, out)
	}
	if !res.Evaluated || strings.Join(res.Summarizers, ",") != "extractive,llm" || len(res.ReplayTotals) != 2 {
		t.Fatalf("evaluated %v, summarizers %v, totals %+v", res.Evaluated, res.Summarizers, res.ReplayTotals)
	}
	var calls, prompt, completion int
	for _, r := range srv.Requests() {
		if r.Kind != scriptllm.KindSummary {
			t.Fatalf("request %d is not a summary request", r.Seq)
		}
		calls++
		prompt += r.PromptTokens
		completion += r.CompletionTokens
	}
	for _, tot := range res.ReplayTotals {
		if tot.Compactions < 10 || tot.SummaryTokensMean == 0 {
			t.Errorf("%s: %d compactions, mean summary %d", tot.Summarizer, tot.Compactions, tot.SummaryTokensMean)
		}
		switch tot.Summarizer {
		case "extractive":
			if tot.LLMCalls != 0 || tot.LLMInputTokens != 0 {
				t.Errorf("extractive reports LLM usage %+v", tot)
			}
		case "llm":
			if tot.LLMCalls != calls || tot.LLMInputTokens != prompt || tot.LLMOutputTokens != completion || calls < tot.Compactions {
				t.Errorf("llm usage %+v; the server answered %d calls, %d prompt and %d completion tokens", tot, calls, prompt, completion)
			}
		}
	}
	kinds := map[string]map[string][2]int{}
	for _, rt := range res.RecallTotals {
		if kinds[rt.Summarizer] == nil {
			kinds[rt.Summarizer] = map[string][2]int{}
		}
		kinds[rt.Summarizer][rt.ProbeKind] = [2]int{rt.Found, rt.Probes}
	}
	for _, sum := range []string{"extractive", "llm"} {
		for _, kind := range []string{"fileRead", "fileModified", "command", "failedCommand", "request", "constraint", "number"} {
			if kinds[sum][kind][1] == 0 {
				t.Errorf("%s: no %s probes", sum, kind)
			}
		}
	}
	// The scripted model writes the same few lines whatever the span: it recalls the
	// requests only where the kept messages repeat them; the extractive one keeps them.
	ex, llm := kinds["extractive"]["request"], kinds["llm"]["request"]
	if ex[0]*10 < ex[1]*9 || llm[0] >= ex[0] {
		t.Errorf("requests recalled: extractive %d of %d, scripted model %d of %d", ex[0], ex[1], llm[0], llm[1])
	}
	after := map[int]int{}
	for _, e := range res.EarlyTotals {
		if e.Sessions == 1 {
			after[e.After]++
		}
	}
	if after[1] != 2 || after[2] != 2 || after[5] != 2 || after[10] != 2 {
		t.Errorf("first-span milestones reached: %v", after)
	}
	if !strings.Contains(errOut, "--summarizer llm (scripted at "+srv.URL()+"): about ") || !strings.Contains(errOut, fmt.Sprintf("llm: %d calls, %d input tokens (0 cached), %d output tokens", calls, prompt, completion)) {
		t.Errorf("stderr does not give the estimate and the usage:\n%s", errOut)
	}

	// The table and the CSV carry the same evaluation.
	code, table, errOut := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("table: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"RECALL (", "FIRST SPAN (", "failedCommand", "llm calls"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	code, csvOut, errOut := runCLI(t, append(args, "--format", "csv")...)
	if code != 0 {
		t.Fatalf("csv: exit %d: %s", code, errOut)
	}
	recs, err := csv.NewReader(strings.NewReader(csvOut)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || !slices.Contains(recs[0], "eval.recall.failedCommand.found") || !slices.Contains(recs[0], "eval.milestones.3.firstSpan.request.probes") {
		t.Errorf("csv: %d records, header %v", len(recs), recs[0])
	}
}

// The spend limit is checked against the estimate before any request is made.
func TestExperimentLLMSpendLimit(t *testing.T) {
	t.Parallel()
	srv := scriptllm.StartTest(t, scriptllm.WithSummaryDelay(0))
	code, _, errOut := runCLI(t, "experiment", "--dir", evalDir(t), "--counter", "estimate", "--policies", "nearest", "--keep-recent-tokens", "5000",
		"--context-window", "46384", "--replay", "--summarizer", "llm", "--base-url", srv.URL(), "--model", "scripted", "--llm-spend-limit", "10000")
	if code != ExitBadUse || !strings.Contains(errOut, "--llm-spend-limit 10000: the replay would send about ") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if n := srv.Count(); n != 0 {
		t.Errorf("%d requests made over the limit", n)
	}
	for _, args := range [][]string{
		{"--eval"},                          // needs --replay
		{"--replay", "--summarizer", "llm"}, // needs a model
		{"--replay", "--summarizer", "extractive,extractive"},
		{"--replay", "--summary-budget", "0"},
	} {
		code, _, errOut := runCLI(t, append([]string{"experiment", "--dir", evalDir(t)}, args...)...)
		if code != ExitBadUse || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
}
