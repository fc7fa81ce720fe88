package cutpoint

import (
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/picontext"
)

// Pi is Pi's own cut, exactly, for the release the settings name: prepareCompaction with its
// findCutPoint, findValidCutPoints and findTurnStartIndex, weighing messages with any
// counter. With Pi's chars/4 estimate it gives what Pi's prepareCompaction gives.
//
// Walking back from the end it adds up what entries weigh until keepRecentTokens is reached,
// then moves FORWARD to the next valid cut point (never backward), pulls the cut back over the
// entries in front of it that put nothing into the context, and marks the turn as split
// unless the cut starts a turn. The releases differ in the details (pi.Behaviour):
//
//   - before 0.80.4, Pi weighs "message" entries only (custom_message and branch_summary
//     entries are cut points but weigh nothing), pulls back over custom messages and branch
//     summaries too, and counts only a user or bashExecution message (or a custom_message or
//     branch_summary entry) as a turn start; from 0.80.4 (ContextMessagesWeigh) it weighs
//     every message an entry puts into the context, pulls back only over entries that put
//     nothing there, and also counts a custom, branch summary or compaction summary message
//     as a turn start;
//   - when no cut point follows the crossing (trailing tool results over the budget) it
//     keeps everything from the first cut point, from 0.86 (TrailingToolResultsKeepLastCut)
//     from the last;
//   - from 0.87 (ContextEdits) it works on the projection (context edits applied, system
//     messages of the kept part gone) and moves past a recovery attempt's omitted leftovers;
//   - from 0.79.8 (NoPlanWhenNothingToSummarize) it makes no plan when nothing would be
//     summarized.
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
	sg := newSegment(path, s.Release)
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
		w, counted := s.weighs(k, c)
		if !counted {
			continue
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
			if !found && s.r.Has(pi.TrailingToolResultsKeepLastCut) {
				cutIdx = cps[len(cps)-1]
			}
			break
		}
	}
	if crossed && s.r.Has(pi.ContextEdits) && s.recoveryLeftovers(cutIdx) {
		cutIdx++
	}
	cutIdx = s.pullBack(cutIdx)
	if s.startsTurn(cutIdx) {
		return cut{firstKept: cutIdx, turnStart: -1}
	}
	ts := s.findTurnStart(cutIdx)
	return cut{firstKept: cutIdx, turnStart: ts, split: ts != -1}
}

// startsTurn reports whether a cut at item k keeps its turn whole: before 0.80.4 only a cut
// at a user message does (a cut at a bash or custom message is a split turn with an empty
// prefix), from 0.80.4 (ContextMessagesWeigh) a cut at any turn start.
func (s *segment) startsTurn(k int) bool {
	if !s.r.Has(pi.ContextMessagesWeigh) {
		return s.items[k].e.IsMessage(sessionio.RoleUser)
	}
	return s.turnStart(k)
}

// recoveryLeftovers is Pi's overflow-recovery check (ContextEdits): everything after the cut is
// invisible to the model and holds an assistant attempt a context edit omitted (with no
// replacement edit of anything else among it), so the cut moves one entry on rather than
// keep leftovers only.
func (s *segment) recoveryLeftovers(cutIdx int) bool {
	suffix := s.items[cutIdx+1:]
	intrinsic := func(it *item) bool {
		return it.e.Type != sessionio.TypeContextEdit && len(picontext.MessagesOf(it.e, s.r)) > 0
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
