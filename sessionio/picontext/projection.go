package picontext

import (
	"encoding/json"

	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/jsjson"
	"github.com/compactor-dev/compactor/sessionio/jsonscan"
)

// Projected is one entry of a context as Pi builds it, with the messages it puts there (none
// for most entry types, for an entry a context edit omits, and for an older compaction kept
// inside the newest one's range).
type Projected struct {
	Entry *sessionio.Entry
	// Index is the entry's position on the path it was projected from.
	Index    int
	Messages []*sessionio.Message
}

// Projection is the context Pi builds for a path, entry by entry: Pi's buildSessionProjection
// (>= 0.87), and for older releases the same shape over their buildSessionContext.
//
// With a compaction on the path, Entries starts with the latest compaction, followed by the
// entries from its firstKeptEntryId up to it (nothing when that id is not on the path, as for
// a retain-none compaction, whose firstKeptEntryId is its own id) and then every entry after
// it; without one, Entries is the whole path. What each entry puts there depends on the
// release (pi.Behaviour): with SystemMessages the kept range leaves system messages
// out (the compaction's checkpoint replaces them) and a compaction contributes its
// systemMessage before its summary; with EntryMessages a message without content gets an
// empty one, and (ResentSummary) an older compaction kept in the range contributes again;
// with ContextEdits the latest context edit of each target among these entries applies (a null
// replacement omits the target's messages, an object replaces their content) and only the
// newest compaction contributes.
type Projection struct {
	Release       pi.Release
	Entries       []Projected
	ThinkingLevel string
	Model         *sessionio.ModelRef
	// Compaction is the index in Entries of the compaction whose summary the context starts
	// with (0), or -1 without one.
	Compaction int
}

// Project builds the projection of path (root first, as Session.Path returns it) under
// release r's rules.
func Project(path []*sessionio.Entry, r pi.Release) *Projection {
	r = r.Or()
	p := &Projection{Release: r, ThinkingLevel: "off", Compaction: -1}
	compIdx := -1
	for i, e := range path {
		switch e.Type {
		case sessionio.TypeThinkingLevelChange:
			p.ThinkingLevel = e.ThinkingLevel
		case sessionio.TypeModelChange:
			p.Model = &sessionio.ModelRef{Provider: e.Provider, ModelID: e.ModelID}
		case sessionio.TypeMessage:
			if e.Message != nil && e.Message.Role == sessionio.RoleAssistant {
				p.Model = &sessionio.ModelRef{Provider: e.Message.Provider, ModelID: e.Message.Model}
			}
		case sessionio.TypeCompaction:
			compIdx = i
		}
	}
	dropKeptSystem := r.Has(pi.SystemMessages)
	entries := make([]Projected, 0, len(path)-max(0, compIdx)+1)
	if compIdx < 0 {
		for i, e := range path {
			entries = append(entries, Projected{Entry: e, Index: i})
		}
	} else {
		c := path[compIdx]
		entries = append(entries, Projected{Entry: c, Index: compIdx})
		p.Compaction = 0
		found := false
		for i, e := range path[:compIdx] {
			if e.ID == c.FirstKeptEntryID {
				found = true
			}
			if found && !(dropKeptSystem && e.IsMessage(sessionio.RoleSystem)) {
				entries = append(entries, Projected{Entry: e, Index: i})
			}
		}
		for i, e := range path[compIdx+1:] {
			entries = append(entries, Projected{Entry: e, Index: compIdx + 1 + i})
		}
	}
	if !r.Has(pi.EntryMessages) {
		for k := range entries {
			entries[k].Messages = messagesBefore0804(entries[k].Entry, k == 0 && compIdx >= 0)
		}
		p.Entries = entries
		return p
	}
	var edits map[string]*sessionio.Entry // the latest context edit of each target
	if r.Has(pi.ContextEdits) {
		edits = map[string]*sessionio.Entry{}
		for _, pe := range entries {
			if pe.Entry.Type == sessionio.TypeContextEdit {
				edits[pe.Entry.TargetID] = pe.Entry
			}
		}
	}
	for k := range entries {
		e := entries[k].Entry
		if e.Type == sessionio.TypeCompaction && k > 0 && !r.Has(pi.ResentSummary) {
			continue // an older compaction kept in the newest one's range contributes nothing
		}
		entries[k].Messages = applyEdit(entryMessages(e, r), edits[e.ID])
	}
	p.Entries = entries
	return p
}

