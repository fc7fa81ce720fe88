package sessionio

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/compactor-dev/compactor/sessionio/jsonscan"
	"slices"
	"strconv"

	"github.com/compactor-dev/compactor/pi"
)

// Message roles as Pi writes them (AgentMessage union). Roles compactor does not know
// are kept as they are and count as zero tokens, as in Pi.
const (
	RoleUser              = "user"
	RoleAssistant         = "assistant"
	RoleToolResult        = "toolResult"
	RoleBashExecution     = "bashExecution"
	RoleCustom            = "custom"
	RoleBranchSummary     = "branchSummary"
	RoleCompactionSummary = "compactionSummary"
	// RoleSystem is Pi 1.x's system message: the system prompt and the tools, written in full
	// at the first request and as patches when they change (Content, Sections, ToolsAdded,
	// ToolsRemoved). Pi 0.73 has no such role.
	RoleSystem = "system"
)

// Roles lists the message roles Pi r declares, sorted: every release's, system from 0.86
// (SystemMessages).
func Roles(r pi.Release) []string {
	rs := []string{RoleUser, RoleAssistant, RoleToolResult, RoleBashExecution, RoleCustom, RoleBranchSummary, RoleCompactionSummary}
	if r.Has(pi.SystemMessages) {
		rs = append(rs, RoleSystem)
	}
	slices.Sort(rs)
	return rs
}

// Content block types.
const (
	BlockText     = "text"
	BlockThinking = "thinking"
	BlockToolCall = "toolCall"
	BlockImage    = "image"
)

// Message is one AgentMessage: either decoded from a "message" entry (Raw holds its exact
// bytes), or synthesized while building a context from a custom_message, branch_summary
// or compaction entry (Raw holds the object Pi would build, in Pi's key order).
//
// Strings are Go strings decoded by encoding/json: a lone surrogate escape becomes U+FFFD,
// which has the same UTF-16 length, so chars/4 estimates are unaffected.
type Message struct {
	Role string
	Raw  json.RawMessage
	// At is where a message entry's message lies in the file, for a tail read that left it
	// there (TailOptions.LeaveMessagesOnDisk; Raw is nil then). Zero otherwise.
	At Span

	Content Content

	// assistant
	API        string
	Provider   string
	Model      string
	StopReason string
	// ErrorMessage is an errored assistant message's error (Pi retries some by itself).
	ErrorMessage string
	Usage        *Usage

	// Timestamp is the message's own epoch-ms timestamp (0 if absent); HasTimestamp tells
	// whether it is there (a number).
	Timestamp    float64
	HasTimestamp bool

	// toolResult
	ToolCallID string
	ToolName   string
	IsError    bool

	// bashExecution
	Command            string
	Output             string
	ExitCode           *float64
	Cancelled          bool
	Truncated          bool
	FullOutputPath     string
	ExcludeFromContext bool

	// custom
	CustomType string

	// branchSummary / compactionSummary
	Summary      string
	FromID       string
	TokensBefore float64

	// system (Pi 1.x): Sections in the object's order (a nil Value is null: the section is
	// removed); ToolsAdded and ToolsRemoved are the raw arrays (copies, nil when absent).
	Sections     []Section
	ToolsAdded   json.RawMessage
	ToolsRemoved json.RawMessage

	// NestedCalls is a Pi 1.x tool result's raw "nestedCalls" (calls made from a codemode
	// script; a copy, nil when absent).
	NestedCalls json.RawMessage

	// ContentNull reports that the message's content is null or absent (Pi 1.x puts an empty
	// content in its place when it builds a context).
	ContentNull bool
	// Projected is set on a message Pi 1.x's projection made (a context edit's replacement,
	// or a null content filled in): Raw is the projected object, and when the message was left
	// on disk (At), ContentRaw is what replaces the content member of the bytes there.
	Projected  bool
	ContentRaw json.RawMessage
}

// Section is one named part of a system message's prompt.
type Section struct {
	Name  string
	Value *string
}

// Span is a byte range of a file.
type Span struct{ Off, Len int64 }

// Content is a message's content: a plain string or an array of blocks.
type Content struct {
	IsString bool
	Text     string // when IsString
	Blocks   []Block
}

// Block is one content block. Image data is not kept in memory (only its length),
// because nothing compactor computes needs the pixels.
type Block struct {
	Type      string
	Text      string
	Thinking  string
	ID        string
	Name      string
	Arguments json.RawMessage // toolCall arguments, exact bytes from the file
	MimeType  string
	DataLen   int
}

// Usage is an assistant message's token usage.
type Usage struct {
	Input       float64 `json:"input"`
	Output      float64 `json:"output"`
	CacheRead   float64 `json:"cacheRead"`
	CacheWrite  float64 `json:"cacheWrite"`
	TotalTokens float64 `json:"totalTokens"`
}

