package cutpoint

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/tokenize"
)

// Each invariant's check reports its own breach: plans of a real session (with an earlier
// compaction, tool calls and a split turn) broken one way at a time.
func TestCheckInvariantsEachInvariant(t *testing.T) {
	t.Parallel()
	path, _ := loadPath(t, filepath.Join(repoTestdata, "corpus", "08-large.jsonl"))
	good, err := Nearest{}.Plan(path, Settings{KeepRecentTokens: 20000, ReserveTokens: 16384, ContextWindow: 200000}, tokenize.Estimate())
	if err != nil || !good.Prepared || good.BoundaryStartIndex == 0 {
		t.Fatalf("need a prepared plan after an earlier compaction: %+v %v", good, err)
	}
	if v := CheckInvariants(path, good); len(v) != 0 {
		t.Fatalf("the nearest plan breaks %v", v)
	}
	firstResult := func(from int) *sessionio.Entry {
		for _, e := range path[from:] {
			if e.IsMessage(sessionio.RoleToolResult) {
				return e
			}
		}
		t.Fatal("no tool result")
		return nil
	}
	for _, tc := range []struct {
		name   string
		mutate func(p *Plan)
		want   []int // invariants reported, at least these
		only   bool  // and no other
	}{
		{"first kept not on the path", func(p *Plan) { p.FirstKeptEntryID = "nope" }, []int{1}, true},
		{"first kept is a tool result", func(p *Plan) {
			e := firstResult(p.FirstKeptEntryIndex)
			p.FirstKeptEntryID = e.ID
		}, []int{1, 2}, false},
		{"a summarized entry dropped", func(p *Plan) { p.MessagesToSummarize = p.MessagesToSummarize[1:] }, []int{3}, true},
		{"summarized again before the range start", func(p *Plan) {
			p.MessagesToSummarize = append([]string{path[p.BoundaryStartIndex-1].ID}, p.MessagesToSummarize...)
		}, []int{3, 4}, true},
	} {
		p := *good
		p.MessagesToSummarize = slices.Clone(good.MessagesToSummarize)
		tc.mutate(&p)
		var got []int
		for _, v := range CheckInvariants(path, &p) {
			if !slices.Contains(got, v.Invariant) {
				got = append(got, v.Invariant)
			}
		}
		for _, w := range tc.want {
			if !slices.Contains(got, w) {
				t.Errorf("%s: invariants %v reported, want %d among them", tc.name, got, w)
			}
		}
		if tc.only && len(got) != len(tc.want) {
			t.Errorf("%s: invariants %v reported, want only %v", tc.name, got, tc.want)
		}
		if !slices.IsSorted(got) {
			t.Errorf("%s: violations out of invariant order: %v", tc.name, got)
		}
	}
}