// messagesBefore0804 is what an entry puts into the context of a Pi before 0.80.4: a message
// entry its message, a custom_message a custom message, a branch_summary with a summary a
// branchSummary message, the latest compaction (first) its summary; nothing else.
func messagesBefore0804(e *sessionio.Entry, latestCompaction bool) []*sessionio.Message {
	switch e.Type {
	case sessionio.TypeMessage:
		if e.Message == nil {
			return nil
		}
	case sessionio.TypeCustomMessage:
	case sessionio.TypeBranchSummary:
		if e.Summary == "" {
			return nil
		}
	case sessionio.TypeCompaction:
		if !latestCompaction {
			return nil
		}
	default:
		return nil
	}
	if m := AsMessage(e); m != nil {
		return []*sessionio.Message{m}
	}
	return nil
}

// entryMessages is Pi's sessionEntryToContextMessages (>= 0.80.4) as release r has it: as
// before for most entries, with an empty content filled in where a user, assistant or tool
// result message (and, with SystemMessages, a system message) has none, and a custom_message's;
// a compaction's systemMessage checkpoint before its summary (SystemMessages).
func entryMessages(e *sessionio.Entry, r pi.Release) []*sessionio.Message {
	switch e.Type {
	case sessionio.TypeMessage:
		m := e.Message
		if m == nil {
			return nil
		}
		if m.ContentNull {
			switch m.Role {
			case sessionio.RoleSystem:
				if r.Has(pi.SystemMessages) {
					return []*sessionio.Message{withContent(m, json.RawMessage(`""`))}
				}
			case sessionio.RoleUser, sessionio.RoleAssistant, sessionio.RoleToolResult:
				return []*sessionio.Message{withContent(m, json.RawMessage(`[]`))}
			}
		}
		return []*sessionio.Message{m}
	case sessionio.TypeCustomMessage:
		m := AsMessage(e)
		if len(e.Content) == 0 || string(e.Content) == "null" {
			m = withContent(m, json.RawMessage(`[]`))
		}
		return []*sessionio.Message{m}
	case sessionio.TypeBranchSummary:
		if e.Summary == "" {
			return nil
		}
		return []*sessionio.Message{AsMessage(e)}
	case sessionio.TypeCompaction:
		if e.SystemMessage != nil && r.Has(pi.SystemMessages) {
			return []*sessionio.Message{e.SystemMessage, AsMessage(e)}
		}
		return []*sessionio.Message{AsMessage(e)}
	}
	return nil
}

// MessagesOf is what entry e puts into the context of Pi r without any context edit
// (sessionEntryToContextMessages; before 0.80.4, what its buildSessionContext took from it,
// a compaction counted as the latest).
func MessagesOf(e *sessionio.Entry, r pi.Release) []*sessionio.Message {
	if !r.Or().Has(pi.EntryMessages) {
		return messagesBefore0804(e, true)
	}
	return entryMessages(e, r.Or())
}

// ProjectEntry is Pi's projectContextEntry (>= 0.87): what entry e puts into a context with
// its latest context edit (nil: none) applied.
func ProjectEntry(e, edit *sessionio.Entry) []*sessionio.Message {
	return applyEdit(entryMessages(e, pi.Latest), edit)
}

