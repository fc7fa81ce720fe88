package cutpoint

import (
	"fmt"
	"slices"

	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
)

// Violation is a plan's breach of one of the four invariants every plan keeps
// (docs/architecture.md, "The invariants of a plan"), numbered as they are there.
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

// CheckInvariants checks a prepared plan against those invariants under the plan's Pi
// dialect, recomputing everything it needs from the path rather than trusting the plan.
// Each invariant has its own check (below); the violations come in invariant order. An
// unprepared plan has nothing to check.
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

// checked is what every invariant check needs: the segment of the path, the plan, each
// id's index on the path and the first kept entry's item (-1 when it is not in the range) and
// path index (-1 when it is not on the path).
type checked struct {
	sg    *segment
	p     *Plan
	index map[string]int
	fk    int // item
	fkAt  int // path index
}

func newChecked(path []*sessionio.Entry, p *Plan) *checked {
	c := &checked{sg: newSegment(path, p.Release), p: p, index: make(map[string]int, len(path)), fk: -1, fkAt: -1}
	for i, e := range path {
		c.index[e.ID] = i // duplicate ids cannot happen on a path (the index keeps one entry per id)
	}
	if i, ok := c.index[p.FirstKeptEntryID]; ok {
		c.fkAt = i
		c.fk = c.sg.index(i)
	}
	if c.fkAt >= 0 && c.fk < 0 && c.fkAt >= c.sg.start {
		c.fkAt = -1 // on the path but not in the context (a Pi 1.x system message of a kept part)
	}
	return c
}

func violation(inv int, id, format string, args ...any) Violation {
	return Violation{Invariant: inv, EntryID: id, Detail: fmt.Sprintf(format, args...)}
}

// checkValidCut is invariant 1: the first kept entry is a valid cut point in Pi's sense,
// not before the range start. Because Pi pulls a cut back over the entries in front of it
// that it passes over (settings, labels, custom entries; in 1.x every entry that puts
// nothing into the context), such an entry is accepted when the first entry at or after it
// that Pi does not pass over is a valid cut point (or there is none). A toolResult, a
// message of unknown role and a compaction never are.
func checkValidCut(c *checked) []Violation {
	sg, id := c.sg, c.p.FirstKeptEntryID
	if c.fk < 0 {
		return []Violation{violation(1, id, "first kept entry (index %d) is before the range start (index %d)", c.fkAt, sg.start)}
	}
	if sg.validCut(c.fk) {
		return nil
	}
	if sg.visible(c.fk) {
		return []Violation{violation(1, id, "first kept entry is a %s, not a valid cut point", describe(sg.items[c.fk].e))}
	}
	for k := c.fk + 1; k < len(sg.items); k++ {
		if sg.validCut(k) {
			break
		}
		if sg.visible(k) {
			e := sg.items[k].e
			return []Violation{violation(1, id, "first kept entry is a %s followed by a %s (%s), not by a valid cut point",
				sg.items[c.fk].e.Type, describe(e), e.ID)}
		}
	}
	return nil
}

// checkToolPairs is invariant 2: tool calls and results are not separated. For every
// toolResult in the range whose call is in the range (toolPairs), call and result are on
// the same side of the first kept entry; the turn prefix counts as summarized. A result
// with no call in the range, or a call with no result, is not a violation.
func checkToolPairs(c *checked) []Violation {
	if c.fk < 0 {
		return nil
	}
	var out []Violation
	for _, tp := range c.sg.toolPairs() {
		call, res := c.sg.items[tp.call].e, c.sg.items[tp.result].e
		tcid := ""
		for _, m := range c.sg.items[tp.result].msgs {
			if m.Role == sessionio.RoleToolResult {
				tcid = m.ToolCallID
			}
		}
		switch {
		case tp.call < c.fk && tp.result >= c.fk:
			out = append(out, violation(2, res.ID, "tool result for %q is kept but its call (%s) is summarized", tcid, call.ID))
		case tp.call >= c.fk && tp.result < c.fk:
			out = append(out, violation(2, call.ID, "tool call %q is kept but its result (%s) is summarized", tcid, res.ID))
		}
	}
	return out
}

// checkNothingDropped is invariant 3: the summarized ids, then the prefix ids, then every
// entry from the first kept one to the end, restricted to the entries that put a message
// into the context (system messages aside: a Pi 1.x compaction's checkpoint carries them),
// equal (in order) the entries of the current context after the previous compaction's
// summary.
func checkNothingDropped(c *checked) []Violation {
	if c.fk < 0 {
		return nil
	}
	sg := c.sg
	inContext := map[string]bool{}
	var want []string
	for k := range sg.items {
		if len(sg.summarized(k)) > 0 && sg.items[k].e.Type != sessionio.TypeCompaction {
			want = append(want, sg.items[k].e.ID)
			inContext[sg.items[k].e.ID] = true
		}
	}
	// An id of the plan's lists counts when its entry puts a message into a context: in the
	// range as the dialect projects it; elsewhere by its type (so that an entry summarized
	// again from before the range shows up here too); an unknown id always.
	contributes := func(id string) bool {
		i, known := c.index[id]
		if !known || inContext[id] {
			return true
		}
		return sg.index(i) < 0 && yieldsContextMessage(sg.path[i])
	}
	var got []string
	for _, list := range [][]string{c.p.MessagesToSummarize, c.p.TurnPrefix} {
		for _, id := range list {
			if contributes(id) {
				got = append(got, id)
			}
		}
	}
	for k := c.fk; k < len(sg.items); k++ {
		if inContext[sg.items[k].e.ID] {
			got = append(got, sg.items[k].e.ID)
		}
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
// compaction's kept part) is summarized or prefixed again.
func checkRangeStart(c *checked) []Violation {
	var out []Violation
	for _, list := range [][]string{c.p.MessagesToSummarize, c.p.TurnPrefix} {
		for _, id := range list {
			if i, ok := c.index[id]; ok && c.sg.index(i) < 0 {
				out = append(out, violation(4, id, "summarized again although it is not in the range after the previous compaction (index %d, range from %d)", i, c.sg.start))
			}
		}
	}
	return out
}

// yieldsContextMessage reports whether Pi's context has a message for e, by its type.
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
// of the range after the path's previous compaction, under release r: a cut there separates
// a tool call from one of its results. It identifies Pi's documented breach of invariant 2.
func InsideToolSpan(path []*sessionio.Entry, i int, r pi.Release) bool {
	sg := newSegment(path, r)
	k := sg.index(i)
	if k < 0 {
		return false
	}
	return sg.toolSpans()[k]
}
