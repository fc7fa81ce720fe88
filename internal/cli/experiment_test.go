package cli

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
