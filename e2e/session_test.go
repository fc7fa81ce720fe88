//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/internal/scriptllm"
	"github.com/compactor-dev/compactor/internal/waitfor"
)

// Pi's wrapper around a compaction summary in the context it sends, a fact of Pi's
// dist/core/messages.js (docs/pi-format.md, "What the model receives").
const (
	summaryPrefix = "The conversation history before this point was compacted into the following summary:\n\n<summary>\n"
	summarySuffix = "\n</summary>"
)

// Entry is one entry line of a session file.
type Entry struct {
	Line     int // 1-based line number
	Type     string
	ID       string
	ParentID *string
	Raw      json.RawMessage
}

// Parent is the parentId ("" for null).
func (e Entry) Parent() string {
	if e.ParentID == nil {
		return ""
	}
	return *e.ParentID
}

// Field decodes one top-level field.
func (e Entry) Field(name string, v any) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(e.Raw, &m); err != nil {
		return err
	}
	raw, ok := m[name]
	if !ok {
		return fmt.Errorf("entry %s has no field %q", e.ID, name)
	}
	return json.Unmarshal(raw, v)
}

// ReadEntries parses a session file's entry lines (the header is skipped).
func ReadEntries(t testing.TB, file string) []Entry {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []Entry
	for i, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var e Entry
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("%s line %d: %v", file, i+1, err)
		}
		if e.Type == "session" {
			continue
		}
		e.Line, e.Raw = i+1, json.RawMessage(bytes.Clone(line))
		out = append(out, e)
	}
	return out
}

