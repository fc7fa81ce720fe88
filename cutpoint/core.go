package cutpoint

import (
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/fileops"
	"github.com/compactor-dev/compactor/sessionio/picontext"
)

// OverBudget is Pi's shouldCompact (with compaction enabled): the context is over budget
// when its tokens exceed the window minus the reserve, strictly.
func OverBudget(contextTokens int, s Settings) bool {
	return contextTokens > s.ContextWindow-s.ReserveTokens
}

// ContextTokens is the size of the path's current context as Pi r computes tokensBefore,
// with counter c.
//
// Before 0.87 (estimateContextTokens over buildSessionContext): the usage of the last
// assistant message that is neither aborted nor an error (from 0.80, ZeroUsageSkipped: nor
// all zeros), plus c's count of every context message after it; with no such assistant, c's
// count of every context message.
//
// From 0.87 (ContextEdits: estimateProjectedContextTokens over the projection): the same, but
// an assistant's usage counts only when its entry comes after the path's latest context edit
// and latest compaction (a usage measured before an edit or a compaction is not the context's
// size any more); otherwise the count of the projection's messages, its system messages
// folded into one current system message (picontext.CurrentSystemMessage).
func ContextTokens(path []*sessionio.Entry, r pi.Release, c Counter) int {
	r = r.Or()
	if !r.Has(pi.ContextEdits) {
		return MessagesTokens(picontext.Build(path, r).Messages, r, c)
	}
	return ProjectedTokens(picontext.Project(path, r), path, c)
}

