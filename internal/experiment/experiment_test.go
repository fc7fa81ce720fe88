package experiment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/compactor-dev/compactor/internal/pigolden"
	"github.com/compactor-dev/compactor/sessionio/picontext"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/tokenize"
)

const corpusDir = "../../testdata/corpus"

var (
	corpusOnce sync.Once
	corpusRes  *Result
	corpusErr  error
)

// recordedFiles lists the recorded corpus: every session file under testdata/corpus except
// the generated corpora of the Pi harness (gen-<version>/), which have goldens of their own.
func recordedFiles() ([]string, error) {
	all, _, err := Files(corpusDir)
	var files []string
	for _, f := range all {
		if !strings.HasPrefix(filepath.Base(filepath.Dir(f)), "gen-") {
			files = append(files, f)
		}
	}
	return files, err
}

// corpusResult runs the experiment once over the recorded corpus (estimate counter, both Pi
// goldens' settings, snapshot and replay with a 64000 window so sessions compact, probes
// evaluated).
func corpusResult(t *testing.T) *Result {
	t.Helper()
	corpusOnce.Do(func() {
		var files []string
		if files, corpusErr = recordedFiles(); corpusErr != nil {
			return
		}
		corpusRes, corpusErr = RunFiles(context.Background(), corpusDir, files, Config{
			Pi:      "0.73.1", // the goldens are Pi 0.73.1's
			Counter: tokenize.CounterEstimate, KeepRecentTokens: []int{5000, 20000}, Replay: true, Eval: true, ContextWindow: 64000,
		})
	})
	if corpusErr != nil {
		t.Fatal(corpusErr)
	}
	return corpusRes
}

// TestPiSnapshotMatchesPiGoldens: the pi policy's snapshot rows with the estimate counter
// equal what the real Pi 0.73.1 printed (interop/pi/pi cut) for every corpus file with a golden.
func TestPiSnapshotMatchesPiGoldens(t *testing.T) {
	t.Parallel()
	r := corpusResult(t)
	checked := 0
	for _, row := range r.Snapshot {
		if row.Policy != cutpoint.PolicyPi {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(row.File), ".jsonl")
		raw, err := pigolden.Bytes("0.73.1", name, fmt.Sprintf("cut-%d", row.KeepRecentTokens))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var want struct {
			Prepared            bool     `json:"prepared"`
			Reason              string   `json:"reason"`
			FirstKeptEntryID    string   `json:"firstKeptEntryId"`
			TokensBefore        int      `json:"tokensBefore"`
			IsSplitTurn         bool     `json:"isSplitTurn"`
			MessagesToSummarize []string `json:"messagesToSummarize"`
			TurnPrefix          []string `json:"turnPrefix"`
			ContextEstimate     struct {
				Tokens int `json:"tokens"`
			} `json:"contextEstimate"`
		}
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		checked++
		at := fmt.Sprintf("%s keep %d", row.File, row.KeepRecentTokens)
		if row.Prepared != want.Prepared {
			t.Errorf("%s: prepared %v, Pi %v", at, row.Prepared, want.Prepared)
			continue
		}
		if !want.Prepared {
			if row.Reason != want.Reason || row.TokensBefore != want.ContextEstimate.Tokens {
				t.Errorf("%s: reason %q tokens %d, Pi %q %d", at, row.Reason, row.TokensBefore, want.Reason, want.ContextEstimate.Tokens)
			}
			continue
		}
		if row.Version == 3 && row.FirstKeptEntryID != want.FirstKeptEntryID {
			t.Errorf("%s: firstKeptEntryId %s, Pi %s", at, row.FirstKeptEntryID, want.FirstKeptEntryID)
		}
		if row.TokensBefore != want.TokensBefore || row.SplitTurn != want.IsSplitTurn ||
			row.MessagesToSummarize != len(want.MessagesToSummarize) || row.TurnPrefix != len(want.TurnPrefix) {
			t.Errorf("%s: tokensBefore %d split %v summarize %d prefix %d; Pi %d %v %d %d", at,
				row.TokensBefore, row.SplitTurn, row.MessagesToSummarize, row.TurnPrefix,
				want.TokensBefore, want.IsSplitTurn, len(want.MessagesToSummarize), len(want.TurnPrefix))
		}
	}
	// 13 numbered files, 2 v1 files from Pi's repository, the synthetic one and its migrated
	// v3 copy, at 2 settings.
	if checked != 34 {
		t.Errorf("checked %d goldens, want 34", checked)
	}
}