// UnmarshalJSON reads the fields Entry names.
func (e *Entry) UnmarshalJSON(b []byte) error {
	var v struct {
		Type     string  `json:"type"`
		ID       string  `json:"id"`
		ParentID *string `json:"parentId"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	e.Type, e.ID, e.ParentID = v.Type, v.ID, v.ParentID
	return nil
}

func entriesOfType(es []Entry, typ string) []Entry {
	var out []Entry
	for _, e := range es {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// PiContext is what `interop/pi/pi context FILE --llm` prints (the parts the tests use).
type PiContext struct {
	LeafID          *string         `json:"leafId"`
	PathIDs         []string        `json:"pathIds"`
	Context         json.RawMessage `json:"context"`
	LLMMessages     []LLMMessage    `json:"llmMessages"`
	MessageEntryIDs []*string       `json:"messageEntryIds"`
}

// LLMMessage is one message of Pi's convertToLlm output.
type LLMMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	StopReason string          `json:"stopReason"`
	ToolCallID string          `json:"toolCallId"`
}

type contentBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// OracleContext loads file with the real Pi library (leaf "" = the file's leaf).
func OracleContext(t testing.TB, file, leaf string) PiContext {
	t.Helper()
	args := []string{"context", file, "--llm"}
	if leaf != "" {
		args = append(args, "--leaf", leaf)
	}
	out := runOK(t, piOracle, args...)
	var c PiContext
	if err := json.Unmarshal(out, &c); err != nil {
		t.Fatalf("interop/pi/pi context: %v\n%s", err, tail(string(out), 2000))
	}
	return c
}

// runOK runs a command to completion and returns its stdout; a non-zero exit fails the test.
func runOK(t testing.TB, name string, args ...string) []byte {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, tail(stderr.String(), 4000))
	}
	return out
}

// WireMessages is what Pi's openai-completions provider sends for Pi's LLM messages,
// for the models.json of these tests (no developer role, no thinking, text only): user
// text parts joined, assistant text (blank blocks dropped) and tool calls with JSON
// arguments, tool results as "tool" messages with their text blocks joined by "\n";
// errored and aborted assistant messages are skipped, as are empty ones.
func WireMessages(t testing.TB, msgs []LLMMessage) []scriptllm.Message {
	t.Helper()
	var out []scriptllm.Message
	for i, m := range msgs {
		var blocks []contentBlock
		var str string
		if err := json.Unmarshal(m.Content, &blocks); err != nil {
			if err := json.Unmarshal(m.Content, &str); err != nil {
				t.Fatalf("llm message %d: content %s", i, m.Content)
			}
		}
		switch m.Role {
		case "user":
			w := scriptllm.Message{Role: "user", Content: str}
			if blocks != nil {
				w.Parts = len(blocks)
				w.Content = joinText(blocks, "")
			}
			out = append(out, w)
		case "assistant":
			if m.StopReason == "error" || m.StopReason == "aborted" {
				continue
			}
			w := scriptllm.Message{Role: "assistant"}
			for _, b := range blocks {
				switch b.Type {
				case "text":
					if strings.TrimSpace(b.Text) != "" {
						w.Content += b.Text
					}
				case "toolCall":
					w.ToolCalls = append(w.ToolCalls, scriptllm.ToolCall{ID: b.ID, Name: b.Name, Arguments: string(b.Arguments)})
				}
			}
			if w.Content == "" && len(w.ToolCalls) == 0 {
				continue
			}
			out = append(out, w)
		case "toolResult":
			out = append(out, scriptllm.Message{Role: "tool", ToolCallID: m.ToolCallID, Content: joinText(blocks, "\n")})
		case "system":
			// Pi 1.x: its prompt (a compaction's checkpoint, or a system message of the
			// session); the one that leads the context is the request's system prompt.
			w := scriptllm.Message{Role: "system", Content: str}
			if blocks != nil {
				w.Content = joinText(blocks, "")
			}
			out = append(out, w)
		default:
			t.Fatalf("llm message %d has role %q", i, m.Role)
		}
	}
	return out
}

func joinText(blocks []contentBlock, sep string) string {
	var parts []string
	for _, b := range blocks {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, sep)
}

// DiffMessages compares the messages of a request with the expected ones (tool call
// arguments as JSON values) and describes the first difference ("" when equal).
func DiffMessages(got, want []scriptllm.Message) string {
	for i := 0; i < max(len(got), len(want)); i++ {
		if i >= len(got) {
			return fmt.Sprintf("request ends after %d messages; expected message %d: %s", len(got), i, brief(want[i]))
		}
		if i >= len(want) {
			return fmt.Sprintf("request has %d messages, expected %d; first extra %d: %s", len(got), len(want), i, brief(got[i]))
		}
		g, w := got[i], want[i]
		same := g.Role == w.Role && g.Content == w.Content && g.ToolCallID == w.ToolCallID && len(g.ToolCalls) == len(w.ToolCalls)
		for j := 0; same && j < len(g.ToolCalls); j++ {
			a, b := g.ToolCalls[j], w.ToolCalls[j]
			same = a.ID == b.ID && a.Name == b.Name && jsonEqual(a.Arguments, b.Arguments)
		}
		if !same {
			return fmt.Sprintf("message %d differs:\n  request:  %s\n  expected: %s", i, brief(g), brief(w))
		}
	}
	return ""
}

func brief(m scriptllm.Message) string {
	s := fmt.Sprintf("%s %q", m.Role, tail(m.Content, 160))
	if m.ToolCallID != "" {
		s += " result-of=" + m.ToolCallID
	}
	for _, c := range m.ToolCalls {
		s += " call=" + c.ID + ":" + c.Name
	}
	return s
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return a == b
	}
	return reflect.DeepEqual(x, y)
}

// CheckRequestIsContext asserts that an agent request is exactly Pi's system prompt
// followed by the context Pi builds from file at leaf (interop/pi/pi context): nothing lost,
// nothing added. It also checks the tool pairing (no orphan result, no call without its
// result, and no placeholder result that Pi fabricates for a lost one).
func CheckRequestIsContext(t testing.TB, req scriptllm.Request, file, leaf string) PiContext {
	t.Helper()
	c := OracleContext(t, file, leaf)
	if len(req.Messages) == 0 || req.Messages[0].Role != "system" {
		t.Fatalf("request #%d does not start with the system prompt", req.Seq)
	}
	wire := WireMessages(t, c.LLMMessages)
	if len(wire) > 0 && wire[0].Role == "system" {
		wire = wire[1:] // Pi 1.x: the context's leading system message is the request's system prompt
	}
	if d := DiffMessages(req.Messages[1:], wire); d != "" {
		t.Errorf("request #%d is not Pi's context of %s at leaf %s: %s", req.Seq, file, leaf, d)
	}
	CheckPairing(t, req)
	return c
}

// CheckPairing asserts the tool pairing of a request.
func CheckPairing(t testing.TB, req scriptllm.Request) {
	t.Helper()
	orphans, unanswered := scriptllm.Orphans(req.Messages)
	if len(orphans) > 0 || len(unanswered) > 0 {
		t.Errorf("request #%d: orphan tool results %v, calls without results %v", req.Seq, orphans, unanswered)
	}
	for i, m := range req.Messages {
		if m.Role == "tool" && m.Content == "No result provided" {
			t.Errorf("request #%d message %d: Pi filled in a missing tool result for %s", req.Seq, i, m.ToolCallID)
		}
	}
}

// CheckContextsEqual asserts `compactor context FILE --json` equals `interop/pi/pi context
// FILE` for the fields compactor promises: leafId, pathIds, context.messages,
// context.thinkingLevel, context.model (compared as JSON values, numbers exactly).
func CheckContextsEqual(t testing.TB, file string) {
	t.Helper()
	decode := func(b []byte, what string) map[string]any {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var v map[string]any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, tail(string(b), 1000))
		}
		return v
	}
	ours := decode(runOK(t, compactorBin(), "context", file, "--json"), "compactor context")
	pis := decode(runOK(t, piOracle, "context", file), "interop/pi/pi context")
	pick := func(v map[string]any) map[string]any {
		c, _ := v["context"].(map[string]any)
		return map[string]any{"leafId": v["leafId"], "pathIds": v["pathIds"],
			"messages": c["messages"], "thinkingLevel": c["thinkingLevel"], "model": c["model"]}
	}
	a, b := pick(ours), pick(pis)
	for _, k := range []string{"leafId", "pathIds", "messages", "thinkingLevel", "model"} {
		if !reflect.DeepEqual(a[k], b[k]) {
			ja, _ := json.Marshal(a[k])
			jb, _ := json.Marshal(b[k])
			t.Errorf("compactor context differs from Pi's in %s:\n  compactor: %s\n  pi:        %s", k, tail(string(ja), 600), tail(string(jb), 600))
		}
	}
	if b["pathIds"] == nil || b["messages"] == nil {
		t.Errorf("interop/pi/pi context printed no path or messages")
	}
}