// MessagesTokens is ContextTokens (before 0.87) for an already built list of context messages.
func MessagesTokens(msgs []*sessionio.Message, r pi.Release, c Counter) int {
	skipZero := r.Or().Has(pi.ZeroUsageSkipped)
	last := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if m := msgs[i]; m != nil && m.HasValidUsage() && (!skipZero || m.Usage.ContextTokens() > 0) {
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

// ProjectedTokens is ContextTokens (from 0.87) for a projection of path.
func ProjectedTokens(proj *picontext.Projection, path []*sessionio.Entry, c Counter) int {
	// The newest usage Pi takes, and the entry it came from.
	usageK, usageM := -1, -1
	for k := len(proj.Entries) - 1; k >= 0 && usageK < 0; k-- {
		msgs := proj.Entries[k].Messages
		for i := len(msgs) - 1; i >= 0; i-- {
			if m := msgs[i]; m.HasValidUsage() && m.Usage.ContextTokens() > 0 {
				usageK, usageM = k, i
				break
			}
		}
	}
	if usageK >= 0 {
		invalidated := -1
		for i := len(path) - 1; i >= 0; i-- {
			if t := path[i].Type; t == sessionio.TypeContextEdit || t == sessionio.TypeCompaction {
				invalidated = i
				break
			}
		}
		if proj.Entries[usageK].Index > invalidated {
			pe := proj.Entries[usageK]
			total := int(pe.Messages[usageM].Usage.ContextTokens())
			for _, m := range pe.Messages[usageM+1:] {
				total += c.Count(m)
			}
			for _, pe := range proj.Entries[usageK+1:] {
				for _, m := range pe.Messages {
					total += c.Count(m)
				}
			}
			return total
		}
	}
	msgs := proj.Messages()
	total := 0
	if sys := picontext.CurrentSystemMessage(msgs); sys != nil {
		total += c.Count(sys)
	}
	for _, m := range msgs {
		if m.Role != sessionio.RoleSystem {
			total += c.Count(m)
		}
	}
	return total
}

// addFileOps adds what a summarized message tells of files: its tool calls, and from 0.99
// (NestedCallsFileOps) the calls a tool result's codemode script made.
func (s *segment) addFileOps(fo *fileops.FileOps, m *sessionio.Message) {
	fo.AddFromMessage(m)
	if s.r.Has(pi.NestedCallsFileOps) {
		fo.AddFromNestedCalls(m)
	}
}

// cut is a policy's decision before the plan is assembled: items of the segment.
type cut struct {
	firstKept int
	turnStart int // -1 when none
	split     bool
}

// unprepared returns the plan for a path Pi would not compact, or nil.
func unprepared(path []*sessionio.Entry, policy string, s Settings, c Counter) *Plan {
	var reason string
	switch {
	case len(path) == 0:
		reason = ReasonEmpty
	case path[len(path)-1].Type == sessionio.TypeCompaction:
		reason = ReasonAlreadyCompacted
	default:
		return nil
	}
	return notPrepared(path, reason, policy, s, c)
}

// notPrepared is the plan that says why nothing is planned.
func notPrepared(path []*sessionio.Entry, reason, policy string, s Settings, c Counter) *Plan {
	return &Plan{Prepared: false, Reason: reason, Policy: policy, Counter: c.Name(), Release: s.Release.Or(),
		TokensBefore: ContextTokens(path, s.Release, c), TurnStartIndex: -1, FirstKeptEntryIndex: -1}
}

// assemble builds the plan for a cut, as prepareCompaction's last steps do: the summarized
// messages are the range's up to the history's end and the prefix those of the split turn up
// to the cut; file operations are seeded from the previous compaction and collected from
// both. From 0.79.8 (NoPlanWhenNothingToSummarize) Pi makes no plan when nothing would be
// summarized.
func assemble(sg *segment, k cut, policy string, s Settings, c Counter) *Plan {
	path := sg.path
	if k.firstKept >= len(sg.items) || sg.items[k.firstKept].e.ID == "" {
		return notPrepared(path, ReasonEmpty, policy, s, c)
	}
	fk := sg.items[k.firstKept]
	p := &Plan{
		Prepared: true, Policy: policy, Counter: c.Name(), Release: sg.r,
		FirstKeptEntryID: fk.e.ID, FirstKeptEntryIndex: fk.at,
		IsSplitTurn: k.split, TurnStartIndex: -1,
		TokensBefore:       ContextTokens(path, sg.r, c),
		BoundaryStartIndex: sg.start,
	}
	if k.turnStart >= 0 {
		p.TurnStartIndex = sg.items[k.turnStart].at
		p.TurnStartEntryID = sg.items[k.turnStart].e.ID
	}
	if len(sg.items) > 0 {
		p.BoundaryStartEntryID = sg.items[0].e.ID
	}
	fo := fileops.New()
	if sg.prev != nil {
		p.PreviousCompactionID = sg.prev.ID
		sum := sg.prev.Summary
		p.PreviousSummary = &sum
		fo.SeedFromCompaction(sg.prev)
	}
	historyEnd := k.firstKept
	if k.split {
		historyEnd = k.turnStart
	}
	p.MessagesToSummarize = []string{}
	p.TurnPrefix = []string{}
	for i := 0; i < historyEnd; i++ {
		for _, m := range sg.summarized(i) {
			p.MessagesToSummarize = append(p.MessagesToSummarize, sg.items[i].e.ID)
			p.Summarize = append(p.Summarize, m)
			p.SummarizedTokens += c.Count(m)
			sg.addFileOps(fo, m)
		}
	}
	if k.split {
		for i := k.turnStart; i < k.firstKept; i++ {
			for _, m := range sg.summarized(i) {
				p.TurnPrefix = append(p.TurnPrefix, sg.items[i].e.ID)
				p.Prefix = append(p.Prefix, m)
				p.TurnPrefixTokens += c.Count(m)
				sg.addFileOps(fo, m)
			}
		}
	}
	if sg.r.Has(pi.NoPlanWhenNothingToSummarize) && len(p.Summarize) == 0 && len(p.Prefix) == 0 {
		return notPrepared(path, ReasonNothingToSummarize, policy, s, c)
	}
	for i := k.firstKept; i < len(sg.items); i++ {
		p.KeptTokens += sg.tokens(i, c)
	}
	p.FileOps.Read, p.FileOps.Written, p.FileOps.Edited = fo.ReadSet(), fo.WrittenSet(), fo.EditedSet()
	p.FileOps.ReadFiles, p.FileOps.ModifiedFiles = fo.Lists()
	return p
}
