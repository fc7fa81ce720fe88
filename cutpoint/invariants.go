package cutpoint

import (
	"fmt"
	"slices"

	"github.com/compactor-dev/compactor/sessionio"
)

// Violation is a breach of one of design §4's invariants by a plan.
type Violation struct {
	Invariant int    // 1..4
	EntryID   string // the entry concerned, when there is one
	Detail    string
}

func (v Violation) String() string {
	if v.EntryID != "" {
		return fmt.Sprintf("invariant %d (%s): %s", v.Invariant, v.EntryID, v.Detail)
	}
	return fmt.Sprintf("invariant %d: %s", v.Invariant, v.Detail)
}

// CheckInvariants checks a prepared plan against design §4, recomputing everything it
// needs from the path rather than trusting the plan:
//
//  1. The first kept entry is a valid cut point in Pi's sense. Because Pi pulls a cut back
//     over the settings/label/custom entries in front of it, a non-message entry is
//     accepted when the first entry at or after it that is a message, a compaction or a
//     valid cut point is a valid cut point (or there is none). A toolResult, a message of
//     unknown role and a compaction never are.
//  2. Tool calls and results are not separated: for every toolResult in the range whose
//     call is in the range (matched by toolCallId to the nearest earlier assistant tool
//     call), call and result are on the same side of the first kept entry. The turn
//     prefix counts as summarized. A result with no call in the range, or a call with no
//     result, is not a violation.
//  3. Nothing is dropped: the summarized ids, then the prefix ids, then every entry from
//     the first kept one to the end, restricted to the entries that put a message into the
//     context, equal (in order) the entries of the current context (BuildContext) after
//     the previous compaction's summary.
//  4. Nothing before the range start (the previous compaction's firstKeptEntryId on the
//     path, else the entry after that compaction) is summarized or prefixed again.
//
// An unprepared plan has nothing to check.
func CheckInvariants(path []*sessionio.Entry, p *Plan) []Violation {
	if p == nil || !p.Prepared {
		return nil
	}
	var out []Violation
	add := func(inv int, id, format string, args ...any) {
		out = append(out, Violation{Invariant: inv, EntryID: id, Detail: fmt.Sprintf(format, args...)})
	}
	index := make(map[string]int, len(path))
	for i, e := range path {
		index[e.ID] = i // duplicate ids cannot happen on a path (the index keeps one entry per id)
	}
	_, start := boundary(path)
	fk, ok := index[p.FirstKeptEntryID]
	if !ok {
		add(1, p.FirstKeptEntryID, "first kept entry is not on the path")
		return out
	}

	// 1
	if fk < start {
		add(1, p.FirstKeptEntryID, "first kept entry (index %d) is before the range start (index %d)", fk, start)
	}
	if !isValidCut(path[fk]) {
		if path[fk].Type == sessionio.TypeMessage || path[fk].Type == sessionio.TypeCompaction {
			add(1, p.FirstKeptEntryID, "first kept entry is a %s, not a valid cut point", describe(path[fk]))
		} else {
			for j := fk + 1; j < len(path); j++ {
				e := path[j]
				if isValidCut(e) {
					break
				}
				if e.Type == sessionio.TypeMessage || e.Type == sessionio.TypeCompaction {
					add(1, p.FirstKeptEntryID, "first kept entry is a %s followed by a %s (%s), not by a valid cut point",
						path[fk].Type, describe(e), e.ID)
					break
				}
			}
		}
	}

	// 2
	callAt := map[string]int{}
	for i := start; i < len(path); i++ {
		e := path[i]
		if e.Type != sessionio.TypeMessage || e.Message == nil {
			continue
		}
		switch e.Message.Role {
		case sessionio.RoleAssistant:
			for _, b := range e.Message.Content.Blocks {
				if b.Type == sessionio.BlockToolCall {
					callAt[b.ID] = i
				}
			}
		case sessionio.RoleToolResult:
			ci, ok := callAt[e.Message.ToolCallID]
			if !ok {
				continue
			}
			if ci < fk && i >= fk {
				add(2, e.ID, "tool result for %q is kept but its call (%s) is summarized", e.Message.ToolCallID, path[ci].ID)
			} else if ci >= fk && i < fk {
				add(2, path[ci].ID, "tool call %q is kept but its result (%s) is summarized", e.Message.ToolCallID, e.ID)
			}
		}
	}

	// 3
	inContext := func(id string) bool {
		i, ok := index[id]
		if !ok {
			return true // unknown ids must show up as a difference
		}
		return yieldsContextMessage(path[i])
	}
	var got []string
	for _, id := range p.MessagesToSummarize {
		if inContext(id) {
			got = append(got, id)
		}
	}
	for _, id := range p.TurnPrefix {
		if inContext(id) {
			got = append(got, id)
		}
	}
	for _, e := range path[fk:] {
		if yieldsContextMessage(e) {
			got = append(got, e.ID)
		}
	}
	var want []string
	for _, id := range sessionio.BuildContext(path).EntryIDs {
		if i, ok := index[id]; ok && path[i].Type == sessionio.TypeCompaction {
			continue
		}
		want = append(want, id)
	}
	if !slices.Equal(got, want) {
		k := 0
		for k < len(got) && k < len(want) && got[k] == want[k] {
			k++
		}
		g, w := "(end)", "(end)"
		if k < len(got) {
			g = got[k]
		}
		if k < len(want) {
			w = want[k]
		}
		add(3, "", "summarized+prefix+kept (%d entries) differs from the context (%d entries) at position %d: %s instead of %s",
			len(got), len(want), k, g, w)
	}

	// 4
	for _, list := range [][]string{p.MessagesToSummarize, p.TurnPrefix} {
		for _, id := range list {
			if i, ok := index[id]; ok && i < start {
				add(4, id, "summarized again although it is before the range start (index %d < %d)", i, start)
			}
		}
	}
	return out
}

// yieldsContextMessage reports whether buildSessionContext emits a message for e.
func yieldsContextMessage(e *sessionio.Entry) bool {
	switch e.Type {
	case sessionio.TypeMessage:
		return e.Message != nil
	case sessionio.TypeCustomMessage:
		return true
	case sessionio.TypeBranchSummary:
		return e.Summary != ""
	}
	return false
}

func describe(e *sessionio.Entry) string {
	if e.Type == sessionio.TypeMessage && e.Message != nil {
		return "message:" + e.Message.Role
	}
	return e.Type
}

// InsideToolSpan reports whether entry index i of path lies strictly inside a tool span
// of the range that starts at the path's boundary: a cut there separates a tool call from
// one of its results. It identifies Pi's documented breach of invariant 2.
func InsideToolSpan(path []*sessionio.Entry, i int) bool {
	_, start := boundary(path)
	if i < start || i >= len(path) {
		return false
	}
	return toolSpans(path, start, len(path))[i]
}
