package cutpoint

import "github.com/compactor-dev/compactor/sessionio"

// Pi is Pi's own cut, exactly, for the dialect the settings name: prepareCompaction with its
// findCutPoint, findValidCutPoints and findTurnStartIndex (pi-session-format.md §4.4–§4.5;
// pi-1.6-changes.md "Planning"), weighing messages with any counter. With Pi's chars/4
// estimate it gives what Pi's prepareCompaction gives.
//
// Walking back from the end it adds up what entries weigh until keepRecentTokens is reached,
// then moves FORWARD to the next valid cut point (never backward), pulls the cut back over the
// entries in front of it that put nothing into the context, and marks the turn as split
// unless the cut starts a turn. The releases differ in the details:
//
//   - 0.73 weighs "message" entries only (custom_message and branch_summary entries are cut
//     points but weigh nothing), pulls back over custom messages and branch summaries too,
//     counts only a user or bashExecution message (or a custom_message or branch_summary
//     entry) as a turn start, and when no cut point follows the crossing (trailing tool
//     results over the budget) keeps everything from the first cut point;
//   - 1.x works on the projection (context edits applied, system messages of the kept part
//     gone), weighs every message an entry puts into the context, pulls back only over
//     entries that put nothing there, also counts a custom, branch summary or compaction
//     summary message as a turn start, keeps the last cut point when trailing tool results
//     alone are over the budget, moves past a recovery attempt's omitted leftovers, and makes
//     no plan when nothing would be summarized.
//
// Its known breaches of the invariants are listed in docs/policies.md.
type Pi struct{}

// Name returns "pi".
func (Pi) Name() string { return PolicyPi }

// Plan runs Pi's prepareCompaction on path.
func (Pi) Plan(path []*sessionio.Entry, s Settings, c Counter) (*Plan, error) {
	if p := unprepared(path, PolicyPi, s, c); p != nil {
		return p, nil
	}
	sg := newSegment(path, s.Dialect)
	return assemble(sg, sg.piFindCut(s.KeepRecentTokens, c), PolicyPi, s, c), nil
}

// piFindCut is Pi's findCutPoint over the segment.
func (s *segment) piFindCut(keep int, c Counter) cut {
	cps := s.validCuts()
	if len(cps) == 0 {
		return cut{firstKept: 0, turnStart: -1}
	}
	acc := 0
	cutIdx := cps[0]
	crossed := false
	for k := len(s.items) - 1; k >= 0; k-- {
		w := s.weight(k, c)
		if s.d.Projects() && w == 0 || !s.d.Projects() && s.items[k].e.Type != sessionio.TypeMessage {
			continue // 1.x skips what weighs nothing, 0.73 what is no message entry
		}
		acc += w
		if acc >= keep {
			crossed = true
			found := false
			for _, cp := range cps {
				if cp >= k {
					cutIdx, found = cp, true
					break
				}
			}
			if !found && s.d.Projects() {
				cutIdx = cps[len(cps)-1]
			}
			break
		}
	}
	if s.d.Projects() && crossed && s.recoveryLeftovers(cutIdx) {
		cutIdx++
	}
	cutIdx = s.pullBack(cutIdx)
	if !s.d.Projects() {
		if s.items[cutIdx].e.IsMessage(sessionio.RoleUser) {
			return cut{firstKept: cutIdx, turnStart: -1}
		}
		ts := s.findTurnStart(cutIdx)
		return cut{firstKept: cutIdx, turnStart: ts, split: ts != -1}
	}
	if s.turnStart(cutIdx) {
		return cut{firstKept: cutIdx, turnStart: -1}
	}
	ts := s.findTurnStart(cutIdx)
	return cut{firstKept: cutIdx, turnStart: ts, split: ts != -1}
}

// recoveryLeftovers is Pi 1.x's overflow-recovery check: everything after the cut is
// invisible to the model and holds an assistant attempt a context edit omitted (with no
// replacement edit of anything else among it), so the cut moves one entry on rather than
// keep leftovers only.
func (s *segment) recoveryLeftovers(cutIdx int) bool {
	suffix := s.items[cutIdx+1:]
	intrinsic := func(it *item) bool {
		return it.e.Type != sessionio.TypeContextEdit && len(contextMessagesOf(it.e)) > 0
	}
	omitted := func(it *item) bool { return intrinsic(it) && len(it.msgs) == 0 }
	omittedIDs := map[string]bool{}
	for i := range suffix {
		if omitted(&suffix[i]) {
			omittedIDs[suffix[i].e.ID] = true
		}
	}
	assistantOmitted := false
	for i := range suffix {
		it := &suffix[i]
		if it.e.Type == sessionio.TypeContextEdit && string(it.e.Replacement) != "null" && !omittedIDs[it.e.TargetID] {
			return false // an edit that replaces something else is not a recovery's leftover
		}
		if it.e.Type == sessionio.TypeCompaction || intrinsic(it) && !omitted(it) {
			return false
		}
		if it.e.IsMessage(sessionio.RoleAssistant) && omitted(it) {
			assistantOmitted = true
		}
	}
	return assistantOmitted
}

// contextMessagesOf is what an entry would put into a Pi 1.x context without any edit.
func contextMessagesOf(e *sessionio.Entry) []*sessionio.Message {
	return sessionio.Project([]*sessionio.Entry{e}, sessionio.Pi16).Entries[0].Messages
}
