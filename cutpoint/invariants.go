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
// needs from the path rather than trusting the plan. Each invariant has its own check
// (below); the violations come in invariant order. An unprepared plan has nothing to
// check.
func CheckInvariants(path []*sessionio.Entry, p *Plan) []Violation {
	if p == nil || !p.Prepared {
		return nil
	}
	c := newChecked(path, p)
	if c.fk < 0 {
		return []Violation{{Invariant: 1, EntryID: p.FirstKeptEntryID, Detail: "first kept entry is not on the path"}}
	}
	var out []Violation
	for _, check := range []func(*checked) []Violation{checkValidCut, checkToolPairs, checkNothingDropped, checkRangeStart} {
		out = append(out, check(c)...)
	}
	return out
}

// checked is what every invariant check needs: the path, the plan, each id's index on
// the path, the range start and the first kept index (-1 when it is not on the path).
type checked struct {
	path  []*sessionio.Entry
	p     *Plan
	index map[string]int
	start int
	fk    int
}

func newChecked(path []*sessionio.Entry, p *Plan) *checked {
	c := &checked{path: path, p: p, index: make(map[string]int, len(path)), fk: -1}
	for i, e := range path {
		c.index[e.ID] = i // duplicate ids cannot happen on a path (the index keeps one entry per id)
	}
	_, c.start = boundary(path)
	if i, ok := c.index[p.FirstKeptEntryID]; ok {
		c.fk = i
	}
	return c
}

func violation(inv int, id, format string, args ...any) Violation {
	return Violation{Invariant: inv, EntryID: id, Detail: fmt.Sprintf(format, args...)}
}

// checkValidCut is invariant 1: the first kept entry is a valid cut point in Pi's sense,
// not before the range start. Because Pi pulls a cut back over the settings/label/custom
// entries in front of it, a non-message entry is accepted when the first entry at or after
// it that is a message, a compaction or a valid cut point is a valid cut point (or there
// is none). A toolResult, a message of unknown role and a compaction never are.
func checkValidCut(c *checked) []Violation {
	var out []Violation
	path, fk, id := c.path, c.fk, c.p.FirstKeptEntryID
	if fk < c.start {
		out = append(out, violation(1, id, "first kept entry (index %d) is before the range start (index %d)", fk, c.start))
	}
	if isValidCut(path[fk]) {
		return out
	}
	if path[fk].Type == sessionio.TypeMessage || path[fk].Type == sessionio.TypeCompaction {
		return append(out, violation(1, id, "first kept entry is a %s, not a valid cut point", describe(path[fk])))
	}
	for _, e := range path[fk+1:] {
		if isValidCut(e) {
			break
		}
		if e.Type == sessionio.TypeMessage || e.Type == sessionio.TypeCompaction {
			return append(out, violation(1, id, "first kept entry is a %s followed by a %s (%s), not by a valid cut point",
				path[fk].Type, describe(e), e.ID))
		}
	}
	return out
}

// checkToolPairs is invariant 2: tool calls and results are not separated. For every
// toolResult in the range whose call is in the range (toolPairs), call and result are on
// the same side of the first kept entry; the turn prefix counts as summarized. A result
// with no call in the range, or a call with no result, is not a violation.
func checkToolPairs(c *checked) []Violation {
	var out []Violation
	for _, tp := range toolPairs(c.path, c.start, len(c.path)) {
		call, res := c.path[tp.call], c.path[tp.result]
		switch {
		case tp.call < c.fk && tp.result >= c.fk:
			out = append(out, violation(2, res.ID, "tool result for %q is kept but its call (%s) is summarized", res.Message.ToolCallID, call.ID))
		case tp.call >= c.fk && tp.result < c.fk:
			out = append(out, violation(2, call.ID, "tool call %q is kept but its result (%s) is summarized", res.Message.ToolCallID, res.ID))
		}
	}
	return out
}

// checkNothingDropped is invariant 3: the summarized ids, then the prefix ids, then every
// entry from the first kept one to the end, restricted to the entries that put a message
// into the context, equal (in order) the entries of the current context (BuildContext)
// after the previous compaction's summary.
func checkNothingDropped(c *checked) []Violation {
	inContext := func(id string) bool {
		i, ok := c.index[id]
		if !ok {
			return true // unknown ids must show up as a difference
		}
		return yieldsContextMessage(c.path[i])
	}
	var got []string
	for _, list := range [][]string{c.p.MessagesToSummarize, c.p.TurnPrefix} {
		for _, id := range list {
			if inContext(id) {
				got = append(got, id)
			}
		}
	}
	for _, e := range c.path[c.fk:] {
		if yieldsContextMessage(e) {
			got = append(got, e.ID)
		}
	}
	var want []string
	for _, id := range sessionio.BuildContext(c.path, sessionio.Pi073).EntryIDs {
		if i, ok := c.index[id]; ok && c.path[i].Type == sessionio.TypeCompaction {
			continue
		}
		want = append(want, id)
	}
	if slices.Equal(got, want) {
		return nil
	}
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
	return []Violation{violation(3, "", "summarized+prefix+kept (%d entries) differs from the context (%d entries) at position %d: %s instead of %s",
		len(got), len(want), k, g, w)}
}

// checkRangeStart is invariant 4: nothing before the range start (the previous
// compaction's firstKeptEntryId on the path, else the entry after that compaction) is
// summarized or prefixed again.
func checkRangeStart(c *checked) []Violation {
	var out []Violation
	for _, list := range [][]string{c.p.MessagesToSummarize, c.p.TurnPrefix} {
		for _, id := range list {
			if i, ok := c.index[id]; ok && i < c.start {
				out = append(out, violation(4, id, "summarized again although it is before the range start (index %d < %d)", i, c.start))
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
