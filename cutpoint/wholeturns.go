package cutpoint

import (
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
)

// IsValidCut reports whether e may be the first kept entry of a compaction (the
// findValidCutPoints of Pi before 0.80.4): never a tool result, which must stay after its
// tool call. See ValidCutAt for a release's rule on a path.
func IsValidCut(e *sessionio.Entry) bool { return e != nil && isValidCut(e) }

// ValidCutAt reports whether the entry at path index i may be the first kept entry of a
// compaction under release r, as Pi would accept it from its own cut: a valid cut point, or
// an entry Pi's cut was pulled back onto (one that puts nothing into the context, followed by
// such entries up to a valid cut point).
func ValidCutAt(path []*sessionio.Entry, i int, r pi.Release) bool {
	sg := newSegment(path, r)
	k := sg.index(i)
	if k < 0 {
		return false
	}
	for ; k < len(sg.items); k++ {
		if sg.validCut(k) {
			return true
		}
		if sg.visible(k) {
			return false
		}
	}
	return false
}

// WholeTurns returns p cut at the start of the turn it splits, so that the span is
// summarized in one request instead of two (the history and the split turn's prefix). A
// plan that splits no turn, or whose history before the split turn is empty (the turn
// started at the range's start: only the prefix request would be left), is returned as
// it is. The result is a plan in its own right: the invariants hold, and the kept part
// grows by the turn's prefix.
//
// Preparations for a live agent use it: the gap between the preparation's cut and the cut
// Pi makes later is bridged without a model (summarize.Bridge), so nothing is gained by
// paying for the prefix request ahead of time.
func WholeTurns(path []*sessionio.Entry, p *Plan, s Settings, c Counter) *Plan {
	if p == nil || !p.Prepared || !p.IsSplitTurn || p.TurnStartIndex <= p.BoundaryStartIndex || len(p.Summarize) == 0 {
		return p
	}
	sg := newSegment(path, p.Release)
	k := sg.index(p.TurnStartIndex)
	if k < 0 {
		return p
	}
	s.Release = p.Release
	return assemble(sg, sg.safeCut(k), p.Policy, s, c)
}
