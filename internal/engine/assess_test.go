package engine

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
)

// TestAssessTailMatchesFullRead: CheckBudget reads only the end of a file; its assessment must be
// the one the full read gives (the session, the leaf, the model, the tokens, the budget) on
// every corpus file, v1/v2 ones included (those fall back to the full read).
func TestAssessTailMatchesFullRead(t *testing.T) {
	t.Parallel()
	files := v3Corpus(t)
	more, _ := filepath.Glob("../../testdata/corpus/pi-repo/*.jsonl")
	eng, err := New(summarize.NewExtractive(), Settings{})
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range append(files, more...) {
		a, err := eng.CheckBudget(context.Background(), file)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		src, err := eng.load(sessionio.Named(file), eng.Settings) // the full read
		if err != nil {
			t.Fatal(err)
		}
		want := &Budget{SessionID: src.Session.Header.ID, LeafID: src.Session.LeafID(), Version: src.Session.Version(),
			HasAssistant: src.Session.HasAssistant(), ContextWindow: src.Model.ContextWindow, Model: src.Model.ModelID, ModelKnown: src.Model.Known,
			Tokens: cutpoint.ContextTokens(src.Path, src.Release, src.Counter), Threshold: src.Model.ContextWindow - eng.Settings.ReserveTokens}
		n := len(src.Path)
		want.LeafIsCompaction = n > 0 && src.Path[n-1].Type == sessionio.TypeCompaction
		want.OverBudget = !want.LeafIsCompaction && cutpoint.OverBudget(want.Tokens, cutpoint.Settings{ReserveTokens: eng.Settings.ReserveTokens, ContextWindow: src.Model.ContextWindow})
		if *a != *want {
			t.Errorf("%s:\ntail %+v\nfull %+v", filepath.Base(file), *a, *want)
		}
	}
}
