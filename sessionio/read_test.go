package sessionio

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const hdr = `{"type":"session","version":3,"id":"s1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/x"}`

func user(id, parent, text string) string {
	p := "null"
	if parent != "" {
		p = `"` + parent + `"`
	}
	return `{"type":"message","id":"` + id + `","parentId":` + p + `,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"` + text + `","timestamp":1}}`
}

func asst(id, parent, text string) string {
	return `{"type":"message","id":"` + id + `","parentId":"` + parent + `","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"` + text + `"}],"api":"x","provider":"p","model":"m","usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":2},"stopReason":"stop","timestamp":2}}`
}

func mustParse(t *testing.T, content string) *Session {
	t.Helper()
	s, err := Parse([]byte(content), "test.jsonl")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s
}

func TestParseBOMAndCRLF(t *testing.T) {
	t.Parallel()
	s := mustParse(t, "\ufeff"+hdr+"\r\n"+user("a", "", "hi")+"\r\n"+asst("b", "a", "yo")+"\r\n")
	if s.LeafID() != "b" || len(s.Entries) != 2 {
		t.Fatalf("leaf %q entries %d", s.LeafID(), len(s.Entries))
	}
	if p := mustPath(t, s, ""); len(p) != 2 || p[1].Message.Content.Blocks[0].Text != "yo" {
		t.Fatalf("path: %+v", p)
	}
}

func mustPath(t *testing.T, s *Session, leaf string) []*Entry {
	t.Helper()
	p, err := s.Path(leaf)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseHugeLine(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 20<<20) // 20 MiB in one line: no 64 KiB scanner limit
	s := mustParse(t, hdr+"\n"+user("a", "", big)+"\n"+asst("b", "a", "ok")+"\n")
	if got := len(s.Get("a").Message.Content.Text); got != len(big) {
		t.Fatalf("text length %d", got)
	}
}

func TestParseTolerance(t *testing.T) {
	t.Parallel()
	content := strings.Join([]string{
		hdr,
		user("a", "", "one"),
		`{"type":"message","id":"broken",`,
		`42`,
		``,
		`{"type":"future_thing","id":"u1","parentId":"a","timestamp":"2025-01-01T00:00:01.500Z","payload":{"k":[1,2]}}`,
		asst("b", "u1", "first b"),
		asst("b", "u1", "second b"),
		user("c", "nowhere", "orphan"),
		hdr,
	}, "\n")
	s := mustParse(t, content)
	kinds := map[string]int{}
	for _, d := range s.Diagnostics {
		kinds[d.Kind]++
	}
	want := map[string]int{DiagMalformedLine: 2, DiagDuplicateID: 1, DiagOrphan: 1, DiagExtraHeader: 1}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("diagnostic %s: got %d, want %d (all: %+v)", k, kinds[k], n, s.Diagnostics)
		}
	}
	if s.Diagnostics[0].Line != 3 {
		t.Errorf("first malformed line reported as %d, want 3", s.Diagnostics[0].Line)
	}
	if u := s.Get("u1"); u == nil || !strings.Contains(string(u.Raw), `"payload":{"k":[1,2]}`) {
		t.Errorf("unknown entry type not kept with its raw bytes: %+v", u)
	}
	if s.Get("b").Message.Content.Blocks[0].Text != "second b" {
		t.Errorf("duplicate id: the later line must win")
	}
	// The leaf is the last entry line (the orphan); its path stops at the missing parent.
	if s.LeafID() != "c" || len(mustPath(t, s, "")) != 1 {
		t.Errorf("leaf %q path %d", s.LeafID(), len(mustPath(t, s, "")))
	}
	p := mustPath(t, s, "b")
	if len(p) != 3 || p[1].Type != "future_thing" {
		t.Fatalf("path to b: %d entries", len(p))
	}
}

