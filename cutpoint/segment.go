package cutpoint

import (
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/picontext"
)

// A segment is the range a compaction cuts, as the Pi release of the plan sees it: the
// entries from where the previous compaction's kept part begins to the leaf, each with the
// messages it puts into the context. Every policy, the invariants and the explanation work on
// it, so that one algorithm serves every Pi release.
//
// Before 0.87 (pi.ContextEdits) Pi cuts the path itself: the range is path[start:],
// from the previous compaction's firstKeptEntryId on the path (else the entry after that
// compaction, else 0), the previous compaction itself included. Before 0.80.4 each entry
// brings the message Pi's compaction would summarize (none for a compaction); from 0.80.4
// (pi.EntryMessages) what it puts into the context (a compaction its summary). From
// 0.87 Pi cuts its projection (picontext.Projection): the range is everything after the
// compaction the context starts with, system messages of the kept part are gone, an entry a
// context edit omits brings no message, one it replaces brings the new content.
type segment struct {
	r    pi.Release
	path []*sessionio.Entry
	// items are the range, in context order; items[k].at is the entry's index on the path.
	items []item
	// prev is the compaction the range follows (nil without one) and prevAt its path index.
	prev   *sessionio.Entry
	prevAt int
	// start is the path index where the range starts (len(path) when it is empty).
	start int
}

// item is one entry of a segment.
type item struct {
	e    *sessionio.Entry
	at   int
	msgs []*sessionio.Message
}

// newSegment builds the segment of path under release r.
func newSegment(path []*sessionio.Entry, r pi.Release) *segment {
	r = r.Or()
	s := &segment{r: r, path: path, prevAt: -1}
	if !r.Has(pi.ContextEdits) {
		s.prevAt, s.start = boundary(path)
		if s.prevAt >= 0 {
			s.prev = path[s.prevAt]
		}
		s.items = make([]item, 0, len(path)-s.start)
		for i := s.start; i < len(path); i++ {
			it := item{e: path[i], at: i}
			if r.Has(pi.EntryMessages) {
				it.msgs = picontext.MessagesOf(path[i], r)
			} else if m := messageOf(path[i]); m != nil {
				it.msgs = []*sessionio.Message{m}
			}
			s.items = append(s.items, it)
		}
		return s
	}
	proj := picontext.Project(path, r)
	from := 0
	for k, pe := range proj.Entries {
		if pe.Entry.Type == sessionio.TypeCompaction && len(pe.Messages) > 0 {
			s.prev, s.prevAt, from = pe.Entry, pe.Index, k+1
			break
		}
	}
	s.items = make([]item, 0, len(proj.Entries)-from)
	for _, pe := range proj.Entries[from:] {
		s.items = append(s.items, item{e: pe.Entry, at: pe.Index, msgs: pe.Messages})
	}
	s.start = len(path)
	if len(s.items) > 0 {
		s.start = s.items[0].at
	}
	return s
}

// boundary returns the index of the last compaction on the path (-1 if none) and where
// the new compaction's range starts (Pi before 0.87): the previous compaction's
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

// messageOf is the message an entry contributes to a summary in Pi before 0.80.4 (its
// getMessageFromEntryForCompaction): compactions excluded.
func messageOf(e *sessionio.Entry) *sessionio.Message {
	if e.Type == sessionio.TypeCompaction {
		return nil
	}
	return picontext.AsMessage(e)
}

// index returns the item of the entry at path index at, -1 when it is not in the range.
func (s *segment) index(at int) int {
	for k, it := range s.items {
		if it.at == at {
			return k
		}
	}
	return -1
}

// validCut reports whether item k may be the first kept entry: Pi's findValidCutPoints.
// Before 0.80.4 it decides by the entry (a user, assistant, bashExecution, custom,
// branchSummary or compactionSummary message, a branch_summary or a custom_message); from
// 0.80.4 (ContextMessagesWeigh) by what the entry puts into the context (such a message: an
// entry a context edit omits is no cut point). Never a toolResult: it must stay after its tool
// call. Never a compaction.
func (s *segment) validCut(k int) bool {
	it := &s.items[k]
	if !s.r.Has(pi.ContextMessagesWeigh) {
		return isValidCut(it.e)
	}
	if it.e.Type == sessionio.TypeCompaction {
		return false
	}
	for _, m := range it.msgs {
		switch m.Role {
		case sessionio.RoleUser, sessionio.RoleAssistant, sessionio.RoleBashExecution,
			sessionio.RoleCustom, sessionio.RoleBranchSummary, sessionio.RoleCompactionSummary:
			return true
		}
	}
	return false
}

