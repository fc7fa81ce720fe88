package picontext

import (
	"encoding/json"
	"strings"

	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/jsjson"
	"github.com/compactor-dev/compactor/sessionio/jsonscan"
)

// CurrentSystemMessage is Pi 1.x's getCurrentSystemMessage: every system message of msgs
// replayed into one that holds the current prompt and tools, nil when msgs declare neither
// (no system message with a timestamp and no tool). Pi counts it in place of the system
// messages when it estimates a context, and writes it, with the entry's time, as a
// compaction's systemMessage checkpoint.
//
// The replay: the text of every system message's content (a string, or its text blocks
// joined by newlines) that is not empty, joined by blank lines; sections patched by name in
// order (null removes one; a removed name set again goes last, as in a JavaScript Map); tools
// resolved by name (toolsRemoved first, then toolsAdded, message by message; a tool declared
// again keeps its place); the timestamp of the first system message that has one.
func CurrentSystemMessage(msgs []*sessionio.Message) *sessionio.Message {
	var texts []string
	var sections orderedMap[string]
	var tools orderedMap[json.RawMessage]
	var ts float64
	hasTS := false
	for _, m := range msgs {
		if m == nil || m.Role != sessionio.RoleSystem {
			continue
		}
		if !hasTS && m.HasTimestamp {
			ts, hasTS = m.Timestamp, true
		}
		if t := contentText(m.Content); t != "" {
			texts = append(texts, t)
		}
		for _, s := range m.Sections {
			if s.Value == nil {
				sections.delete(s.Name)
			} else {
				sections.set(s.Name, *s.Value)
			}
		}
		for _, t := range jsonscan.TrustedElems(m.ToolsRemoved, nil) {
			tools.delete(toolName(t))
		}
		for _, t := range jsonscan.TrustedElems(m.ToolsAdded, nil) {
			tools.set(toolName(t), json.RawMessage(t))
		}
	}
	if !hasTS && tools.len() == 0 {
		return nil
	}
	out := &sessionio.Message{Role: sessionio.RoleSystem, Content: sessionio.Content{IsString: true, Text: strings.Join(texts, "\n\n")},
		Timestamp: ts, HasTimestamp: true}
	fs := jsjson.Fields{{Key: "role", Value: sessionio.RoleSystem}, {Key: "content", Value: out.Content.Text}}
	if sections.len() > 0 {
		obj := make(jsjson.Fields, 0, sections.len())
		for _, k := range sections.keys() {
			v := sections.vals[k]
			out.Sections = append(out.Sections, sessionio.Section{Name: k, Value: &v})
			obj = append(obj, jsjson.Field{Key: k, Value: v})
		}
		fs = append(fs, jsjson.Field{Key: "sections", Value: obj})
	}
	if tools.len() > 0 {
		arr := make([]any, 0, tools.len())
		for _, k := range tools.keys() {
			arr = append(arr, tools.vals[k])
		}
		b, err := jsjson.Marshal(arr)
		if err == nil {
			out.ToolsAdded = b
			fs = append(fs, jsjson.Field{Key: "toolsAdded", Value: json.RawMessage(b)})
		}
	}
	fs = append(fs, jsjson.Field{Key: "timestamp", Value: ts})
	out.Raw, _ = jsjson.Marshal(fs)
	return out
}

// WithTimestamp returns a copy of a message whose timestamp is ts, in the timestamp member's
// place: `{...m, timestamp: ts}`.
func WithTimestamp(m *sessionio.Message, ts float64) *sessionio.Message {
	c := *m
	c.Timestamp, c.HasTimestamp = ts, true
	c.Raw = ReplaceMember(m.Raw, "timestamp", json.RawMessage(jsjson.AppendNumber(nil, ts)))
	return &c
}

// contentText is Pi's contentText with its default separator: a string content as it is,
// the text blocks of an array joined by newlines.
func contentText(c sessionio.Content) string {
	if c.IsString {
		return c.Text
	}
	var parts []string
	for _, b := range c.Blocks {
		if b.Type == sessionio.BlockText {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// toolName is the key a tool has in Pi's Map of tools: its name (a tool without a string name
// is keyed by the raw value, all nameless ones alike).
func toolName(tool []byte) string {
	if len(tool) == 0 || tool[0] != '{' {
		return "\x00"
	}
	var buf [4]jsonscan.Member
	v := jsonscan.Get(jsonscan.TrustedMembers(tool, buf[:0]), "name")
	if s, ok := jsonscan.String(v); ok {
		return s
	}
	return "\x00" + string(v)
}

// orderedMap is a JavaScript Map's order: keys in insertion order, a key set again keeps its
// place, a deleted key set again goes last.
type orderedMap[V any] struct {
	order []string
	vals  map[string]V
}

func (o *orderedMap[V]) set(k string, v V) {
	if o.vals == nil {
		o.vals = map[string]V{}
	}
	if _, ok := o.vals[k]; !ok {
		o.order = append(o.order, k)
	}
	o.vals[k] = v
}

func (o *orderedMap[V]) delete(k string) {
	if _, ok := o.vals[k]; !ok {
		return
	}
	delete(o.vals, k)
	for i, x := range o.order {
		if x == k {
			o.order = append(o.order[:i], o.order[i+1:]...)
			break
		}
	}
}

func (o *orderedMap[V]) len() int { return len(o.vals) }

func (o *orderedMap[V]) keys() []string { return o.order }
