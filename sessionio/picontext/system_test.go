package picontext

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/sessionio"
)

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
	got := CurrentSystemMessage(msgs)
	want := `{"role":"system","content":"You are an agent.\n\nMore.\nLines.","sections":{"b":"B2","c":"C1","a":"A3"},"toolsAdded":[{"name":"bash","v":2},{"name":"read"}],"timestamp":5}`
	if got == nil || string(got.Raw) != want {
		t.Fatalf("current system message\n got %s\nwant %s", got.Raw, want)
	}
	if CurrentSystemMessage(msgs[1:2]) != nil {
		t.Error("no system message: none")
	}
	if m := CurrentSystemMessage([]*sessionio.Message{systemMsg(t, `{"role":"system","content":"x"}`)}); m != nil {
		t.Errorf("no timestamp and no tools: Pi returns none, got %s", m.Raw)
	}
	if s := string(WithTimestamp(got, 1.7e12).Raw); !strings.HasSuffix(s, `,"timestamp":1700000000000}`) {
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
		if got := string(ReplaceMember(json.RawMessage(tc.obj), "content", json.RawMessage(tc.val))); got != tc.want {
			t.Errorf("ReplaceMember(%s) = %s, want %s", tc.obj, got, tc.want)
		}
	}
}
