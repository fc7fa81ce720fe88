package cutpoint

import (
	"fmt"
	"strings"

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
	prevIdx, start := boundary(path)
	switch {
	case prevIdx < 0:
		w("No earlier compaction: the range to cut is the whole path (%d entries).", len(path))
	case start == prevIdx+1:
		w("The last compaction (%s, index %d) kept nothing before it, so the range starts after it (index %d).", path[prevIdx].ID, prevIdx, start)
	default:
		w("The last compaction (%s, index %d) kept entries from %s (index %d): the range starts there; its summary is updated, nothing before it is summarized again.",
			path[prevIdx].ID, prevIdx, path[start].ID, start)
	}
	fk := p.FirstKeptEntryIndex
	switch p.Policy {
	case PolicyPi:
		acc, cross := 0, -1
		for i := len(path) - 1; i >= start; i-- {
			if path[i].Type != sessionio.TypeMessage || path[i].Message == nil {
				continue
			}
			acc += c.Count(path[i].Message)
			if acc >= s.KeepRecentTokens {
				cross = i
				break
			}
		}
		if cross < 0 {
			w("Walking back from the leaf, the messages add up to %d tokens, below keepRecentTokens %d: Pi keeps everything from its first cut point.", acc, s.KeepRecentTokens)
		} else {
			w("Walking back from the leaf, the messages reach keepRecentTokens %d at %s (index %d, %s).", s.KeepRecentTokens, path[cross].ID, cross, describe(path[cross]))
			cp := -1
			for i := cross; i < len(path); i++ {
				if isValidCut(path[i]) {
					cp = i
					break
				}
			}
			switch {
			case cp < 0:
				w("No valid cut point follows it (only tool results): Pi falls back to its first cut point and summarizes nothing.")
			case cp != cross:
				w("That is not a valid cut point; Pi moves FORWARD (never backward) to the next one, %s (index %d, %s).", path[cp].ID, cp, describe(path[cp]))
			}
			if cp >= 0 && fk < cp {
				w("The cut is pulled back over the %d non-message entries in front of it, to %s (index %d).", cp-fk, path[fk].ID, fk)
			}
		}
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
		if v.Invariant == 2 && InsideToolSpan(path, firstCutAtOrAfter(path, fk)) {
			w("Warning: %v. This is Pi's known behaviour (docs/policies.md); the turn and nearest policies avoid it.", v)
		} else {
			w("Warning: %v.", v)
		}
	}
	return b.String()
}

func firstCutAtOrAfter(path []*sessionio.Entry, i int) int {
	for ; i < len(path); i++ {
		if isValidCut(path[i]) {
			return i
		}
	}
	return len(path) - 1
}
