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
	if p := unprepared(path, PolicyTurn, s, c); p != nil {
		return p, nil
	}
	sg := newSegment(path, s.Release)
	r := newRangeInfo(sg, c)
	chosen := -1
	for k := len(sg.items) - 1; k >= 0; k-- {
		if !sg.user(k) || r.inSpan[k] {
			continue
		}
		if r.kept(sg.pullBack(k)) >= s.KeepRecentTokens {
			chosen = k
			break
		}
	}
	if chosen < 0 {
		chosen = r.keepAll()
	}
	return assemble(sg, sg.safeCut(chosen), PolicyTurn, s, c), nil
}
