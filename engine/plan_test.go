package engine

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/tokenize"
)

// Plan is the planning half of Compact: the same model, window, counter and plan as a dry
// run of Compact with the same settings.
func TestPlanIsCompactsPlan(t *testing.T) {
	t.Parallel()
	for _, file := range v3Corpus(t) {
		eng, err := New(summarize.NewExtractive(), Settings{KeepRecentTokens: 5000, Counter: tokenize.CounterEstimate})
		if err != nil {
			t.Fatal(err)
		}
		res, err := eng.Compact(t.Context(), Request{File: file, DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		p, err := Plan(file, Settings{Policy: cutpoint.PolicyNearest, Counter: tokenize.CounterEstimate,
			KeepRecentTokens: 5000, ReserveTokens: cutpoint.DefaultReserveTokens}, LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Model.ContextWindow != res.ContextWindow || p.Model.Known != res.ModelKnown || p.Model.ModelID != res.Model ||
			p.Counter.Name() != res.Counter || p.Plan.TokensBefore != res.TokensBefore || p.OverBudget() != res.OverBudget {
			t.Errorf("%s: Plan %+v / %s %d, Compact %+v", file, p.Model, p.Counter.Name(), p.Plan.TokensBefore, res)
		}
		if res.Plan != nil && (res.Plan.FirstKeptEntryID != p.Plan.FirstKeptEntryID || res.Plan.KeptTokens != p.Plan.KeptTokens) {
			t.Errorf("%s: Compact keeps from %s (%d tokens), Plan from %s (%d)", file, res.Plan.FirstKeptEntryID, res.Plan.KeptTokens, p.Plan.FirstKeptEntryID, p.Plan.KeptTokens)
		}
	}
	// A leaf the file does not have is bad input.
	_, err := Plan("../testdata/corpus/01-minimal.jsonl", Settings{}, LoadOptions{Leaf: "nope"})
	var ie *InputError
	if !errors.As(err, &ie) {
		t.Fatalf("unknown leaf: %v", err)
	}
}

func TestSettingsRefuseImpossibleBudgets(t *testing.T) {
	t.Parallel()
	for _, s := range []Settings{{ContextWindow: 100}, {ContextWindow: 30000}, {ContextWindow: 40000, KeepRecentTokens: 30000}} {
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "settings:") {
			t.Errorf("%+v: %v", s, err)
		}
	}
	if err := (Settings{ContextWindow: 40000}).Validate(); err != nil {
		t.Errorf("window 40000 with the defaults: %v", err)
	}
}

// A path-only plan (read from the end of the file, as `compactor plan` does) is the plan
// of the full read, field for field, on every corpus file (v1 files fall back to the full
// read), with both counters and several budgets.
func TestPlanPathOnlyIsTheFullReadsPlan(t *testing.T) {
	t.Parallel()
	files := v3Corpus(t)
	more, _ := filepath.Glob("../testdata/corpus/pi-repo/*.jsonl")
	for _, file := range append(files, more...) {
		for _, counter := range []string{tokenize.CounterEstimate, tokenize.CounterTiktoken} {
			for _, keep := range []int{2000, 20000} {
				s := Settings{Counter: counter, KeepRecentTokens: keep, ReserveTokens: cutpoint.DefaultReserveTokens}
				full, err := Plan(file, s, LoadOptions{})
				if err != nil {
					t.Fatal(err)
				}
				tail, err := Plan(file, s, LoadOptions{Read: ReadPath})
				if err != nil {
					t.Fatal(err)
				}
				a, _ := json.Marshal(full.Plan)
				b, _ := json.Marshal(tail.Plan)
				if string(a) != string(b) || len(full.Path) != len(tail.Path) || full.Model != tail.Model {
					t.Errorf("%s (%s, keep %d): the path-only plan differs from the full read's:\n%s\n%s", filepath.Base(file), counter, keep, a, b)
				}
			}
		}
	}
}
