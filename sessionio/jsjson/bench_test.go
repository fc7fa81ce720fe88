package jsjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// toolCallArgs builds a realistic edit-tool arguments object of a few KB: source code
// with quotes, tabs, newlines, HTML characters and some non-ASCII text, as Pi stores it
// (JSON.stringify form, so escapes are \" \\ \n \t and <>& are raw).
func toolCallArgs(tb testing.TB) []byte {
	tb.Helper()
	var code strings.Builder
	for i := range 15 {
		fmt.Fprintf(&code, "\tif err := h.handle(ctx, \"req-%d\", `C:\\tmp\\x`); err != nil && n < 10 { // café ✓ <b>&amp;</b>\n", i)
		fmt.Fprintf(&code, "\t\treturn fmt.Errorf(\"step %d: %%w\", err) // 🚀\n", i)
	}
	old := code.String()
	args := Fields{
		{"path", "internal/server/handler.go"},
		{"edits", []any{
			Fields{{"oldText", old}, {"newText", strings.ReplaceAll(old, "handle", "serve")}},
			Fields{{"oldText", "func main() {}"}, {"newText", "func main() {\n\tos.Exit(run())\n}"}},
		}},
		{"dryRun", false},
		{"timeout", 30.5},
	}
	raw, err := Marshal(args)
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}

// toolCallArgsNonCanonical is the same object as Go's encoding/json would write it,
// indented and with \u003c-style escapes for <, > and &: whitespace and escapes that
// JSON.stringify would not produce, so strings take the slow path.
func toolCallArgsNonCanonical(tb testing.TB) []byte {
	tb.Helper()
	var esc, ind bytes.Buffer
	json.HTMLEscape(&esc, toolCallArgs(tb))
	if err := json.Indent(&ind, esc.Bytes(), "", "  "); err != nil {
		tb.Fatal(err)
	}
	return ind.Bytes()
}

func TestBenchInputsAgree(t *testing.T) {
	t.Parallel()
	a, err := Canonical(nil, toolCallArgs(t))
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(toolCallArgs(t)) {
		t.Error("Marshal output is not canonical")
	}
	b, err := Canonical(nil, toolCallArgsNonCanonical(t))
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Error("canonical forms of the two benchmark inputs differ")
	}
	if n := len(toolCallArgs(t)); n < 2000 || n > 8000 {
		t.Errorf("benchmark input is %d bytes, want a few KB", n)
	}
}

func benchCanonical(b *testing.B, raw []byte) {
	buf := make([]byte, 0, 2*len(raw))
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = Canonical(buf[:0], raw); err != nil {
			b.Fatal(err)
		}
	}
}

func benchCanonicalLen(b *testing.B, raw []byte) {
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := CanonicalLen(raw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCanonical(b *testing.B) {
	b.Run("canonical-input", func(b *testing.B) { benchCanonical(b, toolCallArgs(b)) })
	b.Run("go-indented-input", func(b *testing.B) { benchCanonical(b, toolCallArgsNonCanonical(b)) })
}

func BenchmarkCanonicalLen(b *testing.B) {
	b.Run("canonical-input", func(b *testing.B) { benchCanonicalLen(b, toolCallArgs(b)) })
	b.Run("go-indented-input", func(b *testing.B) { benchCanonicalLen(b, toolCallArgsNonCanonical(b)) })
}

// BenchmarkEncodingJSONCompact is a yardstick: json.Compact does far less work
// (no unescaping, no number or key handling) on the same bytes.
func BenchmarkEncodingJSONCompact(b *testing.B) {
	raw := toolCallArgs(b)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	var dst bytes.Buffer
	for b.Loop() {
		dst.Reset()
		if err := json.Compact(&dst, raw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUTF16Len(b *testing.B) {
	s := string(toolCallArgs(b))
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		UTF16Len(s)
	}
}

func BenchmarkMarshalFields(b *testing.B) {
	v := Fields{
		{"type", "message"}, {"id", "a1b2c3d4"}, {"parentId", "e5f6a7b8"}, {"timestamp", "2026-05-07T10:11:12.345Z"},
		{"message", Fields{{"role", "toolResult"}, {"toolCallId", "call_1"}, {"toolName", "read"},
			{"content", []any{Fields{{"type", "text"}, {"text", strings.Repeat("line <a> & \"b\"\n", 100)}}}},
			{"isError", false}, {"timestamp", 1746612672345.0}}},
	}
	b.ReportAllocs()
	buf := make([]byte, 0, 4096)
	for b.Loop() {
		var err error
		if buf, err = AppendValue(buf[:0], v); err != nil {
			b.Fatal(err)
		}
	}
}
