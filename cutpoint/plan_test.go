package cutpoint

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/compactor-dev/compactor/internal/pigolden"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/tokenize"
	"pgregory.net/rapid"
)

func TestByName(t *testing.T) {
	t.Parallel()
	for _, n := range Names() {
		p, err := ByName(n)
		if err != nil || p.Name() != n {
			t.Errorf("ByName(%q) = %v, %v", n, p, err)
		}
	}
	if _, err := ByName("bogus"); err == nil {
		t.Error("ByName(bogus) succeeded")
	}
}

func TestOverBudget(t *testing.T) {
	t.Parallel()
	s := Settings{ReserveTokens: 16384, ContextWindow: 200000}
	if OverBudget(183616, s) || !OverBudget(183617, s) {
		t.Error("threshold must be strictly greater than window - reserve")
	}
	if !OverBudget(0, Settings{ReserveTokens: 16384}) {
		t.Error("an unknown window (0) is always over budget, as in Pi")
	}
}

func TestPlanJSONShapes(t *testing.T) {
	t.Parallel()
	pi073 := DefaultSettings()
	pi073.Release = pi.MustParseRelease("0.73.1")
	path, _ := loadPath(t, filepath.Join(repoTestdata, "corpus", "09-ends-with-compaction.jsonl"))
	// Pi 0.73 counts the usage of a kept answer from before the compaction; Pi 1.6 does not,
	// and estimates the projection instead (2602 is what Pi 1.6.0 prints for this file).
	for _, tc := range []struct {
		s    Settings
		want string
	}{
		{pi073, `{"prepared":false,"reason":"last entry on the branch is a compaction (Pi: 'Already compacted')","policy":"pi","counter":"estimate@0.73.0","piVersion":"0.73.1","tokensBefore":19068}`},
		{DefaultSettings(), `{"prepared":false,"reason":"last entry on the branch is a compaction (Pi: 'Already compacted')","policy":"pi","counter":"estimate","piVersion":"1.6.0","tokensBefore":2602}`},
	} {
		p, err := Pi{}.Plan(path, tc.s, tokenize.EstimateFor(tc.s.Release))
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tc.want {
			t.Errorf("unprepared JSON\n got %s\nwant %s", b, tc.want)
		}
	}

	path, _ = loadPath(t, filepath.Join(repoTestdata, "corpus", "01-minimal.jsonl"))
	p, _ := Pi{}.Plan(path, pi073, tokenize.EstimateFor(pi.MustParseRelease("0.73.1")))
	var m map[string]any
	b, _ := json.Marshal(p)
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["previousCompactionId"] != nil || m["previousSummary"] != nil || m["turnStartEntryId"] != nil {
		t.Errorf("absent ids must be null: %s", b)
	}
	if l, ok := m["messagesToSummarize"].([]any); !ok || len(l) != 0 {
		t.Errorf("messagesToSummarize must be [], got %s", b)
	}
	if got := string(p.Details()); got != `{"readFiles":[],"modifiedFiles":[]}` {
		t.Errorf("Details() = %s", got)
	}
	// Pi 1.6 makes no plan when nothing would be summarized.
	if p, _ := (Pi{}).Plan(path, DefaultSettings(), tokenize.Estimate()); p.Prepared || p.Reason != ReasonNothingToSummarize {
		t.Errorf("Pi 1.6, nothing to summarize: prepared %v (%s)", p.Prepared, p.Reason)
	}
}

// TestDifferentialAgainstPi compares the pi policy with the real Pi on random sessions
// from the property-test generator. It runs the Pi harness (make interop: COMPACTOR_INTEROP=1;
// PI_HARNESS, else interop/pi/pi; PI_VERSION picks the Pi) and optionally CUTPOINT_DIFF_N
// (default 40).
func TestDifferentialAgainstPi(t *testing.T) {
	if os.Getenv("COMPACTOR_INTEROP") != "1" {
		t.Skip("set COMPACTOR_INTEROP=1 (make interop) to compare with the real Pi")
	}
	oracle, err := pigolden.Harness()
	if err != nil {
		t.Fatal(err)
	}
	n := 40
	if v, err := strconv.Atoi(os.Getenv("CUTPOINT_DIFF_N")); err == nil && v > 0 {
		n = v
	}
	// The Pi the harness runs (PI_VERSION; the old oracle is 0.73.1).
	dialect := pi.MustParseRelease("0.73.1")
	if v := os.Getenv("PI_VERSION"); v != "" {
		d, err := pi.ParseRelease(v)
		if err != nil {
			t.Fatal(err)
		}
		dialect = d
	}
	gen := rapid.Custom(func(t *rapid.T) []byte { return genSession(t, dialect) })
	dir := t.TempDir()
	for i := 0; i < n; i++ {
		data := gen.Example(i)
		file := filepath.Join(dir, "gen-"+strconv.Itoa(i)+".jsonl")
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		keep := []int{0, 300, 2000, 20000}[i%4]
		out, err := exec.Command(oracle, "cut", file, "--keep-recent-tokens", strconv.Itoa(keep), "--compact").Output()
		if err != nil {
			t.Fatalf("%s: interop/pi/pi cut: %v", file, err)
		}
		var want oracleCut
		if err := json.Unmarshal(out, &want); err != nil {
			t.Fatal(err)
		}
		s, err := sessionio.Parse(data, file)
		if err != nil {
			t.Fatal(err)
		}
		path, _ := s.Path("")
		settings := DefaultSettings()
		settings.Release = dialect
		settings.KeepRecentTokens = keep
		got, _ := Pi{}.Plan(path, settings, tokenize.EstimateFor(settings.Release))
		gb, _ := json.Marshal([]any{got.Prepared, got.FirstKeptEntryID, got.IsSplitTurn, got.TurnStartIndex, got.TokensBefore,
			ids(got.MessagesToSummarize), ids(got.TurnPrefix), got.FileOps.Read, got.FileOps.Written, got.FileOps.Edited, got.FileOps.ReadFiles, got.FileOps.ModifiedFiles})
		if !want.Prepared {
			gb, _ = json.Marshal(got.Prepared)
		}
		wb, _ := json.Marshal([]any{want.Prepared, want.FirstKeptEntryID, want.IsSplitTurn, want.TurnStartIndex, want.TokensBefore,
			ids(want.MessagesToSummarize), ids(want.TurnPrefix), nonNil(want.FileOps.Read), nonNil(want.FileOps.Written), nonNil(want.FileOps.Edited), nonNil(want.FileOps.ReadFiles), nonNil(want.FileOps.ModifiedFiles)})
		if !want.Prepared {
			wb, _ = json.Marshal(want.Prepared)
		}
		if string(gb) != string(wb) {
			// Kept past the test (a t.TempDir would go) under a name of its own, so that runs
			// side by side cannot overwrite each other's.
			keepFile := "(not saved)"
			if f, err := os.CreateTemp("", "cutpoint-diff-"+strconv.Itoa(i)+"-*.jsonl"); err == nil {
				_, _ = f.Write(data)
				_ = f.Close()
				keepFile = f.Name()
			}
			t.Errorf("session %d (keep %d, saved as %s):\n got %s\nwant %s", i, keep, keepFile, trunc(gb), trunc(wb))
		}
	}
}
