package experiment

// The context a probe is looked up in: every message's text as the model reads it, whole,
// normalized the way keys are (ANSI escapes removed, whitespace collapsed), so that a fact
// kept verbatim is found however its lines were wrapped.

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"

	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
)

// contextText is the text of a context as the model reads it, normalized for key matching:
// user, custom and assistant text, thinking, tool calls (name and argument values), tool
// results, bash executions and summaries, whole (not clipped as in a summary prompt), one
// message after the other. memo (nil: none) keeps each message's normalized text: a
// session's messages are in many contexts.
func contextText(msgs []*sessionio.Message, memo map[*sessionio.Message]string) string {
	parts := make([]string, 0, len(msgs))
	for _, m := range msgs {
		if m == nil {
			continue
		}
		t, ok := memo[m]
		if !ok {
			t = messageContextText(m)
			if memo != nil {
				memo[m] = t
			}
		}
		if t != "" {
			parts = append(parts, t)
		}
	}
	return strings.Join(parts, " ")
}

// messageContextText is one message's part of contextText.
func messageContextText(m *sessionio.Message) string {
	var b strings.Builder
	switch m.Role {
	case sessionio.RoleUser, sessionio.RoleCustom, sessionio.RoleToolResult:
		b.WriteString(summarize.MessageText(m.Content))
	case sessionio.RoleBashExecution:
		if !m.ExcludeFromContext {
			b.WriteString(m.Command)
			b.WriteByte('\n')
			b.WriteString(m.Output)
		}
	case sessionio.RoleBranchSummary, sessionio.RoleCompactionSummary:
		b.WriteString(m.Summary)
	case sessionio.RoleAssistant:
		if m.Content.IsString {
			b.WriteString(m.Content.Text)
		}
		for _, bl := range m.Content.Blocks {
			switch bl.Type {
			case sessionio.BlockText:
				b.WriteString(bl.Text)
			case sessionio.BlockThinking:
				b.WriteString(bl.Thinking)
			case sessionio.BlockToolCall:
				b.WriteString(bl.Name)
				b.WriteByte(' ')
				writeJSONValues(&b, bl.Arguments)
			}
			b.WriteByte('\n')
		}
	}
	return normText(b.String())
}

// writeJSONValues writes the strings and numbers of a JSON value, decoded (a command with
// quotes reads as it was typed, not escaped).
func writeJSONValues(b *strings.Builder, raw json.RawMessage) {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		b.Write(raw)
		return
	}
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			b.WriteString(x)
			b.WriteByte('\n')
		case float64:
			b.WriteString(strings.TrimSpace(jsonNumber(x)))
			b.WriteByte('\n')
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				walk(x[k])
			}
		}
	}
	walk(v)
}

func jsonNumber(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}

// normText removes ANSI escapes and collapses every whitespace run to one space.
func normText(s string) string { return oneLine(stripANSI(s)) }

var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)

func stripANSI(s string) string {
	if !strings.Contains(s, "\x1b") {
		return s
	}
	return ansi.ReplaceAllString(s, "")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
