package visible

import (
	"encoding/json"
	"strings"
	"testing"
)

// Every class of character that acts on a terminal or hides text is escaped; what a
// person reads as text is kept.
func TestLine(t *testing.T) {
	cases := []struct{ in, want string }{
		{"plain reason: llm 503", "plain reason: llm 503"},
		{"ünïcödé 日本語 emoji 🙂 and a \\ backslash", "ünïcödé 日本語 emoji 🙂 and a \\ backslash"},
		{"\x1b[2J\x1b[31mred", `\x1b[2J\x1b[31mred`},                                                           // CSI: clear, colour
		{"\x1b]8;;https://evil.example\x07click\x1b]8;;\x07", `\x1b]8;;https://evil.example\aclick\x1b]8;;\a`}, // OSC 8 link
		{"failed\rsucceeded", `failed\rsucceeded`},                                                             // CR overwrites the line
		{"a\nFAKE ROW\tx", `a\nFAKE ROW\tx`},                                                                   // a forged line or cell
		{"\u009b31m", `\u009b31m`},                                                                             // C1 CSI
		{"\x00\x7f", `\x00\x7f`},                                                                               // NUL, DEL
		{"abc\u202edcba.jsonl", `abc\u202edcba.jsonl`},                                                         // right-to-left override
		{"\u2066x\u2069\u200bz\ufeff\u00ad", `\u2066x\u2069\u200bz\ufeff\u00ad`},                               // isolates, zero width, BOM, soft hyphen
		{"line\u2028sep\u2029", `line\u2028sep\u2029`},                                                         // line and paragraph separators
		{"tag\U000E0041", `tag\U000e0041`},                                                                     // tag character
		{"bad \xff\xfe utf8", `bad \xff\xfe utf8`},                                                             // not UTF-8
		{"\uFFFD kept", "\uFFFD kept"},                                                                         // a real replacement character
	}
	for _, c := range cases {
		if got := Line(c.in); got != c.want {
			t.Errorf("Line(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := Line(c.in); !Clean(got) {
			t.Errorf("Line(%q) = %q is not clean", c.in, got)
		}
		if Clean(c.in) != (c.in == c.want) {
			t.Errorf("Clean(%q) = %v", c.in, Clean(c.in))
		}
	}
}

func TestText(t *testing.T) {
	if got, want := Text("a\tb\nc\rd\x1b[0m\u202e"), "a\tb\nc\\rd\\x1b[0m\\u202e"; got != want {
		t.Errorf("Text = %q, want %q", got, want)
	}
}

func TestHTML(t *testing.T) {
	doc := []byte("<td data-x=\"a\u202eb\">x\x1b[31m\r\n\tz · →</td>")
	got := string(HTML(doc))
	if want := "<td data-x=\"a\\u202eb\">x\\x1b[31m\r\n\tz · →</td>"; got != want {
		t.Errorf("HTML = %q, want %q", got, want)
	}
	clean := []byte("<p>nothing · to → escape</p>\n")
	if got := HTML(clean); &got[0] != &clean[0] {
		t.Error("a clean document was copied")
	}
	if strings.ContainsRune(string(HTML([]byte("\u2067"))), '\u2067') {
		t.Error("an isolate survived")
	}
}

// JSON keeps the strings a reader decodes and shows none of the hidden characters raw.
func TestJSON(t *testing.T) {
	in := map[string]string{"reason": "a\u202eb\u009b31m\x7f\x1b[0m\U000E0041 日本 \u2028"}
	raw, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got := JSON(raw)
	for _, r := range []rune{'\u202e', '\u009b', '\x7f', '\x1b', '\U000E0041', '\u2028'} {
		if strings.ContainsRune(string(got), r) {
			t.Errorf("%q left raw in %s", r, got)
		}
	}
	var back map[string]string
	if err := json.Unmarshal(got, &back); err != nil || back["reason"] != in["reason"] {
		t.Errorf("decoded %q, %v; want %q", back["reason"], err, in["reason"])
	}
	if !strings.Contains(string(got), "日本") || !strings.Contains(string(got), "\n  \"reason\"") {
		t.Errorf("text or structure changed: %s", got)
	}
}
