package cutpoint

import (
	"github.com/compactor-dev/compactor/tokenize"
	"path/filepath"
	"testing"

	"github.com/compactor-dev/compactor/pi"
)

// TestTrickyParallel shows what each policy does with corpus file 10: three parallel tool
// calls whose results (10000 + 12500 + 21 tokens) cross the 20000-token budget. Pi can
// only move forward from the tool result where the budget is crossed and keeps the last
// assistant message (16 tokens); nearest cuts at the assistant that made the calls and
// keeps all three results with it.
func TestTrickyParallel(t *testing.T) {
	t.Parallel()
	path, _ := loadPath(t, filepath.Join(repoTestdata, "corpus", "10-tricky-parallel.jsonl"))
	s := DefaultSettings()
	s.Release = pi.MustParseRelease("0.73.1")
	kept := map[string]int{}
	for _, name := range Names() {
		pol, err := ByName(name)
		if err != nil {
			t.Fatal(err)
		}
		p, err := pol.Plan(path, s, tokenize.EstimateFor(s.Release))
		if err != nil {
			t.Fatal(err)
		}
		if v := CheckInvariants(path, p); len(v) != 0 {
			t.Errorf("%s: violations %v", name, v)
		}
		kept[name] = p.KeptTokens
		t.Logf("%-8s firstKept=%s split=%v summarized=%d tok prefix=%d tok kept=%d tok (budget %d)",
			name, p.FirstKeptEntryID, p.IsSplitTurn, p.SummarizedTokens, p.TurnPrefixTokens, p.KeptTokens, s.KeepRecentTokens)
		switch name {
		case PolicyPi:
			if p.FirstKeptEntryID != "aaaa000a" || p.KeptTokens != 16 {
				t.Errorf("pi: firstKept %s keeps %d, want aaaa000a keeping 16", p.FirstKeptEntryID, p.KeptTokens)
			}
		case PolicyNearest:
			if p.FirstKeptEntryID != "aaaa0006" || p.IsSplitTurn != true || len(p.TurnPrefix) != 1 {
				t.Errorf("nearest: firstKept %s split %v prefix %v, want aaaa0006, split, prefix [aaaa0005]", p.FirstKeptEntryID, p.IsSplitTurn, p.TurnPrefix)
			}
		case PolicyTurn:
			if p.FirstKeptEntryID != "aaaa0005" || p.IsSplitTurn {
				t.Errorf("turn: firstKept %s split %v, want aaaa0005 unsplit", p.FirstKeptEntryID, p.IsSplitTurn)
			}
		}
	}
	if kept[PolicyNearest] < 20000 || kept[PolicyNearest] > 25000 {
		t.Errorf("nearest keeps %d tokens, want close to the 20000 budget", kept[PolicyNearest])
	}
}
