package sessionio

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/compactor-dev/compactor/sessionio/jsonscan"
)

// fields are the raw values of the members of an entry line that compactor reads (the last
// of duplicate keys, as in JSON.parse). Values are sub-slices of the line: nothing is copied.
type fields struct {
	typ, id, parentID, timestamp, message                        []byte
	summary, firstKeptEntryID, firstKeptEntryIndex, tokensBefore []byte
	details, fromHook, fromID, customType, content, display      []byte
	provider, modelID, thinkingLevel, targetID, label, name      []byte
	version, cwd, parentSession                                  []byte
	systemMessage, usage, replacement, kind, model               []byte
}

// pick assigns the members of a validated object to f.
func (f *fields) pick(ms []jsonscan.Member) {
	for _, m := range ms {
		key := m.Key
		if bytes.IndexByte(key, '\\') >= 0 {
			key = []byte(jsonscan.Key(key))
		}
		v := m.Val
		switch string(key) {
		case "type":
			f.typ = v
		case "id":
			f.id = v
		case "parentId":
			f.parentID = v
		case "timestamp":
			f.timestamp = v
		case "message":
			f.message = v
		case "summary":
			f.summary = v
		case "firstKeptEntryId":
			f.firstKeptEntryID = v
		case "firstKeptEntryIndex":
			f.firstKeptEntryIndex = v
		case "tokensBefore":
			f.tokensBefore = v
		case "details":
			f.details = v
		case "fromHook":
			f.fromHook = v
		case "fromId":
			f.fromID = v
		case "customType":
			f.customType = v
		case "content":
			f.content = v
		case "display":
			f.display = v
		case "provider":
			f.provider = v
		case "modelId":
			f.modelID = v
		case "thinkingLevel":
			f.thinkingLevel = v
		case "targetId":
			f.targetID = v
		case "label":
			f.label = v
		case "name":
			f.name = v
		case "version":
			f.version = v
		case "cwd":
			f.cwd = v
		case "parentSession":
			f.parentSession = v
		case "systemMessage":
			f.systemMessage = v
		case "usage":
			f.usage = v
		case "replacement":
			f.replacement = v
		case "kind":
			f.kind = v
		case "model":
			f.model = v
		}
	}
}

// decoder turns validated entry lines into entries. Entries and messages come from slabs (one
// allocation for many), so that reading a file allocates a few large blocks instead of two
// small objects per line.
type decoder struct {
	file  string
	light bool
	// diag receives the problems found in a line (bad fields), in line order.
	diag func(Diagnostic)

	entries  []Entry
	messages []Message
}

func (d *decoder) newEntry() *Entry {
	if len(d.entries) == cap(d.entries) {
		d.entries = make([]Entry, 0, max(64, cap(d.entries)))
	}
	d.entries = d.entries[:len(d.entries)+1]
	return &d.entries[len(d.entries)-1]
}

func (d *decoder) newMessage() *Message {
	if len(d.messages) == cap(d.messages) {
		d.messages = make([]Message, 0, max(64, cap(d.messages)))
	}
	d.messages = d.messages[:len(d.messages)+1]
	return &d.messages[len(d.messages)-1]
}

// reserve sizes the slabs for about n more lines.
func (d *decoder) reserve(n int) {
	if cap(d.entries)-len(d.entries) < n {
		d.entries = make([]Entry, 0, n)
		d.messages = make([]Message, 0, n)
	}
}

