package cutpoint

import (
	"fmt"
	"strings"

	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
)

// Explain says in words where a plan cuts the path and why, for people (compactor inspect,
// plan without --json). It recomputes what it needs from the path.
func Explain(path []*sessionio.Entry, p *Plan, s Settings, c Counter) string {
	if p == nil {
		return ""
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	if !p.Prepared {
		w("Nothing to plan: %s.", p.Reason)
		return b.String()
	}
	sg := newSegment(path, p.Release)
	explainRange(w, path, sg, p.Release)
	fk := p.FirstKeptEntryIndex
	switch p.Policy {
	case PolicyPi:
		explainPi(w, path, p, s, c, sg)
	case PolicyTurn:
		w("The turn policy cuts only where a user turn starts: the latest user message with at least keepRecentTokens %d kept after it (or everything, when no turn qualifies).", s.KeepRecentTokens)
	case PolicyNearest:
		w("The nearest policy cuts at the safe cut point whose kept part is closest to keepRecentTokens %d, looking both backward and forward.", s.KeepRecentTokens)
	}
	w("First kept entry: %s (index %d, %s); %d tokens kept verbatim.", p.FirstKeptEntryID, fk, describe(path[fk]), p.KeptTokens)
	if p.IsSplitTurn {
		if len(p.TurnPrefix) == 0 {
			w("The cut is a turn start of its own (%s): marked as a split turn with an empty prefix, which compaction treats as unsplit.", describe(path[fk]))
		} else {
			w("The cut splits the turn that starts at %s (index %d): its first %d entries (%d tokens) get their own turn-prefix summary.",
				p.TurnStartEntryID, p.TurnStartIndex, len(p.TurnPrefix), p.TurnPrefixTokens)
		}
	}
	w("Summarized: %d entries (%d tokens).", len(p.MessagesToSummarize), p.SummarizedTokens)
	for _, v := range CheckInvariants(path, p) {
		if v.Invariant == 2 && InsideToolSpan(path, firstCutAtOrAfter(sg, fk), p.Release) {
			w("Warning: %v. This is Pi's known behaviour (docs/policies.md); the turn and nearest policies avoid it.", v)
		} else {
			w("Warning: %v.", v)
		}
	}
	return b.String()
}

// explainRange says where the range to cut starts (after the last compaction, or where it
// kept entries) and, for a release with context edits, what it holds.
func explainRange(w func(string, ...any), path []*sessionio.Entry, sg *segment, r pi.Release) {
	prevIdx, start := sg.prevAt, sg.start
	switch {
	case sg.prev == nil:
		w("No earlier compaction: the range to cut is the whole path (%d entries).", len(path))
	case start >= len(path) || start == prevIdx+1:
		w("The last compaction (%s, index %d) kept nothing before it, so the range starts after it (index %d).", sg.prev.ID, prevIdx, start)
	default:
		w("The last compaction (%s, index %d) kept entries from %s (index %d): the range starts there; its summary is updated, nothing before it is summarized again.",
			sg.prev.ID, prevIdx, path[start].ID, start)
	}
	if r.Has(pi.ContextEdits) {
		w("Pi %s rules: the range is what Pi's projection puts into the context (context edits applied, the kept part's system messages left to the compaction's checkpoint).", r)
	}
}

// explainPi says how Pi's policy found the cut: the walk back from the leaf to
// keepRecentTokens, the move forward to a valid cut point, the pull back over entries that
// put nothing into the context.
func explainPi(w func(string, ...any), path []*sessionio.Entry, p *Plan, s Settings, c Counter, sg *segment) {
	fk := p.FirstKeptEntryIndex
	acc, cross := 0, -1
	for k := len(sg.items) - 1; k >= 0; k-- {
		wt, counted := sg.weighs(k, c)
		if !counted {
			continue
		}
		acc += wt
		if acc >= s.KeepRecentTokens {
			cross = k
			break
		}
	}
	if cross < 0 {
		w("Walking back from the leaf, the messages add up to %d tokens, below keepRecentTokens %d: Pi keeps everything from its first cut point.", acc, s.KeepRecentTokens)
		return
	}
	ce := sg.items[cross]
	w("Walking back from the leaf, the messages reach keepRecentTokens %d at %s (index %d, %s).", s.KeepRecentTokens, ce.e.ID, ce.at, describe(ce.e))
	cp := -1
	for k := cross; k < len(sg.items); k++ {
		if sg.validCut(k) {
			cp = k
			break
		}
	}
	switch {
	case cp < 0 && p.Release.Has(pi.TrailingToolResultsKeepLastCut):
		w("No valid cut point follows it (only tool results): Pi %s keeps its last cut point.", p.Release)
	case cp < 0:
		w("No valid cut point follows it (only tool results): Pi falls back to its first cut point and summarizes nothing.")
	case cp != cross:
		w("That is not a valid cut point; Pi moves FORWARD (never backward) to the next one, %s (index %d, %s).", sg.items[cp].e.ID, sg.items[cp].at, describe(sg.items[cp].e))
	}
	if cp >= 0 && fk < sg.items[cp].at {
		w("The cut is pulled back over the %d entries in front of it that put nothing into the context, to %s (index %d).", sg.items[cp].at-fk, path[fk].ID, fk)
	}
}

// firstCutAtOrAfter is the path index of the first valid cut point at or after path index i.
func firstCutAtOrAfter(sg *segment, i int) int {
	for k := range sg.items {
		if sg.items[k].at >= i && sg.validCut(k) {
			return sg.items[k].at
		}
	}
	return len(sg.path) - 1
}
