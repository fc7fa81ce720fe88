package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/sessionio"
)

// run --once and sweep through the NewPipelineHandler hook. Not parallel: it sets the hook.
func TestRunOnceAndSweepCommands(t *testing.T) {
	dir := t.TempDir()
	env := func(args ...string) (*Env, *bytes.Buffer, *bytes.Buffer) {
		var out, errb bytes.Buffer
		return &Env{Args: args, Stdout: &out, Stderr: &errb, Getenv: func(k string) string {
			if k == "COMPACTOR_DATA_DIR" {
				return filepath.Join(dir, "data")
			}
			return ""
		}}, &out, &errb
	}
	useSkippingHandler(t)
	file := filepath.Join(dir, "s.jsonl")
	if err := os.WriteFile(file, []byte(`{"type":"session","version":3,"id":"abc","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e, out, errb := env("run", "--once", "--store", "default="+dir, "--idle", "0", "--log-format", "json")
	if code := Run(context.Background(), e); code != ExitOK {
		t.Fatalf("run --once: exit %d\n%s\n%s", code, out, errb)
	}
	if !strings.Contains(out.String(), "sweep: 1 files") || !strings.Contains(out.String(), "1 jobs: 0 done, 1 skipped") {
		t.Errorf("run --once output:\n%s", out)
	}
	e, _, errb = env("run", "--store", "bad.name="+dir)
	if code := Run(context.Background(), e); code != ExitBadUse {
		t.Errorf("bad store: exit %d %q", code, errb)
	}
	e, out, _ = env("sweep", "--help")
	if code := Run(context.Background(), e); code != ExitOK || !strings.Contains(out.String(), "Examples:") {
		t.Errorf("sweep --help: %d %s", code, out)
	}
}

// TestDemoRunOnce is `make demo` in process: the service on its embedded defaults with the
// example config over a copy of examples/sessions. Every session over budget is compacted
// once, the rest are left alone, and the files end in a compaction Pi will load.
func TestDemoRunOnce(t *testing.T) {
	root := repoRoot(t)
	dir := t.TempDir()
	sessions := filepath.Join(dir, "sessions")
	if err := os.CopyFS(sessions, os.DirFS(filepath.Join(root, "examples/sessions"))); err != nil {
		t.Fatal(err)
	}
	before := map[string]int64{}
	files, _ := filepath.Glob(filepath.Join(sessions, "*", "*.jsonl"))
	for _, f := range files {
		st, _ := os.Stat(f)
		before[f] = st.Size()
	}
	if len(files) < 5 {
		t.Fatalf("examples/sessions has %d files", len(files))
	}
	code, out, errOut := runCLI(t, "run", "--once", "--config", filepath.Join(root, "configs/example.json"),
		"--store", "example="+sessions, "--data-dir", filepath.Join(dir, "nats"), "--log-level", "warn")
	if code != ExitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "4 jobs: 4 done, 0 skipped, 0 failed") || !strings.Contains(out, "left alone: 3 under budget") {
		t.Fatalf("report:\n%s", out)
	}
	// The table names each file it changed.
	named := 0
	for _, f := range files {
		st, _ := os.Stat(f)
		rel, _ := filepath.Rel(sessions, f)
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "example ") && strings.Contains(line, " "+rel+" ") {
				named++
				if st.Size() == before[f] || !strings.Contains(line, " compact ") || !strings.Contains(line, " done ") {
					t.Errorf("report line for %s (size %d -> %d): %s", rel, before[f], st.Size(), line)
				}
			}
			// The files left alone are named, with why.
			if strings.HasPrefix(line, "  example ") && strings.Contains(line, " "+rel+" ") && (st.Size() != before[f] || !strings.HasSuffix(line, " under budget")) {
				t.Errorf("left-alone line for %s (size %d -> %d): %s", rel, before[f], st.Size(), line)
			}
		}
	}
	if n := strings.Count(out, " under budget\n"); n != 3+1 { // 3 files and the count line
		t.Errorf("%d under-budget lines, want the 3 files and the count:\n%s", n, out)
	}
	if named != 4 {
		t.Errorf("the report names %d files, want the 4 compacted:\n%s", named, out)
	}
	compacted := 0
	for _, f := range files {
		s, err := sessionio.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		leaf := s.Get(s.LeafID())
		if s.Size != before[f] {
			if leaf.Type != sessionio.TypeCompaction {
				t.Errorf("%s grew but its leaf is a %s", f, leaf.Type)
			}
			compacted++
		}
	}
	if compacted != 4 {
		t.Fatalf("%d files compacted, want 4", compacted)
	}
	// A second run finds nothing new to do.
	code, out, _ = runCLI(t, "run", "--once", "--config", filepath.Join(root, "configs/example.json"),
		"--store", "example="+sessions, "--data-dir", filepath.Join(dir, "nats"), "--log-level", "warn")
	if code != ExitOK || !strings.Contains(out, "3 unchanged") || !strings.Contains(out, "0 jobs: 0 done") {
		t.Fatalf("second run: exit %d\n%s", code, out)
	}
	// --json: the run report document; on freshly copied files with the default --idle
	// everything is active, and the human report says why nothing ran.
	fresh := filepath.Join(dir, "fresh")
	if err := os.CopyFS(fresh, os.DirFS(filepath.Join(root, "examples/sessions"))); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(t, "run", "--once", "--json", "--config", filepath.Join(root, "configs/example.json"),
		"--store", "example="+sessions, "--data-dir", filepath.Join(dir, "nats"), "--log-level", "warn")
	var rep struct {
		Sweep *struct {
			Files, Unchanged, UnderBudget int
			DurationSeconds               float64
		} `json:"sweep"`
		LeftAlone       []struct{ Store, Path, Result string } `json:"leftAlone"`
		Jobs            []map[string]any                       `json:"jobs"`
		Counts          map[string]int                         `json:"counts"`
		DurationSeconds float64                                `json:"durationSeconds"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != ExitOK || rep.Sweep == nil || rep.Sweep.Files != 7 || rep.Sweep.Unchanged != 7 ||
		len(rep.Jobs) != 0 || len(rep.LeftAlone) != 7 || rep.LeftAlone[0].Result != "unchanged" || rep.LeftAlone[0].Store != "example" || len(rep.Counts) != 4 || rep.Counts["done"] != 0 || rep.DurationSeconds <= 0 {
		t.Fatalf("run --once --json (exit %d, %v):\n%s\n%s", code, err, out, errOut)
	}
	code, out, _ = runCLI(t, "run", "--once", "--store", "fresh="+fresh, "--data-dir", filepath.Join(dir, "nats2"), "--log-level", "warn",
		"--context-window", "40000", "--keep-recent-tokens", "8000")
	if code != ExitOK || !strings.Contains(out, "7 active (modified within --idle 10m0s)") || !strings.Contains(out, "note: 7 sessions were modified within the last 10m0s") ||
		!strings.Contains(out, "--idle 0") {
		t.Fatalf("fresh copies: exit %d\n%s", code, out)
	}
}
