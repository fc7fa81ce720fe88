package picontext_test

import (
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/picontext"
)

// The contexts of files the reader had to tolerate or migrate: only what Pi would send
// reaches them.

var pi073 = pi.MustParseRelease("0.73.1")

func parse(t *testing.T, lines ...string) *sessionio.Session {
	t.Helper()
	s, err := sessionio.Parse([]byte(strings.Join(lines, "\n")), "test.jsonl")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s
}

func pathTo(t *testing.T, s *sessionio.Session, leaf string) []*sessionio.Entry {
	t.Helper()
	p, err := s.Path(leaf)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const header = `{"type":"session","version":3,"id":"s1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/x"}`

// TestBuildAfterBOMAndCRLF: a file with a byte-order mark and CRLF line ends gives the
// context of the same file without them.
func TestBuildAfterBOMAndCRLF(t *testing.T) {
	t.Parallel()
	s := parse(t, "\ufeff"+header+"\r",
		`{"type":"message","id":"a","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}`+"\r",
		`{"type":"message","id":"b","parentId":"a","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"yo"}],"provider":"p","model":"m","stopReason":"stop","timestamp":2}}`+"\r\n")
	c := picontext.Build(pathTo(t, s, ""), pi073)
	if len(c.Messages) != 2 || c.Messages[1].Content.Blocks[0].Text != "yo" {
		t.Fatalf("context: %+v", c.Messages)
	}
}

// TestBuildLeavesOutUnknownTypes: an entry of a type Pi does not know is on the path but
// puts nothing into the context.
func TestBuildLeavesOutUnknownTypes(t *testing.T) {
	t.Parallel()
	s := parse(t, header,
		`{"type":"message","id":"a","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"one","timestamp":1}}`,
		`{"type":"future_thing","id":"u1","parentId":"a","timestamp":"2025-01-01T00:00:01.500Z","payload":{"k":[1,2]}}`,
		`{"type":"message","id":"b","parentId":"u1","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"b"}],"provider":"p","model":"m","stopReason":"stop","timestamp":2}}`)
	p := pathTo(t, s, "b")
	if len(p) != 3 || p[1].Type != "future_thing" {
		t.Fatalf("path to b: %d entries", len(p))
	}
	if c := picontext.Build(p, pi073); len(c.Messages) != 2 {
		t.Errorf("unknown types must not enter the context: %d messages", len(c.Messages))
	}
}

// TestBuildAfterV1Compaction: a version 1 compaction (firstKeptEntryIndex), migrated in
// memory, keeps the entries from that index on after its summary.
func TestBuildAfterV1Compaction(t *testing.T) {
	t.Parallel()
	s := parse(t, `{"type":"session","id":"old","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/x"}`,
		`{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"a","timestamp":1}}`,
		`{"type":"message","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"b"}],"provider":"p","model":"m","stopReason":"stop","timestamp":2}}`,
		`{"type":"message","timestamp":"2025-01-01T00:00:03.000Z","message":{"role":"user","content":"c","timestamp":3}}`,
		`{"type":"compaction","timestamp":"2025-01-01T00:00:04.000Z","summary":"S","firstKeptEntryIndex":3,"tokensBefore":9}`)
	c := picontext.Build(pathTo(t, s, ""), pi073)
	if len(c.Messages) != 2 || c.Messages[0].Role != sessionio.RoleCompactionSummary || c.Messages[1].Content.Text != "c" {
		t.Fatalf("context after v1 compaction: %d messages", len(c.Messages))
	}
}
