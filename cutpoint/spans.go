package cutpoint

import "github.com/compactor-dev/compactor/sessionio"

// What the safe policies (turn, nearest) share: the tool spans a cut must not fall inside,
// the tokens each cut would keep, and turning a chosen cut point into a cut.

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

// toolPair is a tool call and one of its results, as indices on the path.
type toolPair struct{ call, result int }

// toolPairs matches every toolResult in [start, end) to the nearest earlier assistant tool
// call with the same id in the range, in path order of the results. A result with no call
// in the range, and a call with no result, make no pair. It is the one pairing scan behind
// the safe policies' tool spans and the check of invariant 2.
func toolPairs(path []*sessionio.Entry, start, end int) []toolPair {
	var pairs []toolPair
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
				pairs = append(pairs, toolPair{call: ci, result: i})
			}
		}
	}
	return pairs
}

// toolSpans marks, for each index in [start, end), whether a cut there would leave a tool
// call on the summarized side and one of its results on the kept side (toolPairs).
func toolSpans(path []*sessionio.Entry, start, end int) []bool {
	in := make([]bool, end+1)
	diff := make([]int, end+2)
	for _, tp := range toolPairs(path, start, end) {
		// cuts in (call, result] separate the call from this result
		diff[tp.call+1]++
		diff[tp.result+1]--
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
