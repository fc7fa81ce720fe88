package summarize

import (
	"bytes"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/jsjson"
)

// Wrapping constants Pi's convertToLlm uses when summary messages are sent to a model
// (docs/pi-format.md, "What the model receives"). They are facts of the format,
// reproduced exactly.
const (
	CompactionSummaryPrefix = "The conversation history before this point was compacted into the following summary:\n\n<summary>\n"
	CompactionSummarySuffix = "\n</summary>"
	BranchSummaryPrefix     = "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
	BranchSummarySuffix     = "</summary>"
)

// ToolResultMaxChars is the UTF-16 length past which a tool result is cut in the
// serialized conversation (Pi's TOOL_RESULT_MAX_CHARS): the summarizer needs the gist,
// not the full output.
const ToolResultMaxChars = 2000

// SerializeConversation renders messages as the plain text Pi puts inside
// <conversation> tags: Pi's convertToLlm followed by its serializeConversation, byte for
// byte, as Pi r does it (pi.ThinkingOmitted, StringToolResultSerialized,
// SurrogateSafeTruncation). Rendering the span as labelled text (rather than as chat turns)
// keeps the model from continuing the conversation instead of summarizing it.
func SerializeConversation(msgs []*sessionio.Message, r pi.Release) string {
	return strings.Join(SerializeParts(msgs, r), "\n\n")
}

// SerializeParts returns the parts SerializeConversation joins with "\n\n", in order. A
// message yields zero to three parts. The chunked summarizer splits a span at these
// boundaries.
func SerializeParts(msgs []*sessionio.Message, r pi.Release) []string {
	parts := make([]string, 0, len(msgs))
	rules := serialRules{thinking: !r.Has(pi.ThinkingOmitted), stringResults: r.Has(pi.StringToolResultSerialized),
		wholePairs: r.Has(pi.SurrogateSafeTruncation)}
	for _, m := range msgs {
		parts = appendParts(parts, m, rules)
	}
	return parts
}

// serialRules are the release's serialization rules.
type serialRules struct {
	thinking      bool // thinking is serialized (before 1.2.0)
	stringResults bool // a tool result's string content is serialized (from 0.81.1)
	wholePairs    bool // a cut tool result keeps surrogate pairs whole (from 1.5.1)
}

func appendParts(parts []string, m *sessionio.Message, rules serialRules) []string {
	if m == nil {
		return parts
	}
	switch m.Role {
	case sessionio.RoleUser, sessionio.RoleCustom:
		// custom messages become user messages (string content → one text block).
		if t := contentText(m.Content); t != "" {
			parts = append(parts, "[User]: "+t)
		}
	case sessionio.RoleBashExecution:
		if !m.ExcludeFromContext {
			parts = append(parts, "[User]: "+BashExecutionText(m))
		}
	case sessionio.RoleBranchSummary:
		parts = append(parts, "[User]: "+BranchSummaryPrefix+m.Summary+BranchSummarySuffix)
	case sessionio.RoleCompactionSummary:
		parts = append(parts, "[User]: "+CompactionSummaryPrefix+m.Summary+CompactionSummarySuffix)
	case sessionio.RoleAssistant:
		if m.Content.IsString {
			// Pi iterates a string's characters as blocks; none has a type.
			return parts
		}
		var texts, thinking, calls []string
		for _, b := range m.Content.Blocks {
			switch b.Type {
			case sessionio.BlockText:
				texts = append(texts, b.Text)
			case sessionio.BlockThinking:
				if rules.thinking { // from 1.2.0 Pi omits it: often not part of the model's live context
					thinking = append(thinking, b.Thinking)
				}
			case sessionio.BlockToolCall:
				calls = append(calls, formatToolCall(b))
			}
		}
		if len(thinking) > 0 {
			parts = append(parts, "[Assistant thinking]: "+strings.Join(thinking, "\n"))
		}
		if len(texts) > 0 {
			parts = append(parts, "[Assistant]: "+strings.Join(texts, "\n"))
		}
		if len(calls) > 0 {
			parts = append(parts, "[Assistant tool calls]: "+strings.Join(calls, "; "))
		}
	case sessionio.RoleToolResult:
		// From 0.81.1 Pi reads the content with contentText, which takes a string content as
		// it is; before, it only filtered blocks (a string content made it throw): nothing then.
		t := blocksText(m.Content.Blocks)
		if rules.stringResults {
			t = contentText(m.Content)
		}
		if t != "" {
			parts = append(parts, "[Tool result]: "+truncateUTF16(t, ToolResultMaxChars, rules.wholePairs))
		}
	}
	return parts
}

// contentText is a user message's text: the string content, or its text blocks joined
// with nothing in between (images are dropped).
func contentText(c sessionio.Content) string {
	if c.IsString {
		return c.Text
	}
	return blocksText(c.Blocks)
}

func blocksText(blocks []sessionio.Block) string {
	var sb strings.Builder
	for _, b := range blocks {
		if b.Type == sessionio.BlockText {
			sb.WriteString(b.Text)
		}
	}
	return sb.String()
}

