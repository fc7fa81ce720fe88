package cutpoint

import (
	"github.com/compactor-dev/compactor/sessionio"
)

// OverBudget is Pi's shouldCompact (with compaction enabled): the context is over budget
// when its tokens exceed the window minus the reserve, strictly.
func OverBudget(contextTokens int, s Settings) bool {
	return contextTokens > s.ContextWindow-s.ReserveTokens
}

// ContextTokens is the size of the path's current context (Pi's estimateContextTokens over
// buildSessionContext): the usage of the last assistant message that is neither aborted
// nor an error, plus c's count of every context message after it; with no such assistant,
// c's count of every context message.
func ContextTokens(path []*sessionio.Entry, c Counter) int {
	return MessagesTokens(sessionio.BuildContext(path, sessionio.Pi073).Messages, c)
}

// MessagesTokens is ContextTokens for an already built list of context messages.
func MessagesTokens(msgs []*sessionio.Message, c Counter) int {
	last := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i] != nil && msgs[i].HasValidUsage() {
			last = i
			break
		}
	}
	total := 0
	if last >= 0 {
		total = int(msgs[last].Usage.ContextTokens())
	}
	for _, m := range msgs[last+1:] {
		if m != nil {
			total += c.Count(m)
		}
	}
	return total
}

// boundary returns the index of the last compaction on the path (-1 if none) and where
// the new compaction's range starts (Pi 0.73.1): the previous compaction's
// firstKeptEntryId on the path, else the entry after that compaction, else 0.
func boundary(path []*sessionio.Entry) (prevIdx, start int) {
	prevIdx = -1
	for i := len(path) - 1; i >= 0; i-- {
		if path[i].Type == sessionio.TypeCompaction {
			prevIdx = i
			break
		}
	}
	if prevIdx < 0 {
		return -1, 0
	}
	want := path[prevIdx].FirstKeptEntryID
	for i, e := range path {
		if e.ID == want {
			return prevIdx, i
		}
	}
	return prevIdx, prevIdx + 1
}

// isValidCut is Pi's findValidCutPoints predicate: a user, assistant, bashExecution,
// custom, branchSummary or compactionSummary message, a branch_summary or a
// custom_message. Never a toolResult: it must stay after its tool call.
func isValidCut(e *sessionio.Entry) bool {
	switch e.Type {
	case sessionio.TypeBranchSummary, sessionio.TypeCustomMessage:
		return true
	case sessionio.TypeMessage:
		if e.Message == nil {
			return false
		}
		switch e.Message.Role {
		case sessionio.RoleUser, sessionio.RoleAssistant, sessionio.RoleBashExecution,
			sessionio.RoleCustom, sessionio.RoleBranchSummary, sessionio.RoleCompactionSummary:
			return true
		}
	}
	return false
}

// isTurnStart is Pi's findTurnStartIndex predicate: a branch_summary, a custom_message, or
// a user or bashExecution message.
func isTurnStart(e *sessionio.Entry) bool {
	switch e.Type {
	case sessionio.TypeBranchSummary, sessionio.TypeCustomMessage:
		return true
	case sessionio.TypeMessage:
		return e.Message != nil && (e.Message.Role == sessionio.RoleUser || e.Message.Role == sessionio.RoleBashExecution)
	}
	return false
}

// findTurnStart is Pi's findTurnStartIndex: the nearest turn start at or before idx and
// not before start, or -1.
func findTurnStart(path []*sessionio.Entry, idx, start int) int {
	for i := idx; i >= start; i-- {
		if isTurnStart(path[i]) {
			return i
		}
	}
	return -1
}

// pullBack moves a cut backward over the non-message entries just before it (settings
// changes, labels, custom entries, custom_messages, branch summaries), stopping at a
// message, a compaction or start, as Pi does: they belong with what follows them.
func pullBack(path []*sessionio.Entry, cut, start int) int {
	for cut > start {
		p := path[cut-1]
		if p.Type == sessionio.TypeCompaction || p.Type == sessionio.TypeMessage {
			break
		}
		cut--
	}
	return cut
}

