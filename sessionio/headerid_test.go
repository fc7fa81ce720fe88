package sessionio

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// HeaderID finds the header where the read finds it: past the white space Pi trims from
// the start, whatever the header line's length, from the start of the file only.
func TestHeaderID(t *testing.T) {
	t.Parallel()
	header := func(id, cwd string) string {
		return `{"type":"session","version":3,"id":"` + id + `","timestamp":"2026-01-01T00:00:00.000Z","cwd":"` + cwd + `"}`
	}
	entry := `{"type":"message","id":"a1","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"hi"}}`
	cases := []struct {
		name, text, id, err string
	}{
		{"plain", header("s1", "/w") + "\n" + entry + "\n", "s1", ""},
		{"no newline", header("s1", "/w"), "s1", ""},
		{"CRLF", header("s1", "/w") + "\r\n", "s1", ""},
		{"blank lines first", "\n \t\n\r\n" + header("s2", "/w") + "\n", "s2", ""},
		{"byte-order mark", "\ufeff" + header("s3", "/w") + "\n", "s3", ""},
		{"Unicode spaces", "\u00a0\u2028\u3000" + header("s4", "/w") + "\n", "s4", ""},
		{"a header of 8 KB", header("s5", "/"+strings.Repeat("x", 8<<10)) + "\n" + entry + "\n", "s5", ""},
		{"a header of 1 MiB less 200 bytes", header("s6", "/"+strings.Repeat("x", 1<<20-200)) + "\n", "s6", ""},
		{"an entry first", entry + "\n" + header("s7", "/w") + "\n", "", ""},
		{"not JSON", "hello\n", "", ""},
		{"empty", "", "", ""},
		{"white space only", "\n\n  \n", "", ""},
		{"a header over 1 MiB", header("s8", "/"+strings.Repeat("x", 1<<20)) + "\n", "", ":1: the header line is longer than 1048576 bytes"},
		{"over 1 MiB after blank lines", "\n\n" + header("s9", "/"+strings.Repeat("x", 1<<20)), "", ":3: the header line is longer than"},
	}
	dir := t.TempDir()
	for i, c := range cases {
		name := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".jsonl")
		if err := os.WriteFile(name, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		// Where the full read finds a header, it is the same.
		if s, err := ReadFile(name); err == nil && c.err == "" && s.Header.ID != c.id {
			t.Errorf("case %d %s: the read finds session %q, HeaderID is to find %q", i, c.name, s.Header.ID, c.id)
		}
		for _, f := range []*File{Named(name), Beneath(dir, filepath.Base(name))} {
			id, err := f.HeaderID()
			switch {
			case c.err == "" && err != nil:
				t.Errorf("case %d %s: %v", i, c.name, err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Errorf("case %d %s: error %v, want one with %q", i, c.name, err, c.err)
			case id != c.id:
				t.Errorf("case %d %s: id %q, want %q", i, c.name, id, c.id)
			}
		}
	}
	if _, err := Named(filepath.Join(dir, "missing.jsonl")).HeaderID(); err == nil || !strings.Contains(err.Error(), "missing.jsonl") {
		t.Errorf("a missing file: %v", err)
	}
}