// applyEdit is Pi's projectContextEntry: without an edit the messages as they are; a null
// replacement omits them; an object's content replaces the content of user, assistant, tool
// result and custom messages (a string becomes one text block for an assistant or a tool
// result). A replacement Pi could not apply (not an object with a string or array content:
// Pi would fail on it) leaves the messages as they are.
func applyEdit(msgs []*sessionio.Message, edit *sessionio.Entry) []*sessionio.Message {
	if edit == nil {
		return msgs
	}
	if string(edit.Replacement) == "null" {
		return nil
	}
	content, ok := replacementContent(edit.Replacement)
	if !ok {
		return msgs
	}
	out := make([]*sessionio.Message, len(msgs))
	for i, m := range msgs {
		switch m.Role {
		case sessionio.RoleUser, sessionio.RoleCustom:
			out[i] = withContent(m, content)
		case sessionio.RoleAssistant, sessionio.RoleToolResult:
			c := content
			if len(c) > 0 && c[0] == '"' {
				b, _ := jsjson.Marshal([]any{jsjson.Fields{{Key: "type", Value: sessionio.BlockText}, {Key: "text", Value: json.RawMessage(c)}}})
				c = b
			}
			out[i] = withContent(m, c)
		default:
			out[i] = m
		}
	}
	return out
}

// replacementContent returns a context edit's replacement content: the "content" member of
// an object, when it is a string or an array.
func replacementContent(raw json.RawMessage) (json.RawMessage, bool) {
	if len(raw) == 0 || raw[0] != '{' {
		return nil, false
	}
	var buf [4]jsonscan.Member
	c := jsonscan.Get(jsonscan.TrustedMembers(raw, buf[:0]), "content")
	if len(c) == 0 || (c[0] != '"' && c[0] != '[') {
		return nil, false
	}
	return json.RawMessage(c), true
}

// withContent is `{...m, content}`: a copy of m whose content is content (a JSON string or
// array), in the content member's place (at the end when m has none).
func withContent(m *sessionio.Message, content json.RawMessage) *sessionio.Message {
	c := *m
	c.Projected = true
	c.ContentNull = false
	_ = c.Content.UnmarshalJSON(content)
	if m.Raw == nil { // left on disk: the writer puts content in when it copies the bytes out
		c.ContentRaw = content
		return &c
	}
	c.ContentRaw = nil
	c.Raw = ReplaceMember(m.Raw, "content", content)
	return &c
}

// ReplaceMember returns the object obj with the member key set to val, as JavaScript's
// `{...obj, [key]: val}` writes it: in the member's place, or last when obj has none.
func ReplaceMember(obj json.RawMessage, key string, val json.RawMessage) json.RawMessage {
	ms := jsonscan.TrustedMembers(obj, nil)
	fs := make(jsjson.Fields, 0, len(ms)+1)
	for _, mb := range ms {
		fs = append(fs, jsjson.Field{Key: jsonscan.Key(mb.Key), Value: json.RawMessage(mb.Val)})
	}
	fs = append(fs, jsjson.Field{Key: key, Value: val})
	b, err := jsjson.Marshal(fs)
	if err != nil {
		return obj
	}
	return b
}

// Messages are the projection's messages, in context order.
func (p *Projection) Messages() []*sessionio.Message {
	n := 0
	for _, pe := range p.Entries {
		n += len(pe.Messages)
	}
	out := make([]*sessionio.Message, 0, n)
	for _, pe := range p.Entries {
		out = append(out, pe.Messages...)
	}
	return out
}

// Context is the projection as Pi's buildSessionContext returns it.
func (p *Projection) Context() *Context {
	ctx := &Context{ThinkingLevel: p.ThinkingLevel, Model: p.Model}
	for _, pe := range p.Entries {
		for _, m := range pe.Messages {
			ctx.Messages = append(ctx.Messages, m)
			ctx.EntryIDs = append(ctx.EntryIDs, pe.Entry.ID)
		}
	}
	return ctx
}
