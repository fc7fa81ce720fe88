package cutpoint

import "github.com/compactor-dev/compactor/sessionio"

// IsValidCut reports whether e may be the first kept entry of a compaction (Pi's
// findValidCutPoints): never a tool result, which must stay after its tool call.
func IsValidCut(e *sessionio.Entry) bool { return e != nil && isValidCut(e) }

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
func WholeTurns(path []*sessionio.Entry, p *Plan, c Counter) *Plan {
	if p == nil || !p.Prepared || !p.IsSplitTurn || p.TurnStartIndex <= p.BoundaryStartIndex || len(p.Summarize) == 0 {
		return p
	}
	prevIdx, start := boundary(path)
	return assemble(path, prevIdx, start, safeCut(path, p.TurnStartIndex, start), p.Policy, c)
}