func TestCorpusRunsEverything(t *testing.T) {
	t.Parallel()
	r := corpusResult(t)
	files, err := recordedFiles()
	if err != nil {
		t.Fatal(err)
	}
	if r.Files != len(files) || r.Sessions+len(r.Errors) != len(files) {
		t.Fatalf("files %d sessions %d errors %d, found %d files", r.Files, r.Sessions, len(r.Errors), len(files))
	}
	// The three files sessionio cannot read are reported, not fatal.
	bad := map[string]bool{}
	for _, e := range r.Errors {
		bad[e.File] = true
		if e.Reason == "" {
			t.Errorf("%s: empty reason", e.File)
		}
	}
	for _, f := range []string{"bad/empty.jsonl", "bad/no-header.jsonl", "bad/not-json.jsonl"} {
		if !bad[f] {
			t.Errorf("%s not reported as an error (errors: %v)", f, r.Errors)
		}
	}
	if want := r.Sessions * 3 * 2; len(r.Snapshot) != want || len(r.Replay) != want {
		t.Fatalf("%d snapshot and %d replay rows, want %d each", len(r.Snapshot), len(r.Replay), want)
	}
	for _, row := range r.Snapshot {
		if row.Policy != cutpoint.PolicyPi && row.Violations != 0 {
			t.Errorf("snapshot %s %s keep %d: %d violations: %s", row.File, row.Policy, row.KeepRecentTokens, row.Violations, row.Violation)
		}
		if row.Policy == cutpoint.PolicyPi && !row.AgreesWithPi {
			t.Errorf("pi does not agree with itself on %s", row.File)
		}
	}
	compactions := 0
	for _, row := range r.Replay {
		if row.Policy != cutpoint.PolicyPi && row.Violations != 0 {
			t.Errorf("replay %s %s keep %d: %d violations: %s", row.File, row.Policy, row.KeepRecentTokens, row.Violations, row.Violation)
		}
		compactions += row.Compactions
		if row.Compactions > 0 && (row.MinKeptTokens > row.MeanKeptTokens || row.MeanKeptTokens*row.Compactions > row.KeptTokensSum+row.Compactions) {
			t.Errorf("replay %s %s: min %d mean %d sum %d over %d", row.File, row.Policy, row.MinKeptTokens, row.MeanKeptTokens, row.KeptTokensSum, row.Compactions)
		}
		if row.Compactions > 0 && row.SummarizerTokens == 0 {
			t.Errorf("replay %s %s: %d compactions cost nothing", row.File, row.Policy, row.Compactions)
		}
	}
	if compactions == 0 {
		t.Fatal("no replay compacted anything with a 64000 window")
	}
	// Totals add up.
	for _, tot := range r.ReplayTotals {
		sum := 0
		for _, row := range r.Replay {
			if row.Policy == tot.Policy && row.KeepRecentTokens == tot.KeepRecentTokens {
				sum += row.SummarizerTokens
			}
		}
		if sum != tot.SummarizerTokens {
			t.Errorf("%s/%d: total cost %d, rows sum to %d", tot.Policy, tot.KeepRecentTokens, tot.SummarizerTokens, sum)
		}
	}
}

