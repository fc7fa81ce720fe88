package cutpoint

import (
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/tokenize"
)

// SpanAt gives, for the cut a plan makes, exactly the entries and messages the plan
// summarizes (history and turn prefix), for both Pi releases, on the recorded and generated
// corpus at several keepRecentTokens settings.
func TestSpanAtIsThePlansSpan(t *testing.T) {
	t.Parallel()
	var files []string
	for _, g := range []string{"corpus/*.jsonl", "corpus/gen-0.73.1/*.jsonl", "corpus/gen-1.6.0/*.jsonl"} {
		m, err := filepath.Glob(filepath.Join(repoTestdata, g))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	checked := 0
	for _, f := range files {
		s, err := sessionio.ReadFile(f)
		if err != nil {
			continue
		}
		path, err := s.Path("")
		if err != nil {
			continue
		}
		for _, d := range pi.RuleSets() {
			for _, keep := range []int{200, 2000, 8000} {
				st := DefaultSettings()
				st.Release, st.KeepRecentTokens, st.ContextWindow = d, keep, 1
				c := tokenize.EstimateFor(d)
				p, err := Pi{}.Plan(path, st, c)
				if err != nil || !p.Prepared {
					continue
				}
				sp, err := SpanAt(path, d, p.FirstKeptEntryID)
				if err != nil {
					t.Errorf("%s %s keep %d: %v", filepath.Base(f), d, keep, err)
					continue
				}
				want := append(append([]string{}, p.MessagesToSummarize...), p.TurnPrefix...)
				msgs := append(append([]*sessionio.Message{}, p.Summarize...), p.Prefix...)
				if !slices.Equal(sp.EntryIDs, want) || (len(msgs) > 0 || len(sp.Messages) > 0) && !reflect.DeepEqual(sp.Messages, msgs) || sp.StartIndex != p.BoundaryStartIndex || sp.CutIndex != p.FirstKeptEntryIndex {
					t.Errorf("%s %s keep %d: span %v (start %d, cut %d), plan %v (start %d, cut %d)", filepath.Base(f), d, keep,
						sp.EntryIDs, sp.StartIndex, sp.CutIndex, want, p.BoundaryStartIndex, p.FirstKeptEntryIndex)
				}
				if (sp.Previous == nil) != (p.PreviousCompactionID == "") || sp.Previous != nil && sp.Previous.ID != p.PreviousCompactionID {
					t.Errorf("%s %s: previous compaction %v, plan %q", filepath.Base(f), d, sp.Previous, p.PreviousCompactionID)
				}
				checked++
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d plans checked", checked)
	}
	t.Logf("%d plans checked", checked)
}

// A cut outside the range a compaction summarizes is refused.
func TestSpanAtRefusesACutOutsideTheRange(t *testing.T) {
	t.Parallel()
	path, _ := loadPath(t, filepath.Join(repoTestdata, "corpus", "05-compactions.jsonl"))
	var comp *sessionio.Entry
	for _, e := range path {
		if e.Type == sessionio.TypeCompaction {
			comp = e
		}
	}
	if comp == nil {
		t.Fatal("no compaction on the path")
	}
	for _, d := range pi.RuleSets() {
		if _, err := SpanAt(path, d, path[0].ID); err == nil {
			t.Errorf("%s: the header's first entry, before the latest compaction's boundary, was accepted", d)
		}
		if _, err := SpanAt(path, d, "no-such-entry"); err == nil {
			t.Errorf("%s: an unknown entry was accepted", d)
		}
	}
}
