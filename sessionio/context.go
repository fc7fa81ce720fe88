package sessionio

import (
	"bytes"
	"encoding/json"
	"github.com/compactor-dev/compactor/sessionio/jsonscan"
	"math"
	"strconv"
	"time"

	"github.com/compactor-dev/compactor/pi"
)

// BuildContext builds the context for a path (root first, as Path returns it) exactly as
// Pi's buildSessionContext does for the path's last entry, under dialect d's rules (see
// Projection):
//
//   - thinking_level_change sets the thinking level (default "off"); model_change and
//     assistant messages set the model; the last compaction on the path wins;
//   - without a compaction every entry is emitted in order; with one, its summary comes
//     first, then the entries from its firstKeptEntryId up to it (nothing, when that id is
//     not on the path), then everything after it;
//   - a message entry emits its message unchanged (errored and aborted ones too), a
//     custom_message a "custom" message, a branch_summary with a non-empty summary a
//     "branchSummary" message; every other type emits nothing;
//   - Pi 1.x: context edits, system messages and compaction checkpoints (Projection).
func BuildContext(path []*Entry, r pi.Release) *Context {
	return Project(path, r).Context()
}

// ModelOf is the model a path's context names (its latest model_change or assistant
// message), nil when it names none: BuildContext(path, d).Model for any d, without building
// the context.
func ModelOf(path []*Entry) *ModelRef {
	for i := len(path) - 1; i >= 0; i-- {
		e := path[i]
		switch {
		case e.Type == TypeModelChange:
			return &ModelRef{Provider: e.Provider, ModelID: e.ModelID}
		case e.Type == TypeMessage && e.Message != nil && e.Message.Role == RoleAssistant:
			return &ModelRef{Provider: e.Message.Provider, ModelID: e.Message.Model}
		}
	}
	return nil
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
	// e.Raw is a validated line (or the migration's re-encoding of one): its members are
	// found without validating it again.
	var f fields
	var buf [16]jsonscan.Member
	f.pick(jsonscan.TrustedMembers(e.Raw, buf[:0]))
	ts, tsOK := jsDate(f.timestamp)
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
		m.Content, _ = decodeContent(f.content)
		ob.add("role", quotedCustom)
		ob.add("customType", f.customType)
		ob.add("content", f.content)
		ob.add("display", f.display)
		ob.add("details", f.details)
	case TypeBranchSummary:
		m.Role = RoleBranchSummary
		m.Summary = e.Summary
		m.FromID = e.FromID
		ob.add("role", quotedBranchSummary)
		ob.add("summary", f.summary)
		ob.add("fromId", f.fromID)
	case TypeCompaction:
		m.Role = RoleCompactionSummary
		m.Summary = e.Summary
		m.TokensBefore = e.TokensBefore
		ob.add("role", quotedCompactionSummary)
		ob.add("summary", f.summary)
		ob.add("tokensBefore", f.tokensBefore)
	}
	ob.add("timestamp", tsRaw)
	m.Raw = ob.bytes()
	return m
}

// Roles of synthesized messages as JSON strings.
var (
	quotedCustom            = []byte(`"` + RoleCustom + `"`)
	quotedBranchSummary     = []byte(`"` + RoleBranchSummary + `"`)
	quotedCompactionSummary = []byte(`"` + RoleCompactionSummary + `"`)
)

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
	o.b.WriteByte('"')
	o.b.WriteString(key) // the keys used here need no escaping
	o.b.WriteString(`":`)
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
	s, ok := jsonscan.String(raw)
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
