package cutpoint

import "github.com/compactor-dev/compactor/sessionio"

// Nearest cuts at the safe cut point whose kept part is closest to keepRecentTokens, in
// either direction (a tie keeps more). Safe cut points are Pi's valid cut points that do
// not lie inside a tool span: the span from an assistant's tool call to the last result
// that answers it (matched by toolCallId) is never split, so a user or custom message that
// arrives between a tool call and its result is not a cut point. The kept part is weighed
// as in Turn. Where Pi can only move forward from the point where the budget is crossed
// (and may keep almost nothing), Nearest also looks backward.
type Nearest struct{}

// Name returns "nearest".
func (Nearest) Name() string { return PolicyNearest }

// Plan chooses the cut.
func (Nearest) Plan(path []*sessionio.Entry, s Settings, c Counter) (*Plan, error) {
	if p := unprepared(path, PolicyNearest, s, c); p != nil {
		return p, nil
	}
	sg := newSegment(path, s.Release)
	r := newRangeInfo(sg, c)
	best, bestKept, bestDiff := -1, 0, 0
	for k := range sg.items {
		if !sg.validCut(k) || r.inSpan[k] {
			continue
		}
		kept := r.kept(sg.pullBack(k))
		diff := kept - s.KeepRecentTokens
		if diff < 0 {
			diff = -diff
		}
		// Candidates come in order, so kept never grows: on a tie the earlier one (which
		// keeps at least as much) stays.
		if best < 0 || diff < bestDiff || (diff == bestDiff && kept > bestKept) {
			best, bestKept, bestDiff = k, kept, diff
		}
	}
	if best < 0 {
		best = r.keepAll()
	}
	return assemble(sg, sg.safeCut(best), PolicyNearest, s, c), nil
}