func TestParseUnreadable(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		content string
		err     error
		line    int
	}{
		"empty":          {"", ErrEmpty, 0},
		"blank":          {"\n \n\r\n", ErrEmpty, 0},
		"not json":       {"hello\nworld\n", ErrNoHeader, 1},
		"no header":      {user("a", "", "x") + "\n", ErrNoHeader, 1},
		"header no id":   {`{"type":"session","version":3}` + "\n", ErrNoHeader, 1},
		"numeric id":     {`{"type":"session","id":7}` + "\n", ErrNoHeader, 1},
		"self cycle":     {hdr + "\n" + user("a", "a", "x") + "\n", ErrCycle, 2},
		"two-node cycle": {hdr + "\n" + user("a", "b", "x") + "\n" + user("b", "a", "y") + "\n", ErrCycle, 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tc.content), "bad.jsonl")
			var fe *FileError
			if !errors.Is(err, tc.err) || !errors.As(err, &fe) {
				t.Fatalf("got %v, want %v", err, tc.err)
			}
			if fe.File != "bad.jsonl" || !strings.Contains(err.Error(), "bad.jsonl") {
				t.Errorf("error does not name the file: %v", err)
			}
			if tc.line > 0 && fe.Line != tc.line {
				t.Errorf("line %d, want %d", fe.Line, tc.line)
			}
		})
	}
}

func TestReadFileMissing(t *testing.T) {
	t.Parallel()
	_, err := ReadFile(filepath.Join(t.TempDir(), "nope.jsonl"))
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "nope.jsonl") {
		t.Fatalf("got %v", err)
	}
}

func TestLabelsAndName(t *testing.T) {
	t.Parallel()
	content := strings.Join([]string{
		hdr, user("a", "", "x"), asst("b", "a", "y"),
		`{"type":"label","id":"l1","parentId":"b","timestamp":"2025-01-01T00:00:03.000Z","targetId":"a","label":"start"}`,
		`{"type":"label","id":"l2","parentId":"l1","timestamp":"2025-01-01T00:00:03.000Z","targetId":"b","label":"gone"}`,
		`{"type":"label","id":"l3","parentId":"l2","timestamp":"2025-01-01T00:00:03.000Z","targetId":"b"}`,
		`{"type":"session_info","id":"n1","parentId":"l3","timestamp":"2025-01-01T00:00:03.000Z","name":"  first  "}`,
	}, "\n")
	s := mustParse(t, content)
	if got := s.Labels(); len(got) != 1 || got["a"] != "start" {
		t.Errorf("labels %v", got)
	}
	if s.Name() != "first" {
		t.Errorf("name %q", s.Name())
	}
	if kids := s.Children("a"); len(kids) != 1 || kids[0].ID != "b" {
		t.Errorf("children of a: %v", kids)
	}
}

func TestV1Migration(t *testing.T) {
	t.Parallel()
	content := strings.Join([]string{
		`{"type":"session","id":"old","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/x"}`,
		`{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"a","timestamp":1}}`,
		`{"type":"message","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"b"}],"provider":"p","model":"m","stopReason":"stop","timestamp":2}}`,
		`{"type":"message","timestamp":"2025-01-01T00:00:03.000Z","message":{"role":"user","content":"c","timestamp":3}}`,
		`{"type":"compaction","timestamp":"2025-01-01T00:00:04.000Z","summary":"S","firstKeptEntryIndex":3,"tokensBefore":9}`,
	}, "\n")
	s := mustParse(t, content)
	if s.Version() != 1 {
		t.Fatalf("version %d", s.Version())
	}
	comp := s.Entries[3]
	if comp.FirstKeptEntryID != s.Entries[2].ID || comp.ParentID != s.Entries[2].ID {
		t.Fatalf("compaction: firstKept %q parent %q; want %q", comp.FirstKeptEntryID, comp.ParentID, s.Entries[2].ID)
	}
	if strings.Contains(string(comp.Raw), "firstKeptEntryIndex") || !strings.Contains(string(comp.Raw), `"firstKeptEntryId"`) {
		t.Errorf("migrated raw: %s", comp.Raw)
	}
}