// turnStart reports whether item k starts a turn: Pi's findTurnStartIndex predicate. Before
// 0.80.4: a branch_summary, a custom_message, or a user or bashExecution message. From 0.80.4
// (ContextMessagesWeigh): an entry whose context messages have a user, bashExecution, custom,
// branchSummary or compactionSummary message.
func (s *segment) turnStart(k int) bool {
	it := &s.items[k]
	if !s.r.Has(pi.ContextMessagesWeigh) {
		return isTurnStart(it.e)
	}
	if it.e.Type == sessionio.TypeCompaction {
		return false
	}
	for _, m := range it.msgs {
		switch m.Role {
		case sessionio.RoleUser, sessionio.RoleBashExecution, sessionio.RoleCustom,
			sessionio.RoleBranchSummary, sessionio.RoleCompactionSummary:
			return true
		}
	}
	return false
}

// user reports whether item k is a user message (from 0.80.4: in its context messages).
func (s *segment) user(k int) bool {
	it := &s.items[k]
	if !s.r.Has(pi.ContextMessagesWeigh) {
		return it.e.IsMessage(sessionio.RoleUser)
	}
	for _, m := range it.msgs {
		if m.Role == sessionio.RoleUser {
			return true
		}
	}
	return false
}

// visible reports whether item k stops a cut that is pulled back: before 0.80.4 Pi passes
// over every entry but messages and compactions (custom_message and branch_summary entries
// included); from 0.80.4 (ContextMessagesWeigh) over every entry that puts nothing into the
// context.
func (s *segment) visible(k int) bool {
	it := &s.items[k]
	if it.e.Type == sessionio.TypeCompaction {
		return true
	}
	if !s.r.Has(pi.ContextMessagesWeigh) {
		return it.e.Type == sessionio.TypeMessage
	}
	return len(it.msgs) > 0
}

// weighs reports whether Pi's walk back from the leaf counts item k at all: before 0.80.4
// every message entry (whatever it weighs), from 0.80.4 (ContextMessagesWeigh) an entry whose
// context messages weigh something.
func (s *segment) weighs(k int, c Counter) (int, bool) {
	w := s.weight(k, c)
	if !s.r.Has(pi.ContextMessagesWeigh) {
		return w, s.items[k].e.Type == sessionio.TypeMessage
	}
	return w, w > 0
}

// weight is what Pi's walk back from the leaf adds for item k: before 0.80.4 message entries
// only (custom_message and branch_summary entries count nothing), from 0.80.4
// (ContextMessagesWeigh) every message the entry puts into the context (custom and summary
// messages, an older compaction's summary, system messages included).
func (s *segment) weight(k int, c Counter) int {
	it := &s.items[k]
	if !s.r.Has(pi.ContextMessagesWeigh) {
		if it.e.Type != sessionio.TypeMessage || it.e.Message == nil {
			return 0
		}
		return c.Count(it.e.Message)
	}
	n := 0
	for _, m := range it.msgs {
		n += c.Count(m)
	}
	return n
}

// tokens is the counter's count of every message item k brings.
func (s *segment) tokens(k int, c Counter) int {
	n := 0
	for _, m := range s.items[k].msgs {
		n += c.Count(m)
	}
	return n
}

// summarized is what item k gives a summary: its messages, a compaction none, and from 0.86
// (SystemMessages) no system message (prompt state, which the compaction's checkpoint
// carries).
func (s *segment) summarized(k int) []*sessionio.Message {
	it := &s.items[k]
	if it.e.Type == sessionio.TypeCompaction {
		return nil
	}
	if !s.r.Has(pi.SystemMessages) {
		return it.msgs
	}
	var out []*sessionio.Message
	for _, m := range it.msgs {
		if m.Role != sessionio.RoleSystem {
			out = append(out, m)
		}
	}
	return out
}

// validCuts returns the valid cut points of the range.
func (s *segment) validCuts() []int {
	var cps []int
	for k := range s.items {
		if s.validCut(k) {
			cps = append(cps, k)
		}
	}
	return cps
}

// findTurnStart is Pi's findTurnStartIndex: the nearest turn start at or before k, or -1.
func (s *segment) findTurnStart(k int) int {
	for ; k >= 0; k-- {
		if s.turnStart(k) {
			return k
		}
	}
	return -1
}

// pullBack moves a cut backward over the items just before it that Pi passes over (see
// visible), stopping at the range's start: they belong with what follows them.
func (s *segment) pullBack(k int) int {
	for k > 0 && !s.visible(k-1) {
		k--
	}
	return k
}

// isValidCut is the findValidCutPoints predicate of Pi before 0.80.4: a user, assistant, bashExecution,
// custom, branchSummary or compactionSummary message, a branch_summary or a custom_message.
// Never a toolResult: it must stay after its tool call.
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

// isTurnStart is the findTurnStartIndex predicate of Pi before 0.80.4: a branch_summary, a custom_message,
// or a user or bashExecution message.
func isTurnStart(e *sessionio.Entry) bool {
	switch e.Type {
	case sessionio.TypeBranchSummary, sessionio.TypeCustomMessage:
		return true
	case sessionio.TypeMessage:
		return e.Message != nil && (e.Message.Role == sessionio.RoleUser || e.Message.Role == sessionio.RoleBashExecution)
	}
	return false
}