// TestReplayContextIsRecounted: the context size the replay tracks incrementally equals a
// full recount of the replayed path's context (picontext.Build, every message counted), at
// every step of every corpus session that compacts, with synthetic compactions in place.
func TestReplayContextIsRecounted(t *testing.T) {
	// Not parallel: it sets a package hook.
	counter := tokenize.Estimate()
	steps, withCompaction := 0, 0
	var bad []string
	checkContextHook = func(path []*sessionio.Entry, tokens int) {
		steps++
		ctx := picontext.Build(path, pi.MustParseRelease("0.73.1"))
		want := 0
		for _, m := range ctx.Messages {
			want += counter.Count(m)
		}
		if len(ctx.Messages) > 0 && ctx.Messages[0].Role == sessionio.RoleCompactionSummary {
			withCompaction++
		}
		if want != tokens && len(bad) < 5 {
			bad = append(bad, fmt.Sprintf("at %s (len %d): tracked %d, recount %d", path[len(path)-1].ID, len(path), tokens, want))
		}
	}
	defer func() { checkContextHook = nil }()
	files := []string{"05-compactions.jsonl", "07-long-outputs.jsonl", "06-custom-bash-entries.jsonl", "03-branches-labels-name.jsonl"}
	for i := range files {
		files[i] = filepath.Join(corpusDir, files[i])
	}
	for _, sum := range []string{SummarizerExtractive, SummarizerNone} {
		_, err := RunFiles(context.Background(), corpusDir, files, Config{Counter: tokenize.CounterEstimate, Replay: true,
			ContextWindow: 16384 + 9000, KeepRecentTokens: []int{3000}, Workers: 1, Summarizers: []string{sum}})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(bad) > 0 {
		t.Fatal(strings.Join(bad, "\n"))
	}
	if withCompaction == 0 {
		t.Fatalf("no step had a synthetic compaction (%d steps)", steps)
	}
}

// TestGeneratedSessionsHaveNoViolations: turn and nearest keep every invariant over 1,000
// random sessions, in snapshots and in replays (every replayed compaction is checked).
func TestGeneratedSessionsHaveNoViolations(t *testing.T) {
	t.Parallel()
	// 1,000 sessions take a few seconds; under the race detector (or -short) a sample is
	// checked unless EXPERIMENT_GENERATED sets the number.
	n := 1000
	if raceEnabled || testing.Short() {
		n = 100
	}
	if v := os.Getenv("EXPERIMENT_GENERATED"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatalf("EXPERIMENT_GENERATED=%q: %v", v, err)
		}
	}
	dir := t.TempDir()
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("gen-%04d.jsonl", i)), generateSession(uint64(i)+1), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, err := Run(context.Background(), dir, Config{Counter: tokenize.CounterEstimate, KeepRecentTokens: []int{0, 2000},
		Replay: true, ContextWindow: 16384 + 4000, Summarizers: []string{SummarizerNone}, SummaryTokens: 300})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Errors) > 0 {
		t.Fatalf("generated files failed: %v", r.Errors[0])
	}
	compactions, piViolations := 0, 0
	for _, row := range r.Snapshot {
		if row.Policy == cutpoint.PolicyPi {
			piViolations += row.Violations
			continue
		}
		if row.Violations != 0 {
			t.Errorf("snapshot %s %s keep %d: %s", row.File, row.Policy, row.KeepRecentTokens, row.Violation)
		}
	}
	for _, row := range r.Replay {
		compactions += row.Compactions
		if row.Policy == cutpoint.PolicyPi {
			piViolations += row.Violations
			continue
		}
		if row.Violations != 0 {
			t.Errorf("replay %s %s keep %d: %s", row.File, row.Policy, row.KeepRecentTokens, row.Violation)
		}
	}
	if compactions < n {
		t.Errorf("only %d replayed compactions over %d sessions: the generator or the window is too small", compactions, n)
	}
	t.Logf("%d sessions, %d replayed compactions, pi's quirk breached invariants %d times", n, compactions, piViolations)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{
		{Policies: []string{"pi", "bogus"}},
		{Policies: []string{"pi", "pi"}},
		{Counter: "words"},
		{KeepRecentTokens: []int{-1}},
		{ContextWindow: -5},
		{Summarizers: []string{"gpt"}},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

func TestRunMissingDir(t *testing.T) {
	t.Parallel()
	if _, err := Run(context.Background(), filepath.Join(t.TempDir(), "nope"), Config{}); err == nil {
		t.Fatal("no error for a missing directory")
	}
}

func TestRunIsDeterministicAcrossWorkers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for i := range 60 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("g%02d.jsonl", i)), generateSession(uint64(5000+i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"05-compactions.jsonl", "12-tricky-custom-message-cut.jsonl", "bad/not-json.jsonl"} {
		b, err := os.ReadFile(filepath.Join(corpusDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var outs []string
	for _, w := range []int{1, 4} {
		r, err := Run(context.Background(), dir, Config{Counter: tokenize.CounterEstimate, Workers: w, Replay: true,
			ContextWindow: 16384 + 8000, KeepRecentTokens: []int{1000, 3000}})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Errors) != 1 {
			t.Fatalf("errors %v, want not-json.jsonl only", r.Errors)
		}
		var b strings.Builder
		if err := WriteJSON(&b, r); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, b.String())
	}
	if outs[0] != outs[1] {
		t.Fatal("1 worker and 4 workers give different results")
	}
}