// BashExecutionText is Pi's bashExecutionToText: how a user-typed `!cmd` reaches the model.
func BashExecutionText(m *sessionio.Message) string {
	var sb strings.Builder
	sb.WriteString("Ran `")
	sb.WriteString(m.Command)
	sb.WriteString("`\n")
	if m.Output != "" {
		sb.WriteString("```\n")
		sb.WriteString(m.Output)
		sb.WriteString("\n```")
	} else {
		sb.WriteString("(no output)")
	}
	if m.Cancelled {
		sb.WriteString("\n\n(command cancelled)")
	} else if m.ExitCode != nil && *m.ExitCode != 0 {
		sb.WriteString("\n\nCommand exited with code ")
		sb.Write(jsjson.AppendNumber(nil, *m.ExitCode))
	}
	if m.Truncated && m.FullOutputPath != "" {
		sb.WriteString("\n\n[Output truncated. Full output: ")
		sb.WriteString(m.FullOutputPath)
		sb.WriteString("]")
	}
	return sb.String()
}

// truncateUTF16 keeps the first max UTF-16 code units of s and appends Pi's marker with
// the number of units dropped (counted from max). A surrogate pair cut in half: Pi before
// 1.5.1 leaves its high half, which becomes U+FFFD in UTF-8 (as when Node writes the string
// out); from 1.5.1 (sliceHead) Pi leaves the whole pair out.
func truncateUTF16(s string, max int, wholePairs bool) string {
	n := jsjson.UTF16Len(s)
	if n <= max {
		return s
	}
	units := 0
	end := len(s)
	split := false
	for i, r := range s {
		w := 1
		if r >= 0x10000 {
			w = 2
		}
		if units+w > max {
			end = i
			split = units < max // only half of a pair fits
			break
		}
		units += w
	}
	var sb strings.Builder
	sb.Grow(end + 48)
	sb.WriteString(s[:end])
	if split && !wholePairs {
		sb.WriteRune(utf8.RuneError)
	}
	sb.WriteString("\n\n[... ")
	sb.WriteString(strconv.Itoa(n - max))
	sb.WriteString(" more characters truncated]")
	return sb.String()
}

// formatToolCall renders name(k=JSON.stringify(v), ...) over Object.entries(arguments):
// the keys in JavaScript's own-property order (array-index keys ascending first, then the
// rest in first-appearance order; a repeated key keeps its first place and its last value).
func formatToolCall(b sessionio.Block) string {
	var sb strings.Builder
	sb.WriteString(b.Name)
	sb.WriteByte('(')
	for i, kv := range objectEntries(b.Arguments) {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(kv.key)
		sb.WriteByte('=')
		sb.Write(kv.value)
	}
	sb.WriteByte(')')
	return sb.String()
}

type entry struct {
	key   string
	value []byte // JSON.stringify of the value
}

// objectEntries returns Object.entries(JSON.parse(raw)) with stringified values. Arrays
// give their indices as keys; a string gives one entry per UTF-16 unit; other values
// (numbers, booleans, null, absent, invalid JSON) give none.
func objectEntries(raw json.RawMessage) []entry {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil
	}
	switch raw[0] {
	case '{':
		return objectFields(raw)
	case '[':
		var elems []json.RawMessage
		if err := json.Unmarshal(raw, &elems); err != nil {
			return nil
		}
		out := make([]entry, 0, len(elems))
		for i, el := range elems {
			out = append(out, entry{key: strconv.Itoa(i), value: canonical(el)})
		}
		return out
	case '"':
		s, err := jsjson.Unquote(raw)
		if err != nil {
			return nil
		}
		units := utf16.Encode([]rune(s))
		out := make([]entry, 0, len(units))
		for i, u := range units {
			var v []byte
			if u >= 0xD800 && u <= 0xDFFF {
				v = append(v, `"\u`...)
				v = strconv.AppendUint(v, uint64(u), 16)
				v = append(v, '"')
			} else {
				v = jsjson.AppendString(nil, string(rune(u)))
			}
			out = append(out, entry{key: strconv.Itoa(i), value: v})
		}
		return out
	}
	return nil
}

// objectFields reads the top level of a JSON object in order.
func objectFields(raw json.RawMessage) []entry {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	var out []entry
	pos := map[string]int{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return out
		}
		key, ok := t.(string)
		if !ok {
			return out
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return out
		}
		if i, dup := pos[key]; dup {
			out[i].value = canonical(v)
			continue
		}
		pos[key] = len(out)
		out = append(out, entry{key: key, value: canonical(v)})
	}
	// JavaScript lists integer-like ("array index") keys first, in numeric order.
	sort.SliceStable(out, func(i, j int) bool {
		ai, aok := arrayIndex(out[i].key)
		bi, bok := arrayIndex(out[j].key)
		if aok && bok {
			return ai < bi
		}
		return aok && !bok
	})
	return out
}

// arrayIndex reports whether k is a canonical array index (0 .. 2^32-2) and its value.
func arrayIndex(k string) (uint64, bool) {
	if k == "" || len(k) > 10 || (len(k) > 1 && k[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < '0' || k[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(k, 10, 64)
	if err != nil || n > 1<<32-2 {
		return 0, false
	}
	return n, true
}

// canonical is JSON.stringify(JSON.parse(raw)); on invalid JSON the raw bytes are kept,
// which cannot happen for a value that came out of a parsed session line.
func canonical(raw json.RawMessage) []byte {
	out, err := jsjson.Canonical(nil, raw)
	if err != nil {
		return raw
	}
	return out
}
