package cutpoint

import "github.com/compactor-dev/compactor/sessionio"

// Pi is Pi 0.73.1's cut, exactly: prepareCompaction with findCutPoint, findValidCutPoints
// and findTurnStartIndex (pi-session-format.md §4.4–§4.5), weighing messages with any
// counter. With Pi's chars/4 estimate it gives what `pi-oracle cut` prints.
//
// Walking back from the end it adds up "message" entries (custom_message and
// branch_summary entries are cut points but are not weighed) until keepRecentTokens is
// reached, then moves FORWARD to the next valid cut point (never backward), pulls the cut
// back over preceding non-message entries, and marks the turn as split unless the cut is
// a user message. Its known breaches of the invariants are listed in docs/policies.md.
type Pi struct{}

// Name returns "pi".
func (Pi) Name() string { return PolicyPi }

// Plan runs Pi's prepareCompaction on path.
func (Pi) Plan(path []*sessionio.Entry, s Settings, c Counter) (*Plan, error) {
	if p := unprepared(path, PolicyPi, c); p != nil {
		return p, nil
	}
	prevIdx, start := boundary(path)
	k := piFindCut(path, start, len(path), s.KeepRecentTokens, c)
	return assemble(path, prevIdx, start, k, PolicyPi, c), nil
}

// piFindCut is Pi's findCutPoint.
func piFindCut(path []*sessionio.Entry, start, end, keep int, c Counter) cut {
	cps := validCuts(path, start, end)
	if len(cps) == 0 {
		return cut{firstKept: start, turnStart: -1}
	}
	acc := 0
	cutIdx := cps[0]
	for i := end - 1; i >= start; i-- {
		e := path[i]
		if e.Type != sessionio.TypeMessage {
			continue
		}
		if e.Message != nil {
			acc += c.Count(e.Message)
		}
		if acc >= keep {
			for _, cp := range cps {
				if cp >= i {
					cutIdx = cp
					break
				}
			}
			break
		}
	}
	cutIdx = pullBack(path, cutIdx, start)
	if path[cutIdx].IsMessage(sessionio.RoleUser) {
		return cut{firstKept: cutIdx, turnStart: -1}
	}
	ts := findTurnStart(path, cutIdx, start)
	return cut{firstKept: cutIdx, turnStart: ts, split: ts != -1}
}