// ToolCalls returns the toolCall blocks of an assistant message.
func (m *Message) ToolCalls() []Block {
	var out []Block
	for _, b := range m.Content.Blocks {
		if b.Type == BlockToolCall {
			out = append(out, b)
		}
	}
	return out
}

// HasValidUsage reports whether Pi's getAssistantUsage would use this message's usage:
// an assistant message that is neither aborted nor an error, with a usage object.
func (m *Message) HasValidUsage() bool {
	return m.Role == RoleAssistant && m.Usage != nil && m.StopReason != "aborted" && m.StopReason != "error"
}

// ContextTokens is Pi's calculateContextTokens: totalTokens, or the sum of the parts when
// totalTokens is zero.
func (u *Usage) ContextTokens() float64 {
	if u.TotalTokens != 0 {
		return u.TotalTokens
	}
	return u.Input + u.Output + u.CacheRead + u.CacheWrite
}

// UnmarshalJSON accepts a string or an array of blocks; any other shape is no content, as
// Pi's code treats it.
func (c *Content) UnmarshalJSON(b []byte) error {
	var err error
	*c, err = decodeContent(b)
	return err
}

// DecodeMessage decodes one AgentMessage object. raw is kept (not copied) as Message.Raw.
func DecodeMessage(raw json.RawMessage) (*Message, error) {
	if _, notObject, err := jsonscan.ScanObject(raw, nil); err != nil || notObject {
		return nil, errors.New("message is not a JSON object")
	}
	return decodeMessage(raw, false)
}

// fieldErr remembers the first field of an unexpected type; decoding goes on without it,
// as encoding/json does with a type error.
type fieldErr struct{ err error }

func (f *fieldErr) set(key string, want string) {
	if f.err == nil {
		f.err = fmt.Errorf("field %q is not %s", key, want)
	}
}

func (f *fieldErr) str(key string, v []byte, dst *string) {
	switch {
	case len(v) > 0 && v[0] == '"':
		*dst = jsonscan.Unquote(v)
	case string(v) != "null":
		f.set(key, "a string")
	}
}

func (f *fieldErr) num(key string, v []byte, dst *float64) {
	if len(v) > 0 && (v[0] == '-' || v[0] >= '0' && v[0] <= '9') {
		x, err := strconv.ParseFloat(string(v), 64)
		if err == nil {
			*dst = x
			return
		}
	}
	if string(v) != "null" {
		f.set(key, "a number")
	}
}

func (f *fieldErr) boolean(key string, v []byte, dst *bool) {
	switch string(v) {
	case "true":
		*dst = true
	case "false":
		*dst = false
	case "null":
	default:
		f.set(key, "a boolean")
	}
}

// decodeMessage decodes a message whose bytes are already validated (part of a line the
// scanner accepted). Members are applied in order, so the last of duplicate keys wins, as
// in JSON.parse. On a field of an unexpected type it returns the message without that
// field together with the error. light skips the content.
func decodeMessage(raw json.RawMessage, light bool) (*Message, error) {
	m := &Message{}
	err := decodeMessageInto(m, raw, nil, light)
	return m, err
}

// decodeMessageInto is decodeMessage into a given (zero) message; ms are raw's members when
// the caller has them already (nil: found here).
func decodeMessageInto(m *Message, raw json.RawMessage, ms []jsonscan.Member, light bool) error {
	if ms == nil {
		var buf [24]jsonscan.Member
		ms = jsonscan.TrustedMembers(raw, buf[:0])
	}
	m.Raw = raw
	m.ContentNull = true
	var fe fieldErr
	for _, mb := range ms {
		v := mb.Val
		switch key := jsonscan.Key(mb.Key); key {
		case "role":
			fe.str(key, v, &m.Role)
		case "content":
			m.ContentNull = string(v) == "null"
			if light {
				continue
			}
			c, err := decodeContent(v)
			m.Content = c
			if err != nil && fe.err == nil {
				fe.err = err
			}
		case "api":
			fe.str(key, v, &m.API)
		case "provider":
			fe.str(key, v, &m.Provider)
		case "model":
			fe.str(key, v, &m.Model)
		case "stopReason":
			fe.str(key, v, &m.StopReason)
		case "errorMessage":
			fe.str(key, v, &m.ErrorMessage)
		case "usage":
			m.Usage = nil
			if string(v) == "null" {
				continue
			}
			u, ok := decodeUsage(v)
			if !ok {
				fe.set(key, "a usage object")
				continue
			}
			m.Usage = u
		case "timestamp":
			m.Timestamp, m.HasTimestamp = 0, false
			fe.num(key, v, &m.Timestamp)
			_, m.HasTimestamp = jsonscan.Number(v)
		case "toolCallId":
			fe.str(key, v, &m.ToolCallID)
		case "toolName":
			fe.str(key, v, &m.ToolName)
		case "isError":
			fe.boolean(key, v, &m.IsError)
		case "command":
			fe.str(key, v, &m.Command)
		case "output":
			fe.str(key, v, &m.Output)
		case "exitCode":
			m.ExitCode = nil
			var x float64
			if string(v) != "null" {
				if fe.num(key, v, &x); len(v) > 0 && (v[0] == '-' || v[0] >= '0' && v[0] <= '9') {
					m.ExitCode = &x
				}
			}
		case "cancelled":
			fe.boolean(key, v, &m.Cancelled)
		case "truncated":
			fe.boolean(key, v, &m.Truncated)
		case "fullOutputPath":
			fe.str(key, v, &m.FullOutputPath)
		case "excludeFromContext":
			fe.boolean(key, v, &m.ExcludeFromContext)
		case "customType":
			fe.str(key, v, &m.CustomType)
		case "summary":
			fe.str(key, v, &m.Summary)
		case "fromId":
			fe.str(key, v, &m.FromID)
		case "tokensBefore":
			fe.num(key, v, &m.TokensBefore)
		case "sections":
			if light {
				continue
			}
			m.Sections = decodeSections(v, &fe)
		case "toolsAdded":
			if !light {
				m.ToolsAdded = copyRaw(v)
			}
		case "toolsRemoved":
			if !light {
				m.ToolsRemoved = copyRaw(v)
			}
		case "nestedCalls":
			if !light {
				m.NestedCalls = copyRaw(v)
			}
		}
	}
	if fe.err != nil {
		return fmt.Errorf("message: %w", fe.err)
	}
	return nil
}

