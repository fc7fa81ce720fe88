package cutpoint

import "github.com/compactor-dev/compactor/sessionio"

// A segment is the range a compaction cuts, as the Pi dialect of the plan sees it: the
// entries from where the previous compaction's kept part begins to the leaf, each with the
// messages it puts into the context. Every policy, the invariants and the explanation work on
// it, so that one algorithm serves both Pi releases.
//
// Pi 0.73 cuts the path itself: the range is path[start:], the previous compaction's
// firstKeptEntryId on the path (else the entry after that compaction, else 0), and each entry
// brings the message Pi's compaction would summarize (none for a compaction). Pi 1.x cuts its
// projection (sessionio.Projection): the range is everything after the compaction the context
// starts with, system messages of the kept part are gone, an entry a context edit omits brings
// no message, one it replaces brings the new content.
type segment struct {
	d    sessionio.Dialect
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

// newSegment builds the segment of path under dialect d.
func newSegment(path []*sessionio.Entry, d sessionio.Dialect) *segment {
	d = d.Or()
	s := &segment{d: d, path: path, prevAt: -1}
	if !d.Projects() {
		s.prevAt, s.start = boundary(path)
		if s.prevAt >= 0 {
			s.prev = path[s.prevAt]
		}
		s.items = make([]item, 0, len(path)-s.start)
		for i := s.start; i < len(path); i++ {
			it := item{e: path[i], at: i}
			if m := messageOf(path[i]); m != nil {
				it.msgs = []*sessionio.Message{m}
			}
			s.items = append(s.items, it)
		}
		return s
	}
	proj := sessionio.Project(path, d)
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

// messageOf is the message an entry contributes to a summary in Pi 0.73 (its
// getMessageFromEntryForCompaction): compactions excluded.
func messageOf(e *sessionio.Entry) *sessionio.Message {
	if e.Type == sessionio.TypeCompaction {
		return nil
	}
	return sessionio.AsMessage(e)
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
// 0.73 decides by the entry (a user, assistant, bashExecution, custom, branchSummary or
// compactionSummary message, a branch_summary or a custom_message); 1.x by what the entry
// puts into the context (such a message, in its projection: an omitted entry is no cut
// point). Never a toolResult: it must stay after its tool call. Never a compaction.
func (s *segment) validCut(k int) bool {
	it := &s.items[k]
	if !s.d.Projects() {
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

// turnStart reports whether item k starts a turn: Pi's findTurnStartIndex predicate. 0.73: a
// branch_summary, a custom_message, or a user or bashExecution message. 1.x: an entry whose
// projection has a user, bashExecution, custom, branchSummary or compactionSummary message.
func (s *segment) turnStart(k int) bool {
	it := &s.items[k]
	if !s.d.Projects() {
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

// user reports whether item k is a user message (in 1.x: in its projection).
func (s *segment) user(k int) bool {
	it := &s.items[k]
	if !s.d.Projects() {
		return it.e.IsMessage(sessionio.RoleUser)
	}
	for _, m := range it.msgs {
		if m.Role == sessionio.RoleUser {
			return true
		}
	}
	return false
}

// visible reports whether item k stops a cut that is pulled back: 0.73 passes over every
// entry but messages and compactions (custom_message and branch_summary entries included);
// 1.x over every entry that puts nothing into the context.
func (s *segment) visible(k int) bool {
	it := &s.items[k]
	if it.e.Type == sessionio.TypeCompaction {
		return true
	}
	if !s.d.Projects() {
		return it.e.Type == sessionio.TypeMessage
	}
	return len(it.msgs) > 0
}

// weight is what Pi's walk back from the leaf adds for item k: 0.73 weighs message entries
// only (custom_message and branch_summary entries count nothing), 1.x every message the
// entry puts into the context (system messages, custom and summary messages included).
func (s *segment) weight(k int, c Counter) int {
	it := &s.items[k]
	if !s.d.Projects() {
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

// summarized is what item k gives a summary: its messages, without Pi 1.x's system
// messages (prompt state, which the compaction's checkpoint carries).
func (s *segment) summarized(k int) []*sessionio.Message {
	msgs := s.items[k].msgs
	if !s.d.Projects() {
		return msgs
	}
	var out []*sessionio.Message
	for _, m := range msgs {
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

// isValidCut is Pi 0.73's findValidCutPoints predicate: a user, assistant, bashExecution,
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

// isTurnStart is Pi 0.73's findTurnStartIndex predicate: a branch_summary, a custom_message,
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