// CheckAllOnPath asserts that every entry of the file except those in except is on the
// path Pi loads (interop/pi/pi context): nothing anyone wrote ended on a dead branch.
func CheckAllOnPath(t testing.TB, file string, except ...string) PiContext {
	t.Helper()
	c := OracleContext(t, file, "")
	on := map[string]bool{}
	for _, id := range c.PathIDs {
		on[id] = true
	}
	for _, e := range ReadEntries(t, file) {
		if !on[e.ID] && !slices.Contains(except, e.ID) {
			t.Errorf("%s line %d: %s entry %s (parent %s) is off the path Pi loads (leaf %v)", file, e.Line, e.Type, e.ID, e.Parent(), deref(c.LeafID))
		}
	}
	return c
}

func deref(s *string) string {
	if s == nil {
		return "<null>"
	}
	return *s
}

// WaitForLastEntry polls the file until its last entry satisfies pred (Pi appends each
// entry as it is made, but a test reads the file from another process).
func WaitForLastEntry(t testing.TB, file string, pred func(Entry) bool) Entry {
	t.Helper()
	var last Entry
	waitfor.Until(t, "the awaited last entry of "+file, func() bool {
		if b, err := os.ReadFile(file); err == nil && len(b) > 0 {
			es := ReadEntries(t, file)
			if len(es) > 0 && pred(es[len(es)-1]) {
				last = es[len(es)-1]
				return true
			}
		}
		return false
	})
	return last
}

// messageRole is the role of a message entry ("" for other entries).
func messageRole(e Entry) string {
	if e.Type != "message" {
		return ""
	}
	var m struct {
		Role string `json:"role"`
	}
	_ = e.Field("message", &m)
	return m.Role
}