// validCuts returns Pi's valid cut points in [start, end).
func validCuts(path []*sessionio.Entry, start, end int) []int {
	var cps []int
	for i := start; i < end; i++ {
		if isValidCut(path[i]) {
			cps = append(cps, i)
		}
	}
	return cps
}

// messageOf is the message an entry contributes to a summary (Pi's
// getMessageFromEntryForCompaction): compactions excluded.
func messageOf(e *sessionio.Entry) *sessionio.Message {
	if e.Type == sessionio.TypeCompaction {
		return nil
	}
	return sessionio.AsMessage(e)
}

// cut is a policy's decision before the plan is assembled.
type cut struct {
	firstKept int
	turnStart int // -1 when none
	split     bool
}

// unprepared returns the plan for a path Pi would not compact, or nil.
func unprepared(path []*sessionio.Entry, policy string, c Counter) *Plan {
	var reason string
	switch {
	case len(path) == 0:
		reason = ReasonEmpty
	case path[len(path)-1].Type == sessionio.TypeCompaction:
		reason = ReasonAlreadyCompacted
	default:
		return nil
	}
	return &Plan{Prepared: false, Reason: reason, Policy: policy, Counter: c.Name(),
		TokensBefore: ContextTokens(path, c), TurnStartIndex: -1, FirstKeptEntryIndex: -1}
}

// assemble builds the plan for a cut, as prepareCompaction steps 6-10 do: the summarized
// messages are [start, historyEnd) and the prefix [turnStart, firstKept), compactions
// excluded; file operations are seeded from the previous compaction and collected from
// both.
func assemble(path []*sessionio.Entry, prevIdx, start int, k cut, policy string, c Counter) *Plan {
	p := &Plan{
		Prepared: true, Policy: policy, Counter: c.Name(),
		FirstKeptEntryID: path[k.firstKept].ID, FirstKeptEntryIndex: k.firstKept,
		IsSplitTurn: k.split, TurnStartIndex: k.turnStart,
		TokensBefore:       ContextTokens(path, c),
		BoundaryStartIndex: start,
	}
	if p.FirstKeptEntryID == "" {
		return &Plan{Prepared: false, Reason: ReasonEmpty, Policy: policy, Counter: c.Name(),
			TokensBefore: p.TokensBefore, TurnStartIndex: -1, FirstKeptEntryIndex: -1}
	}
	if k.turnStart >= 0 {
		p.TurnStartEntryID = path[k.turnStart].ID
	}
	if start < len(path) {
		p.BoundaryStartEntryID = path[start].ID
	}
	fo := sessionio.NewFileOps()
	if prevIdx >= 0 {
		prev := path[prevIdx]
		p.PreviousCompactionID = prev.ID
		s := prev.Summary
		p.PreviousSummary = &s
		fo.SeedFromCompaction(prev)
	}
	historyEnd := k.firstKept
	if k.split {
		historyEnd = k.turnStart
	}
	p.MessagesToSummarize = []string{}
	p.TurnPrefix = []string{}
	for i := start; i < historyEnd; i++ {
		if m := messageOf(path[i]); m != nil {
			p.MessagesToSummarize = append(p.MessagesToSummarize, path[i].ID)
			p.Summarize = append(p.Summarize, m)
			p.SummarizedTokens += c.Count(m)
			fo.AddFromMessage(m)
		}
	}
	if k.split {
		for i := k.turnStart; i < k.firstKept; i++ {
			if m := messageOf(path[i]); m != nil {
				p.TurnPrefix = append(p.TurnPrefix, path[i].ID)
				p.Prefix = append(p.Prefix, m)
				p.TurnPrefixTokens += c.Count(m)
				fo.AddFromMessage(m)
			}
		}
	}
	for _, e := range path[k.firstKept:] {
		if m := messageOf(e); m != nil {
			p.KeptTokens += c.Count(m)
		}
	}
	p.FileOps.Read, p.FileOps.Written, p.FileOps.Edited = fo.ReadSet(), fo.WrittenSet(), fo.EditedSet()
	p.FileOps.ReadFiles, p.FileOps.ModifiedFiles = fo.Lists()
	return p
}
