package cutpoint

import "github.com/compactor-dev/compactor/sessionio"

// What the safe policies (turn, nearest) share: the tool spans a cut must not fall inside,
// the tokens each cut would keep, and turning a chosen cut point into a cut. Indices are
// items of the segment.

// rangeInfo holds what the safe policies need to know about a segment.
type rangeInfo struct {
	sg     *segment
	suffix []int  // suffix[k] = tokens of the context messages of items[k:]
	inSpan []bool // inSpan[k]: cutting at k would separate a tool call from a result
}

func newRangeInfo(sg *segment, c Counter) *rangeInfo {
	n := len(sg.items)
	r := &rangeInfo{sg: sg, suffix: make([]int, n+1), inSpan: sg.toolSpans()}
	for k := n - 1; k >= 0; k-- {
		r.suffix[k] = r.suffix[k+1] + sg.tokens(k, c)
	}
	return r
}

// kept returns the tokens kept when the first kept entry is item k.
func (r *rangeInfo) kept(k int) int { return r.suffix[k] }

// keepAll is the cut that keeps the whole range: the first valid cut point (Pi's default
// cut), or the range's start when there is none.
func (r *rangeInfo) keepAll() int {
	for k := range r.sg.items {
		if r.sg.validCut(k) {
			return k
		}
	}
	return 0
}

// toolPair is a tool call and one of its results, as items of the segment.
type toolPair struct{ call, result int }

// toolPairs matches every toolResult of the range to the nearest earlier assistant tool call
// with the same id in the range, in order of the results. A result with no call in the
// range, and a call with no result, make no pair. It is the one pairing scan behind the safe
// policies' tool spans and the check of invariant 2.
func (s *segment) toolPairs() []toolPair {
	var pairs []toolPair
	callAt := map[string]int{}
	for k := range s.items {
		for _, m := range s.items[k].msgs {
			switch m.Role {
			case sessionio.RoleAssistant:
				for _, b := range m.Content.Blocks {
					if b.Type == sessionio.BlockToolCall {
						callAt[b.ID] = k
					}
				}
			case sessionio.RoleToolResult:
				if ci, ok := callAt[m.ToolCallID]; ok {
					pairs = append(pairs, toolPair{call: ci, result: k})
				}
			}
		}
	}
	return pairs
}

// toolSpans marks, for each item, whether a cut there would leave a tool call on the
// summarized side and one of its results on the kept side (toolPairs).
func (s *segment) toolSpans() []bool {
	n := len(s.items)
	in := make([]bool, n)
	diff := make([]int, n+2)
	for _, tp := range s.toolPairs() {
		// cuts in (call, result] separate the call from this result
		diff[tp.call+1]++
		diff[tp.result+1]--
	}
	run := 0
	for k := 0; k < n; k++ {
		run += diff[k]
		in[k] = run > 0
	}
	return in
}

// safeCut turns a chosen cut point into a cut: it pulls the cut back over the entries in
// front of it that Pi passes over and splits the turn only when the cut does not start a
// turn and the turn it belongs to started before the kept part. Unlike Pi, a cut that was
// pulled back onto a settings entry in front of a user message is not a split turn. (Before
// 0.80.4 only a user message counts as starting its own turn here, as in Pi.)
func (s *segment) safeCut(chosen int) cut {
	first := s.pullBack(chosen)
	if s.startsTurn(chosen) {
		return cut{firstKept: first, turnStart: -1}
	}
	ts := s.findTurnStart(chosen)
	if ts < 0 || ts >= first {
		return cut{firstKept: first, turnStart: -1}
	}
	return cut{firstKept: first, turnStart: ts, split: true}
}