// entry decodes the entry whose members are in f (line is the whole line, lineNo its 1-based
// number or 0 when unknown); msg are the members of msgVal, the message jsonscan.ScanEntry found. A field of an unexpected type is reported and treated as absent,
// as Pi's code would see it (undefined behaviour aside).
func (d *decoder) entry(f *fields, line []byte, lineNo int, msg []jsonscan.Member, msgVal []byte) *Entry {
	e := d.newEntry()
	typ, _ := jsonscan.String(f.typ)
	*e = Entry{Type: typ, Line: lineNo, Raw: line}
	str := func(raw []byte, field string) string {
		v, ok := jsonscan.String(raw)
		if !ok && len(raw) > 0 && string(raw) != "null" && d.diag != nil {
			d.diag(badField(lineNo, e.ID, field))
		}
		return v
	}
	e.ID = str(f.id, "id")
	e.ParentID = str(f.parentID, "parentId")
	e.Timestamp = str(f.timestamp, "timestamp")
	switch typ {
	case TypeMessage:
		if len(f.message) == 0 || f.message[0] != '{' {
			if d.diag != nil { // absent counts too: Pi would fail on entry.message.role
				d.diag(badField(lineNo, e.ID, "message"))
			}
			break
		}
		m := d.newMessage()
		if !sameBytes(f.message, msgVal) { // an escaped "message" key: not the one scanned
			msg = nil
		}
		err := decodeMessageInto(m, f.message, msg, d.light)
		e.Message = m
		if err != nil && d.diag != nil {
			d.diag(Diagnostic{Line: lineNo, EntryID: e.ID, Kind: DiagBadField, Message: "message has fields of unexpected types (kept as far as possible): " + err.Error()})
		}
	case TypeCompaction, TypeBranchSummary:
		e.Summary = str(f.summary, "summary")
		e.FirstKeptEntryID = str(f.firstKeptEntryID, "firstKeptEntryId")
		e.TokensBefore, _ = jsonscan.Number(f.tokensBefore)
		e.Details = nonNull(f.details)
		e.FromHook = jsonTruthy(f.fromHook)
		e.FromID = str(f.fromID, "fromId")
		e.Usage = nonNull(f.usage)
		if typ == TypeCompaction && len(f.systemMessage) > 0 && string(f.systemMessage) != "null" {
			if f.systemMessage[0] != '{' {
				if d.diag != nil {
					d.diag(badField(lineNo, e.ID, "systemMessage"))
				}
				break
			}
			m := d.newMessage()
			if err := decodeMessageInto(m, f.systemMessage, nil, false); err != nil && d.diag != nil {
				d.diag(Diagnostic{Line: lineNo, EntryID: e.ID, Kind: DiagBadField, Message: "systemMessage has fields of unexpected types (kept as far as possible): " + err.Error()})
			}
			e.SystemMessage = m
		}
	case TypeContextEdit:
		e.TargetID = str(f.targetID, "targetId")
		e.Replacement = f.replacement
	case TypeUsage:
		e.Kind = str(f.kind, "kind")
		e.Provider = str(f.provider, "provider")
		e.Model = str(f.model, "model")
		e.Usage = nonNull(f.usage)
	case TypeCustom:
		e.CustomType = str(f.customType, "customType")
	case TypeCustomMessage:
		e.CustomType = str(f.customType, "customType")
		e.Content = f.content
		e.Display = f.display
		e.Details = f.details
	case TypeModelChange:
		e.Provider = str(f.provider, "provider")
		e.ModelID = str(f.modelID, "modelId")
	case TypeThinkingLevelChange:
		e.ThinkingLevel = str(f.thinkingLevel, "thinkingLevel")
	case TypeLabel:
		e.TargetID = str(f.targetID, "targetId")
		e.Label = str(f.label, "label")
	case TypeSessionInfo:
		e.Name = str(f.name, "name")
	}
	return e
}

// badField is the diagnostic of an entry's field whose value is of another type than Pi
// writes.
func badField(n int, id, field string) Diagnostic {
	return Diagnostic{Line: n, EntryID: id, Kind: DiagBadField, Message: fmt.Sprintf("field %q has an unexpected type; treated as absent", field)}
}

// sameBytes reports whether a and b are the same bytes in memory (not just equal).
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && len(a) > 0 && &a[0] == &b[0]
}

// header decodes a session header line (f.typ is "session"); ok is false without a string id.
func header(f *fields, line []byte) (Header, bool) {
	id, ok := jsonscan.String(f.id)
	if !ok {
		return Header{}, false
	}
	h := Header{Type: TypeSession, ID: id, Raw: line, Version: 1}
	h.Timestamp, _ = jsonscan.String(f.timestamp)
	h.Cwd, _ = jsonscan.String(f.cwd)
	h.ParentSession, _ = jsonscan.String(f.parentSession)
	if v, ok := jsonscan.Number(f.version); ok {
		h.Version = int(v)
	}
	return h, true
}

// decodeUsage decodes a usage object as encoding/json would into Usage, except that keys
// are matched exactly (as JSON.parse does): null leaves a field 0; a value of another type
// makes the whole usage absent (ok false).
func decodeUsage(v []byte) (*Usage, bool) {
	if len(v) == 0 || v[0] != '{' {
		return nil, false
	}
	var u Usage
	var buf [8]jsonscan.Member
	for _, m := range jsonscan.TrustedMembers(v, buf[:0]) {
		var dst *float64
		switch jsonscan.Key(m.Key) {
		case "input":
			dst = &u.Input
		case "output":
			dst = &u.Output
		case "cacheRead":
			dst = &u.CacheRead
		case "cacheWrite":
			dst = &u.CacheWrite
		case "totalTokens":
			dst = &u.TotalTokens
		default:
			continue
		}
		if string(m.Val) == "null" {
			continue
		}
		x, ok := jsonscan.Number(m.Val)
		if !ok {
			return nil, false
		}
		*dst = x
	}
	return &u, true
}

// jsonTruthy is JavaScript truthiness for a JSON value.
func jsonTruthy(raw []byte) bool {
	switch string(raw) {
	case "", "null", "false", `""`, "0", "-0":
		return false
	default:
		if v, ok := jsonscan.Number(raw); ok {
			return v != 0
		}
		return true
	}
}

func nonNull(raw []byte) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}