// decodeSections decodes a system message's sections object: its members in order, the last
// of duplicate keys in the place of the first (as JSON.parse builds the object); values that
// are neither strings nor null are reported and left out.
func decodeSections(v []byte, fe *fieldErr) []Section {
	if len(v) == 0 || v[0] != '{' {
		if string(v) != "null" {
			fe.set("sections", "an object")
		}
		return nil
	}
	var out []Section
	at := map[string]int{}
	var buf [8]jsonscan.Member
	for _, mb := range jsonscan.TrustedMembers(v, buf[:0]) {
		name := jsonscan.Key(mb.Key)
		var val *string
		switch {
		case string(mb.Val) == "null":
		case len(mb.Val) > 0 && mb.Val[0] == '"':
			s := jsonscan.Unquote(mb.Val)
			val = &s
		default:
			fe.set("sections", "an object of strings")
			continue
		}
		if i, ok := at[name]; ok {
			out[i].Value = val
			continue
		}
		at[name] = len(out)
		out = append(out, Section{Name: name, Value: val})
	}
	// A JavaScript object lists array-index keys first, in ascending order.
	slices.SortStableFunc(out, func(a, b Section) int {
		ai, aok := arrayIndex(a.Name)
		bi, bok := arrayIndex(b.Name)
		switch {
		case aok && bok:
			return cmp.Compare(ai, bi)
		case aok:
			return -1
		case bok:
			return 1
		}
		return 0
	})
	return out
}

// arrayIndex reports whether a property name is an array index ("0" to "4294967294", no
// leading zeros), as JavaScript orders such keys first.
func arrayIndex(s string) (uint64, bool) {
	if s == "" || len(s) > 10 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > 4294967294 {
		return 0, false
	}
	return n, true
}

// copyRaw copies a raw value out of the line it points into; nil for absent or null.
func copyRaw(v []byte) json.RawMessage {
	if len(v) == 0 || string(v) == "null" {
		return nil
	}
	return append(json.RawMessage(nil), v...)
}

// decodeContent decodes validated content: a string, or an array of blocks.
func decodeContent(v []byte) (Content, error) {
	var c Content
	if len(v) == 0 {
		return c, nil
	}
	switch v[0] {
	case '"':
		c.IsString = true
		c.Text = jsonscan.Unquote(v)
		return c, nil
	case '[':
	default:
		return c, nil
	}
	var ebuf [8][]byte
	elems := jsonscan.TrustedElems(v, ebuf[:0])
	c.Blocks = make([]Block, len(elems))
	var fe fieldErr
	var mbuf [12]jsonscan.Member
	for i, el := range elems {
		if len(el) == 0 || el[0] != '{' {
			fe.set("content", "an array of objects")
			continue
		}
		b := &c.Blocks[i]
		for _, mb := range jsonscan.TrustedMembers(el, mbuf[:0]) {
			v := mb.Val
			switch key := jsonscan.Key(mb.Key); key {
			case "type":
				fe.str(key, v, &b.Type)
			case "text":
				fe.str(key, v, &b.Text)
			case "thinking":
				fe.str(key, v, &b.Thinking)
			case "id":
				fe.str(key, v, &b.ID)
			case "name":
				fe.str(key, v, &b.Name)
			case "arguments":
				b.Arguments = json.RawMessage(v)
			case "mimeType":
				fe.str(key, v, &b.MimeType)
			case "data":
				if len(v) >= 2 && v[0] == '"' {
					b.DataLen = len(v) - 2
				}
			}
		}
	}
	if fe.err != nil {
		return c, fmt.Errorf("content: %w", fe.err)
	}
	return c, nil
}
