package scriptllm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf16"
)

// Kind tells the two sorts of requests apart.
type Kind string

const (
	// KindAgent is an agent turn: the request offers tools (Pi always sends its tools).
	KindAgent Kind = "agent"
	// KindSummary is a summarization request: no tools. Pi's own compaction and branch
	// summaries and compactor's summary calls all look like this.
	KindSummary Kind = "summary"
)

// Request is what the server recorded about one request. Requests are recorded when
// they arrive (so a test can see that a call is in flight) and completed when answered.
type Request struct {
	Seq    int       `json:"seq"` // 1-based, in arrival order
	Time   time.Time `json:"time"`
	Kind   Kind      `json:"kind"`
	Path   string    `json:"path"`
	Stream bool      `json:"stream"`
	// IncludeUsage: the client asked for a final usage chunk (stream_options.include_usage).
	IncludeUsage bool      `json:"includeUsage"`
	Model        string    `json:"model"`
	Messages     []Message `json:"messages"`
	Tools        []string  `json:"tools,omitempty"` // the offered tools' names
	// MaxTokens is max_tokens or max_completion_tokens as sent (0 = absent).
	MaxTokens int `json:"maxTokens,omitempty"`
	// Body is the request body exactly as received.
	Body json.RawMessage `json:"body"`
	// PromptTokens is the server's count of the prompt (see CountTokens); it is the
	// prompt_tokens the answer reports.
	PromptTokens int `json:"promptTokens"`
	// CachedTokens is what the answer reports as usage.prompt_tokens_details.cached_tokens:
	// the prompt's prefix an earlier request also began with, as a provider's automatic
	// prompt cache serves it (internal/promptcache).
	CachedTokens int `json:"cachedTokens"`

	// Filled when the answer is complete.
	Completed        bool      `json:"completed"`
	AnsweredAt       time.Time `json:"answeredAt,omitzero"`
	Status           int       `json:"status,omitempty"`
	CompletionTokens int       `json:"completionTokens,omitempty"`
	Reply            *Turn     `json:"reply,omitempty"`
	Error            string    `json:"error,omitempty"`
}

// Size is the request body's size in bytes.
func (r *Request) Size() int { return len(r.Body) }

// Duration is how long the answer took (0 while in flight).
func (r *Request) Duration() time.Duration {
	if !r.Completed {
		return 0
	}
	return r.AnsweredAt.Sub(r.Time)
}

// Message is one chat message of a request, parsed from the OpenAI wire format.
type Message struct {
	Role string `json:"role"`
	// Content is the text of the message: the string content, or the text parts joined.
	Content string `json:"content"`
	// Parts is the number of content parts when content was an array (0 for a string).
	Parts int `json:"parts,omitempty"`
	// Images counts image_url parts.
	Images     int        `json:"images,omitempty"`
	ToolCalls  []ToolCall `json:"toolCalls,omitempty"`
	ToolCallID string     `json:"toolCallId,omitempty"`
	Name       string     `json:"name,omitempty"`
}

// ToolCall is a tool call as the model makes it (and as the client replays it).
type ToolCall struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Arguments is the JSON text of the arguments.
	Arguments string `json:"arguments"`
}

// wireRequest is the part of a chat-completions request the server reads.
type wireRequest struct {
	Model         string        `json:"model"`
	Messages      []wireMessage `json:"messages"`
	Stream        bool          `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
	MaxTokens           int `json:"max_tokens"`
	MaxCompletionTokens int `json:"max_completion_tokens"`
}

type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []wireToolCall  `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
	Name       string          `json:"name"`
}

type wireToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// parseRequest reads a chat-completions body into a Request (without Seq/Time).
func parseRequest(body []byte) (*Request, error) {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, fmt.Errorf("not a chat completion request: %w", err)
	}
	r := &Request{Model: w.Model, Stream: w.Stream, Body: json.RawMessage(bytes.Clone(body))}
	r.IncludeUsage = w.StreamOptions != nil && w.StreamOptions.IncludeUsage
	r.MaxTokens = w.MaxTokens
	if r.MaxTokens == 0 {
		r.MaxTokens = w.MaxCompletionTokens
	}
	for _, t := range w.Tools {
		r.Tools = append(r.Tools, t.Function.Name)
	}
	r.Kind = KindSummary
	if len(r.Tools) > 0 {
		r.Kind = KindAgent
	}
	for i, wm := range w.Messages {
		m := Message{Role: wm.Role, ToolCallID: wm.ToolCallID, Name: wm.Name}
		if err := m.setContent(wm.Content); err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		for _, tc := range wm.ToolCalls {
			m.ToolCalls = append(m.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		r.Messages = append(r.Messages, m)
	}
	r.PromptTokens = CountTokens(r.Messages)
	return r, nil
}

// setContent decodes an OpenAI content field: null, a string, or an array of parts.
func (m *Message) setContent(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if raw[0] == '"' {
		return json.Unmarshal(raw, &m.Content)
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return fmt.Errorf("content is neither a string nor an array of parts: %w", err)
	}
	var sb strings.Builder
	for _, p := range parts {
		switch p.Type {
		case "text":
			sb.WriteString(p.Text)
		case "image_url":
			m.Images++
		}
	}
	m.Parts = len(parts)
	m.Content = sb.String()
	return nil
}

// utf16Len is the length of s in UTF-16 code units, as JavaScript's String.length.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += len(utf16.Encode([]rune{r}))
	}
	return n
}

// CountTokens is the server's prompt size: UTF-16 code units of every message's text,
// tool call names and argument JSON, divided by 4 and rounded up. That is the measure
// Pi's own estimate uses (chars/4), so the usage the server reports keeps Pi's context
// accounting, and with it the auto-compaction threshold, realistic. Tool definitions
// are not counted (they are a constant a real model would add).
func CountTokens(msgs []Message) int {
	n := 0
	for _, m := range msgs {
		n += utf16Len(m.Content)
		for _, tc := range m.ToolCalls {
			n += utf16Len(tc.Name) + utf16Len(tc.Arguments)
		}
	}
	return (n + 3) / 4
}

// Prompt is the text of the last user message: the prompt the agent is working on.
func (r *Request) Prompt() string {
	if i := r.lastUser(); i >= 0 {
		return r.Messages[i].Content
	}
	return ""
}

// Step is the number of assistant messages after the last user message: 0 for the first
// model call of a prompt, 1 after one round of tool calls, and so on.
func (r *Request) Step() int {
	i := r.lastUser()
	n := 0
	for _, m := range r.Messages[i+1:] {
		if m.Role == "assistant" {
			n++
		}
	}
	return n
}

func (r *Request) lastUser() int {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return i
		}
	}
	return -1
}

// Orphans checks the pairing of tool calls and tool results in msgs as the OpenAI API
// requires it: every tool message answers a call of the assistant message right before
// it (only other tool messages in between), and every call gets its answer before the
// next non-tool message. It returns the tool_call_ids of results that answer no such
// call (orphans: their call was summarized away or never made) and the ids of calls left
// without a result. A well-formed request has neither.
func Orphans(msgs []Message) (orphanResults, unanswered []string) {
	var open []string // calls of the last assistant message not answered yet, in order
	flush := func() {
		unanswered = append(unanswered, open...)
		open = nil
	}
	for _, m := range msgs {
		switch m.Role {
		case "assistant":
			flush()
			for _, tc := range m.ToolCalls {
				open = append(open, tc.ID)
			}
		case "tool":
			i := slices.Index(open, m.ToolCallID)
			if i < 0 {
				orphanResults = append(orphanResults, m.ToolCallID)
				continue
			}
			open = slices.Delete(open, i, i+1)
		default:
			flush()
		}
	}
	flush()
	return orphanResults, unanswered
}
