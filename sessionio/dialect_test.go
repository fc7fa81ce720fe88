package sessionio_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
)

// TestCheckLoadsBOM: Pi 1.6 refuses a header line with a byte-order mark (its loader parses
// each line as it is), Pi 0.73 trimmed it away; blank lines before the header are skipped by
// both.
func TestCheckLoadsBOM(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	header := `{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/p"}`
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bom := write("bom.jsonl", "\ufeff"+header+"\n")
	err := sessionio.CheckLoads(bom, pi.MustParseRelease("0.78.1"))
	var fe *sessionio.FileError
	if !errors.As(err, &fe) || fe.Line != 1 || !errors.Is(err, sessionio.ErrPaddedHeader) || !strings.Contains(err.Error(), "byte-order mark") {
		t.Fatalf("Pi 1.6, BOM: %v", err)
	}
	if err := sessionio.CheckLoads(bom, pi.MustParseRelease("0.78.0")); err != nil {
		t.Fatalf("Pi 0.78.0 reads a BOM'd file: %v", err)
	}
	nbsp := write("nbsp.jsonl", "\n  \n\u00a0"+header+"\n")
	if err := sessionio.CheckLoads(nbsp, pi.Latest); !errors.As(err, &fe) || fe.Line != 3 {
		t.Fatalf("Pi 1.6, a no-break space on line 3: %v", err)
	}
	for name, content := range map[string]string{"plain": header + "\n", "blank-first": "\n\r\n" + header + "\r\n", "empty": "", "garbage": "hello\n"} {
		if err := sessionio.CheckLoads(write(name+".jsonl", content), pi.Latest); err != nil {
			t.Errorf("%s: %v (what both Pis refuse is left to the read)", name, err)
		}
	}
}

func systemMsg(t *testing.T, raw string) *sessionio.Message {
	t.Helper()
	m, err := sessionio.DecodeMessage(json.RawMessage(raw))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCurrentSystemMessage: the replay of system messages keeps a JavaScript Map's order
// (a section or tool set again keeps its place, one removed and set again goes last), joins
// the texts that are not empty, and takes the first timestamp.
func TestCurrentSystemMessage(t *testing.T) {
	t.Parallel()
	msgs := []*sessionio.Message{
		systemMsg(t, `{"role":"system","content":"You are an agent.","sections":{"a":"A1","b":"B1","c":"C1"},"toolsAdded":[{"name":"read","d":1.50},{"name":"bash"}],"timestamp":5}`),
		systemMsg(t, `{"role":"user","content":"not a system message"}`),
		systemMsg(t, `{"role":"system","content":"","sections":{"a":null,"b":"B2"},"toolsRemoved":[{"name":"read"}],"timestamp":9}`),
		systemMsg(t, `{"role":"system","content":[{"type":"text","text":"More."},{"type":"text","text":"Lines."}],"sections":{"a":"A3"},"toolsAdded":[{"name":"read"},{"name":"bash","v":2}]}`),
	}
	got := sessionio.CurrentSystemMessage(msgs)
	want := `{"role":"system","content":"You are an agent.\n\nMore.\nLines.","sections":{"b":"B2","c":"C1","a":"A3"},"toolsAdded":[{"name":"bash","v":2},{"name":"read"}],"timestamp":5}`
	if got == nil || string(got.Raw) != want {
		t.Fatalf("current system message\n got %s\nwant %s", got.Raw, want)
	}
	if sessionio.CurrentSystemMessage(msgs[1:2]) != nil {
		t.Error("no system message: none")
	}
	if m := sessionio.CurrentSystemMessage([]*sessionio.Message{systemMsg(t, `{"role":"system","content":"x"}`)}); m != nil {
		t.Errorf("no timestamp and no tools: Pi returns none, got %s", m.Raw)
	}
	if s := string(got.WithTimestamp(1.7e12).Raw); !strings.HasSuffix(s, `,"timestamp":1700000000000}`) {
		t.Errorf("WithTimestamp: %s", s)
	}
}

func TestReplaceMember(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ obj, val, want string }{
		{`{"role":"user","content":"a","timestamp":1}`, `[]`, `{"role":"user","content":[],"timestamp":1}`},
		{`{"role":"user","timestamp":1}`, `"x"`, `{"role":"user","timestamp":1,"content":"x"}`},
		{`{ "role" : "user", "content":null, "content":"b" }`, `"c"`, `{"role":"user","content":"c"}`},
	} {
		if got := string(sessionio.ReplaceMember(json.RawMessage(tc.obj), "content", json.RawMessage(tc.val))); got != tc.want {
			t.Errorf("ReplaceMember(%s) = %s, want %s", tc.obj, got, tc.want)
		}
	}
}
