package engine

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/tokenize"
)

// TestExtractAtPisCut: with nothing prepared, the extract answers Pi's hook at exactly Pi's
// cut (its messages and split-turn prefix summarized, its file lists), first with no
// compaction on the branch, then on top of one, whose summary it carries forward. Nothing is
// written.
func TestExtractAtPisCut(t *testing.T) {
	t.Parallel()
	// The engine's own summarizer is a stand-in model that must never be called.
	eng, err := New(failingSummarizer{}, Settings{Policy: cutpoint.PolicyNearest})
	if err != nil {
		t.Fatal(err)
	}
	file := headerOnly(t, "019a0000-0000-7000-8000-0000000e47c7")
	growSession(t, file, "", 0, 14)
	const keep = 3000
	piSettings := Settings{Policy: cutpoint.PolicyPi, Counter: tokenize.CounterEstimate, KeepRecentTokens: keep, ReserveTokens: 16384}
	check := func(round string, wantPrev string, prev *Prepared) *Prepared {
		t.Helper()
		pi, err := Plan(file, piSettings, LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := eng.Extract(context.Background(), ExtractRequest{File: file, FirstKeptEntryID: pi.Plan.FirstKeptEntryID, KeepRecentTokens: keep})
		if err != nil {
			t.Fatalf("%s: %v", round, err)
		}
		want := append(append([]string{}, pi.Plan.MessagesToSummarize...), pi.Plan.TurnPrefix...)
		if !slices.Equal(got.SummarizedEntryIDs, want) || got.FirstKeptEntryID != pi.Plan.FirstKeptEntryID || got.LeafID != pi.Path[len(pi.Path)-1].ID {
			t.Fatalf("%s: cut %s, %d entries; Pi's plan cuts at %s, %d entries", round, got.FirstKeptEntryID, len(got.SummarizedEntryIDs), pi.Plan.FirstKeptEntryID, len(want))
		}
		if deref(got.PreviousCompactionID) != wantPrev {
			t.Fatalf("%s: builds on %q, want %q", round, deref(got.PreviousCompactionID), wantPrev)
		}
		// Pi's lists, and (as every preparation does) those of a previous hook-made compaction,
		// which Pi does not carry forward.
		wantRead := slices.Clone(pi.Plan.FileOps.ReadFiles)
		if prev != nil {
			wantRead = append(wantRead, prev.Details.ReadFiles...)
		}
		slices.Sort(wantRead)
		if !slices.Equal(got.Details.ReadFiles, slices.Compact(wantRead)) || got.LLMCalls != 0 {
			t.Fatalf("%s: read files %v (Pi's %v), %d model calls", round, got.Details.ReadFiles, pi.Plan.FileOps.ReadFiles, got.LLMCalls)
		}
		if !strings.HasSuffix(got.Summary, summarize.FormatFileOperations(got.Details.ReadFiles, got.Details.ModifiedFiles)) {
			t.Fatalf("%s: the summary does not end in its file lists", round)
		}
		return got
	}
	first := check("no compaction yet", "", nil)
	if !strings.Contains(first.Summary, "Step 0: look at src/mod0.go") {
		t.Fatalf("the first request is not in the extract:\n%s", first.Summary)
	}
	// Pi writes the compaction (here: compactor's own, from the extract), the agent goes on.
	s, err := sessionio.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	comp := appendCompactionEntry(t, file, s.LeafID(), first)
	growSession(t, file, comp, 14, 26)
	second := check("on top of a compaction", comp, first)
	if !strings.Contains(second.Summary, "Step 0: look at src/mod0.go") || !strings.Contains(second.Summary, "Step 19: look at src/mod19.go") {
		t.Fatalf("the second extract lost the first request or lacks the new span:\n%s", second.Summary)
	}
	if after, _ := sessionio.ReadFile(file); after.LeafID() == comp || len(after.Entries) != len(s.Entries)+1+4*12 {
		t.Fatal("the extract wrote to the session")
	}
}

// TestExtractNothingToSummarize: a session too small to compact is stale, not an error.
func TestExtractNothingToSummarize(t *testing.T) {
	t.Parallel()
	eng, err := New(failingSummarizer{}, Settings{})
	if err != nil {
		t.Fatal(err)
	}
	file := headerOnly(t, "019a0000-0000-7000-8000-0000000e47c8")
	growSession(t, file, "", 0, 2)
	s, _ := sessionio.ReadFile(file)
	path, _ := s.Path("")
	_, err = eng.Extract(context.Background(), ExtractRequest{File: file, FirstKeptEntryID: path[0].ID, KeepRecentTokens: 20000})
	var se *StaleError
	if !errors.As(err, &se) {
		t.Fatalf("%v, want a stale answer", err)
	}
}

// headerOnly is a new session file with session id id and nothing but its header.
func headerOnly(t *testing.T, id string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "s.jsonl")
	if err := os.WriteFile(file, []byte(`{"type":"session","version":3,"id":"`+id+`","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// appendCompactionEntry appends the compaction Pi writes from a hook's value (fromHook) and
// returns its id.
func appendCompactionEntry(t *testing.T, file, parent string, p *Prepared) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"type": "compaction", "id": "c0mpe471", "parentId": parent, "timestamp": "2026-01-01T02:00:00.000Z",
		"summary": p.Summary, "firstKeptEntryId": p.FirstKeptEntryID, "tokensBefore": p.TokensBefore, "details": p.Details, "fromHook": true})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
	return "c0mpe471"
}

// failingSummarizer stands for a model the code under test must not call.
type failingSummarizer struct{}

func (failingSummarizer) Summarize(context.Context, summarize.Request) (summarize.Result, error) {
	return summarize.Result{}, errors.New("the model was called")
}
