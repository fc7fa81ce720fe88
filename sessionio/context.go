package sessionio

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"time"
)

// BuildContext builds the context for a path (root first, as Path returns it) exactly as
// Pi's buildSessionContext does for the path's last entry:
//
//   - thinking_level_change sets the thinking level (default "off"); model_change and
//     assistant messages set the model; the last compaction on the path wins;
//   - without a compaction every entry is emitted in order; with one, its summary comes
//     first, then the entries from its firstKeptEntryId up to it (nothing, when that id is
//     not on the path), then everything after it;
//   - a message entry emits its message unchanged (errored and aborted ones too), a
//     custom_message a "custom" message, a branch_summary with a non-empty summary a
//     "branchSummary" message; every other type emits nothing.
func BuildContext(path []*Entry) *Context {
	ctx := &Context{ThinkingLevel: "off"}
	compIdx := -1
	for i, e := range path {
		switch e.Type {
		case TypeThinkingLevelChange:
			ctx.ThinkingLevel = e.ThinkingLevel
		case TypeModelChange:
			ctx.Model = &ModelRef{Provider: e.Provider, ModelID: e.ModelID}
		case TypeMessage:
			if e.Message != nil && e.Message.Role == RoleAssistant {
				ctx.Model = &ModelRef{Provider: e.Message.Provider, ModelID: e.Message.Model}
			}
		case TypeCompaction:
			compIdx = i
		}
	}
	emit := func(e *Entry) {
		switch e.Type {
		case TypeMessage, TypeCustomMessage:
		case TypeBranchSummary:
			if e.Summary == "" {
				return
			}
		default:
			return
		}
		if m := AsMessage(e); m != nil {
			ctx.Messages = append(ctx.Messages, m)
			ctx.EntryIDs = append(ctx.EntryIDs, e.ID)
		}
	}
	if compIdx < 0 {
		for _, e := range path {
			emit(e)
		}
		return ctx
	}
	c := path[compIdx]
	ctx.Messages = append(ctx.Messages, AsMessage(c))
	ctx.EntryIDs = append(ctx.EntryIDs, c.ID)
	found := false
	for _, e := range path[:compIdx] {
		if e.ID == c.FirstKeptEntryID {
			found = true
		}
		if found {
			emit(e)
		}
	}
	for _, e := range path[compIdx+1:] {
		emit(e)
	}
	return ctx
}

// AsMessage converts an entry to the message Pi builds from it: a message entry's own
// message; custom_message → role "custom"; branch_summary → role "branchSummary" (even
// with an empty summary: callers that must drop those, like BuildContext, do so);
// compaction → role "compactionSummary". Other types give nil.
func AsMessage(e *Entry) *Message {
	switch e.Type {
	case TypeMessage:
		return e.Message
	case TypeCustomMessage, TypeBranchSummary, TypeCompaction:
	default:
		return nil
	}
	var f struct {
		CustomType   json.RawMessage `json:"customType"`
		Content      json.RawMessage `json:"content"`
		Display      json.RawMessage `json:"display"`
		Details      json.RawMessage `json:"details"`
		Summary      json.RawMessage `json:"summary"`
		TokensBefore json.RawMessage `json:"tokensBefore"`
		FromID       json.RawMessage `json:"fromId"`
		Timestamp    json.RawMessage `json:"timestamp"`
	}
	_ = json.Unmarshal(e.Raw, &f)
	ts, tsOK := jsDate(f.Timestamp)
	tsRaw := []byte("null")
	if tsOK {
		tsRaw = []byte(formatJSNumber(ts))
	}
	var ob objBuilder
	m := &Message{Timestamp: ts}
	switch e.Type {
	case TypeCustomMessage:
		m.Role = RoleCustom
		m.CustomType = e.CustomType
		_ = json.Unmarshal(f.Content, &m.Content)
		ob.add("role", mustJSON(RoleCustom))
		ob.add("customType", f.CustomType)
		ob.add("content", f.Content)
		ob.add("display", f.Display)
		ob.add("details", f.Details)
	case TypeBranchSummary:
		m.Role = RoleBranchSummary
		m.Summary = e.Summary
		m.FromID = e.FromID
		ob.add("role", mustJSON(RoleBranchSummary))
		ob.add("summary", f.Summary)
		ob.add("fromId", f.FromID)
	case TypeCompaction:
		m.Role = RoleCompactionSummary
		m.Summary = e.Summary
		m.TokensBefore = e.TokensBefore
		ob.add("role", mustJSON(RoleCompactionSummary))
		ob.add("summary", f.Summary)
		ob.add("tokensBefore", f.TokensBefore)
	}
	ob.add("timestamp", tsRaw)
	m.Raw = ob.bytes()
	return m
}

// objBuilder writes a JSON object from raw values, skipping absent ones (JS undefined).
type objBuilder struct{ b bytes.Buffer }

func (o *objBuilder) add(key string, raw []byte) {
	if len(raw) == 0 {
		return
	}
	if o.b.Len() == 0 {
		o.b.WriteByte('{')
	} else {
		o.b.WriteByte(',')
	}
	o.b.Write(mustJSON(key))
	o.b.WriteByte(':')
	o.b.Write(raw)
}

func (o *objBuilder) bytes() json.RawMessage {
	if o.b.Len() == 0 {
		return json.RawMessage("{}")
	}
	o.b.WriteByte('}')
	return o.b.Bytes()
}

// jsDate is `new Date(v).getTime()` for a JSON string or number: ISO-8601 strings as
// JavaScript parses them (a date alone is UTC, a date-time without an offset is local
// time); anything else is NaN (ok=false).
func jsDate(raw json.RawMessage) (float64, bool) {
	if v, ok := jsonNumber(raw); ok {
		if math.Abs(v) > 8.64e15 {
			return 0, false
		}
		return math.Trunc(v), true
	}
	s, ok := jsonString(raw)
	if !ok {
		return 0, false
	}
	return ParseJSDate(s)
}

// ParseJSDate parses the ISO-8601 forms JavaScript's Date.parse accepts and returns epoch
// milliseconds.
func ParseJSDate(s string) (float64, bool) {
	layouts := []struct {
		layout string
		local  bool
	}{
		{"2006-01-02T15:04:05.999999999Z07:00", false},
		{"2006-01-02T15:04Z07:00", false},
		{"2006-01-02T15:04:05.999999999", true},
		{"2006-01-02T15:04", true},
		{"2006-01-02", false},
		{"2006-01", false},
		{"2006", false},
	}
	for _, l := range layouts {
		var t time.Time
		var err error
		if l.local {
			t, err = time.ParseInLocation(l.layout, s, time.Local)
		} else {
			t, err = time.Parse(l.layout, s)
		}
		if err == nil {
			return float64(t.UnixMilli()), true
		}
	}
	return 0, false
}

// formatJSNumber formats an integral millisecond value as JavaScript prints it.
func formatJSNumber(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e21 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
