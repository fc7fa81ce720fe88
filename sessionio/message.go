package sessionio

import (
	"encoding/json"
	"errors"
	"fmt"
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
)

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

	Content Content

	// assistant
	API        string
	Provider   string
	Model      string
	StopReason string
	Usage      *Usage

	// Timestamp is the message's own epoch-ms timestamp (0 if absent).
	Timestamp float64

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
}

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

type rawBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	MimeType  string          `json:"mimeType"`
	Data      dataLen         `json:"data"`
}

// dataLen records the length of an image's base64 data without copying it.
type dataLen int

func (d *dataLen) UnmarshalJSON(b []byte) error {
	if len(b) >= 2 && b[0] == '"' {
		*d = dataLen(len(b) - 2)
	}
	return nil
}

// UnmarshalJSON accepts a string or an array of blocks; any other shape is no content, as
// Pi's code treats it.
func (c *Content) UnmarshalJSON(b []byte) error {
	*c = Content{}
	if len(b) == 0 {
		return nil
	}
	switch b[0] {
	case '"':
		c.IsString = true
		return json.Unmarshal(b, &c.Text)
	case '[':
	default:
		return nil
	}
	var raws []rawBlock
	err := json.Unmarshal(b, &raws)
	c.Blocks = make([]Block, len(raws))
	for i, rb := range raws {
		c.Blocks[i] = Block{Type: rb.Type, Text: rb.Text, Thinking: rb.Thinking, ID: rb.ID, Name: rb.Name,
			Arguments: rb.Arguments, MimeType: rb.MimeType, DataLen: int(rb.Data)}
	}
	if err != nil {
		return fmt.Errorf("content: %w", err)
	}
	return nil
}

type rawMessage struct {
	Role               string   `json:"role"`
	Content            Content  `json:"content"`
	API                string   `json:"api"`
	Provider           string   `json:"provider"`
	Model              string   `json:"model"`
	StopReason         string   `json:"stopReason"`
	Usage              *Usage   `json:"usage"`
	Timestamp          float64  `json:"timestamp"`
	ToolCallID         string   `json:"toolCallId"`
	ToolName           string   `json:"toolName"`
	IsError            bool     `json:"isError"`
	Command            string   `json:"command"`
	Output             string   `json:"output"`
	ExitCode           *float64 `json:"exitCode"`
	Cancelled          bool     `json:"cancelled"`
	Truncated          bool     `json:"truncated"`
	FullOutputPath     string   `json:"fullOutputPath"`
	ExcludeFromContext bool     `json:"excludeFromContext"`
	CustomType         string   `json:"customType"`
	Summary            string   `json:"summary"`
	FromID             string   `json:"fromId"`
	TokensBefore       float64  `json:"tokensBefore"`
}

// DecodeMessage decodes one AgentMessage object. raw is kept (not copied) as Message.Raw.
func DecodeMessage(raw json.RawMessage) (*Message, error) {
	m, err := decodeMessage(raw)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// decodeMessage decodes what it can: on a field of an unexpected type it still returns the
// message (with that field empty) together with the error.
func decodeMessage(raw json.RawMessage) (*Message, error) {
	var rm rawMessage
	err := json.Unmarshal(raw, &rm)
	var te *json.UnmarshalTypeError
	if err != nil && !errors.As(err, &te) {
		return nil, err
	}
	return &Message{
		Role: rm.Role, Raw: raw, Content: rm.Content,
		API: rm.API, Provider: rm.Provider, Model: rm.Model, StopReason: rm.StopReason, Usage: rm.Usage,
		Timestamp:  rm.Timestamp,
		ToolCallID: rm.ToolCallID, ToolName: rm.ToolName, IsError: rm.IsError,
		Command: rm.Command, Output: rm.Output, ExitCode: rm.ExitCode, Cancelled: rm.Cancelled,
		Truncated: rm.Truncated, FullOutputPath: rm.FullOutputPath, ExcludeFromContext: rm.ExcludeFromContext,
		CustomType: rm.CustomType, Summary: rm.Summary, FromID: rm.FromID, TokensBefore: rm.TokensBefore,
	}, err
}

// decodeMessageLight decodes everything but the content (Options.Light): one pass over
// the message to find its members, then only the small ones are decoded.
func decodeMessageLight(raw json.RawMessage) (*Message, error) {
	ms, notObject, err := scanObject(raw, make([]member, 0, 12))
	if err != nil || notObject {
		return nil, errors.New("message is not a JSON object")
	}
	m := &Message{Raw: raw}
	var firstErr error
	str := func(key string, dst *string) {
		if v := get(ms, key); v != nil {
			if s, ok := jsonStringFast(v); ok {
				*dst = s
			} else if string(v) != "null" && firstErr == nil {
				firstErr = fmt.Errorf("message %s: not a string", key)
			}
		}
	}
	str("role", &m.Role)
	str("api", &m.API)
	str("provider", &m.Provider)
	str("model", &m.Model)
	str("stopReason", &m.StopReason)
	if v := get(ms, "usage"); v != nil && string(v) != "null" {
		var u Usage
		if err := json.Unmarshal(v, &u); err == nil {
			m.Usage = &u
		} else if firstErr == nil {
			firstErr = fmt.Errorf("message usage: %w", err)
		}
	}
	if v := get(ms, "timestamp"); v != nil {
		_ = json.Unmarshal(v, &m.Timestamp)
	}
	return m, firstErr
}

// jsonStringFast decodes a JSON string literal, without encoding/json for plain ASCII.
func jsonStringFast(raw []byte) (string, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	if plainASCII(raw) {
		return string(raw[1 : len(raw)-1]), true
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", false
	}
	return v, true
}
