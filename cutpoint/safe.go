package cutpoint

import "github.com/compactor-dev/compactor/sessionio"

// Turn cuts only where a user turn starts (a "user" message), so no turn is ever split and
// no turn-prefix summary is needed. It keeps AT LEAST keepRecentTokens when it can: it
// picks the latest user message such that the kept part (every context message from the
// cut on, custom and summary messages included, weighed by the counter) is >=
// keepRecentTokens. When no user message qualifies (the whole range is smaller than the
// budget), it keeps everything, like Pi does for a small session. A user message that sits
// between a tool call and its result is never chosen (see Nearest).
//
// The price of never splitting a turn: when the last turn alone is larger than the
// budget, all of it is kept, so one huge turn can leave the context still over budget.
type Turn struct{}

// Name returns "turn".
func (Turn) Name() string { return PolicyTurn }

// Plan chooses the cut.
func (Turn) Plan(path []*sessionio.Entry, s Settings, c Counter) (*Plan, error) {
	if p := unprepared(path, PolicyTurn, c); p != nil {
		return p, nil
	}
	prevIdx, start := boundary(path)
	r := newRangeInfo(path, start, c)
	chosen := -1
	for i := len(path) - 1; i >= start; i-- {
		if !path[i].IsMessage(sessionio.RoleUser) || r.inSpan[i] {
			continue
		}
		if r.kept(pullBack(path, i, start)) >= s.KeepRecentTokens {
			chosen = i
			break
		}
	}
	if chosen < 0 {
		chosen = r.keepAll()
	}
	k := safeCut(path, chosen, start)
	return assemble(path, prevIdx, start, k, PolicyTurn, c), nil
}

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
	if p := unprepared(path, PolicyNearest, c); p != nil {
		return p, nil
	}
	prevIdx, start := boundary(path)
	r := newRangeInfo(path, start, c)
	best, bestKept, bestDiff := -1, 0, 0
	for i := start; i < len(path); i++ {
		if !isValidCut(path[i]) || r.inSpan[i] {
			continue
		}
		kept := r.kept(pullBack(path, i, start))
		diff := kept - s.KeepRecentTokens
		if diff < 0 {
			diff = -diff
		}
		// Candidates come in path order, so kept never grows: on a tie the earlier one
		// (which keeps at least as much) stays.
		if best < 0 || diff < bestDiff || (diff == bestDiff && kept > bestKept) {
			best, bestKept, bestDiff = i, kept, diff
		}
	}
	if best < 0 {
		best = r.keepAll()
	}
	k := safeCut(path, best, start)
	return assemble(path, prevIdx, start, k, PolicyNearest, c), nil
}

// rangeInfo holds what the safe policies need to know about [start, end).
type rangeInfo struct {
	path   []*sessionio.Entry
	start  int
	suffix []int  // suffix[i-start] = tokens of the context messages in path[i:]
	inSpan []bool // inSpan[i]: cutting at i would separate a tool call from a result
}

func newRangeInfo(path []*sessionio.Entry, start int, c Counter) *rangeInfo {
	n := len(path)
	r := &rangeInfo{path: path, start: start, suffix: make([]int, n-start+1), inSpan: toolSpans(path, start, n)}
	for i := n - 1; i >= start; i-- {
		t := 0
		if m := messageOf(path[i]); m != nil {
			t = c.Count(m)
		}
		r.suffix[i-start] = r.suffix[i-start+1] + t
	}
	return r
}

// kept returns the tokens kept when the first kept entry is i.
func (r *rangeInfo) kept(i int) int { return r.suffix[i-r.start] }

// keepAll is the cut that keeps the whole range: the first valid cut point (Pi's default
// cut), or start when there is none.
func (r *rangeInfo) keepAll() int {
	for i := r.start; i < len(r.path); i++ {
		if isValidCut(r.path[i]) {
			return i
		}
	}
	return r.start
}

// toolSpans marks, for each index in [start, end), whether a cut there would leave a tool
// call on the summarized side and one of its results on the kept side. A result is matched
// to the nearest earlier assistant tool call with the same id in the range; a result with
// no call in the range, and a call with no result, make no span.
func toolSpans(path []*sessionio.Entry, start, end int) []bool {
	in := make([]bool, end+1)
	diff := make([]int, end+2)
	callAt := map[string]int{}
	for i := start; i < end; i++ {
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
			if ci, ok := callAt[e.Message.ToolCallID]; ok {
				// cuts in (ci, i] separate the call from this result
				diff[ci+1]++
				diff[i+1]--
			}
		}
	}
	run := 0
	for i := 0; i < end; i++ {
		run += diff[i]
		in[i] = run > 0
	}
	return in[:end]
}

// safeCut turns a chosen cut point into a cut: it pulls the cut back over preceding
// non-message entries (as Pi does) and splits the turn only when the cut is not a user
// message and the turn it belongs to started before the kept part. Unlike Pi, a cut that
// was pulled back onto a settings entry in front of a user message is not a split turn.
func safeCut(path []*sessionio.Entry, chosen, start int) cut {
	first := pullBack(path, chosen, start)
	if path[chosen].IsMessage(sessionio.RoleUser) {
		return cut{firstKept: first, turnStart: -1}
	}
	ts := findTurnStart(path, chosen, start)
	if ts < 0 || ts >= first {
		return cut{firstKept: first, turnStart: -1}
	}
	return cut{firstKept: first, turnStart: ts, split: true}
}
