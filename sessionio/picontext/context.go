package picontext

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"time"

	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/jsonscan"
)

// Context is what Pi's buildSessionContext returns for a leaf.
type Context struct {
	Messages      []*sessionio.Message
	ThinkingLevel string
	Model         *sessionio.ModelRef
	// EntryIDs[i] is the id of the entry Messages[i] came from.
	EntryIDs []string
}

// Build builds the context for a path (root first, as Path returns it) exactly as
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
func Build(path []*sessionio.Entry, r pi.Release) *Context {
	return Project(path, r).Context()
}

// ModelOf is the model a path's context names (its latest model_change or assistant
// message), nil when it names none: Build(path, d).Model for any d, without building
// the context.
func ModelOf(path []*sessionio.Entry) *sessionio.ModelRef {
	for i := len(path) - 1; i >= 0; i-- {
		e := path[i]
		switch {
		case e.Type == sessionio.TypeModelChange:
			return &sessionio.ModelRef{Provider: e.Provider, ModelID: e.ModelID}
		case e.Type == sessionio.TypeMessage && e.Message != nil && e.Message.Role == sessionio.RoleAssistant:
			return &sessionio.ModelRef{Provider: e.Message.Provider, ModelID: e.Message.Model}
		}
	}
	return nil
}

// AsMessage converts an entry to the message Pi builds from it: a message entry's own
// message; custom_message → role "custom"; branch_summary → role "branchSummary" (even
// with an empty summary: callers that must drop those, like Build, do so);
// compaction → role "compactionSummary". Other types give nil.
func AsMessage(e *sessionio.Entry) *sessionio.Message {
	switch e.Type {
	case sessionio.TypeMessage:
		return e.Message
	case sessionio.TypeCustomMessage, sessionio.TypeBranchSummary, sessionio.TypeCompaction:
	default:
		return nil
	}
	// e.Raw is a validated line (or the migration's re-encoding of one): its members are
	// found without validating it again.
	var buf [16]jsonscan.Member
	ms := jsonscan.TrustedMembers(e.Raw, buf[:0])
	ts, tsOK := jsDate(jsonscan.Lookup(ms, "timestamp"))
	tsRaw := []byte("null")
	if tsOK {
		tsRaw = []byte(formatJSNumber(ts))
	}
	var ob objBuilder
	m := &sessionio.Message{Timestamp: ts}
	switch e.Type {
	case sessionio.TypeCustomMessage:
		m.Role = sessionio.RoleCustom
		m.CustomType = e.CustomType
		_ = m.Content.UnmarshalJSON(jsonscan.Lookup(ms, "content"))
		ob.add("role", quotedCustom)
		ob.add("customType", jsonscan.Lookup(ms, "customType"))
		ob.add("content", jsonscan.Lookup(ms, "content"))
		ob.add("display", jsonscan.Lookup(ms, "display"))
		ob.add("details", jsonscan.Lookup(ms, "details"))
	case sessionio.TypeBranchSummary:
		m.Role = sessionio.RoleBranchSummary
		m.Summary = e.Summary
		m.FromID = e.FromID
		ob.add("role", quotedBranchSummary)
		ob.add("summary", jsonscan.Lookup(ms, "summary"))
		ob.add("fromId", jsonscan.Lookup(ms, "fromId"))
	case sessionio.TypeCompaction:
		m.Role = sessionio.RoleCompactionSummary
		m.Summary = e.Summary
		m.TokensBefore = e.TokensBefore
		ob.add("role", quotedCompactionSummary)
		ob.add("summary", jsonscan.Lookup(ms, "summary"))
		ob.add("tokensBefore", jsonscan.Lookup(ms, "tokensBefore"))
	}
	ob.add("timestamp", tsRaw)
	m.Raw = ob.bytes()
	return m
}

// Roles of synthesized messages as JSON strings.
var (
	quotedCustom            = []byte(`"` + sessionio.RoleCustom + `"`)
	quotedBranchSummary     = []byte(`"` + sessionio.RoleBranchSummary + `"`)
	quotedCompactionSummary = []byte(`"` + sessionio.RoleCompactionSummary + `"`)
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
	if v, ok := jsonscan.Number(raw); ok {
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
