package activity_test

import (
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/activity"
)

// A session's first lines: a user message a and the answer b to it; userC is a user message
// after b.
const (
	header = `{"type":"session","version":3,"id":"s1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/x"}`
	userA  = `{"type":"message","id":"a","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}`
	asstB  = `{"type":"message","id":"b","parentId":"a","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"yo"}],"api":"x","provider":"p","model":"m","usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":2},"stopReason":"stop","timestamp":2}}`
	userC  = `{"type":"message","id":"c","parentId":"b","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"next","timestamp":1}}`
)

func TestActivity(t *testing.T) {
	t.Parallel()
	const (
		callRead = `{"type":"message","id":"c","parentId":"b","timestamp":"2025-01-01T00:00:03.000Z","message":{"role":"assistant","content":[{"type":"toolCall","id":"t1","name":"read","arguments":{"path":"x"}}],"api":"x","provider":"p","model":"m","stopReason":"toolUse","timestamp":3}}`
		result   = `{"type":"message","id":"d","parentId":"c","timestamp":"2025-01-01T00:00:04.000Z","message":{"role":"toolResult","toolCallId":"t1","toolName":"read","content":[{"type":"text","text":"data"}],"isError":false,"timestamp":4}}`
		bash     = `{"type":"message","id":"c","parentId":"b","timestamp":"2025-01-01T00:00:03.000Z","message":{"role":"bashExecution","command":"ls","output":"","exitCode":0,"cancelled":false,"truncated":false,"timestamp":3}}`
		label    = `{"type":"label","id":"z","parentId":"c","timestamp":"2025-01-01T00:00:05.000Z","targetId":"b","label":"x"}`
		custMsg  = `{"type":"custom_message","customType":"ext","content":"hi","display":true,"id":"c","parentId":"b","timestamp":"2025-01-01T00:00:03.000Z"}`
		comp     = `{"type":"compaction","id":"c","parentId":"b","timestamp":"2025-01-01T00:00:09.000Z","summary":"x","firstKeptEntryId":"a","tokensBefore":1}`
		// Pi 1.x: the prompt's patch it writes just before a request, and the usage its cache
		// warmer writes while the agent is idle.
		sysPatch = `{"type":"message","id":"s","parentId":"c","timestamp":"2025-01-01T00:00:05.000Z","message":{"role":"system","content":"","sections":{"env":"x"},"timestamp":5}}`
		warm     = `{"type":"usage","id":"w","parentId":"b","timestamp":"2025-01-01T00:00:06.000Z","kind":"cache_warm","provider":"p","model":"m","usage":{"input":1,"output":0,"cacheRead":9,"cacheWrite":0,"totalTokens":10}}`
	)
	base := header + "\n" + userA + "\n" + asstB + "\n"
	aborted := strings.Replace(callRead, `"stopReason":"toolUse"`, `"stopReason":"aborted"`, 1)
	cases := []struct {
		name, content string
		light         bool
		want          string // "" = idle; else a substring of the reason
		torn          int
	}{
		{"idle after an answer", base, false, "", 0},
		{"user waiting", base + userC + "\n", false, "user message c is waiting for the model", 0},
		{"tools running", base + callRead + "\n", false, "assistant message c is running tool calls", 0},
		{"tools running, light read", base + callRead + "\n", true, "assistant message c is running tool calls", 0},
		{"tool result going back", base + callRead + "\n" + result + "\n", false, "tool result d is going back to the model", 0},
		{"aborted tool call", base + aborted + "\n", false, "", 0},
		{"bash execution", base + bash + "\n", false, "bash execution c has no answer yet", 0},
		{"label after a user message", base + userC + "\n" + label + "\n", false, "user message c is waiting", 0},
		{"extension message", base + custMsg + "\n", false, "extension message c is waiting", 0},
		{"compaction", base + comp + "\n", false, "", 0},
		{"user waiting behind Pi 1.x's system patch", base + userC + "\n" + sysPatch + "\n", false, "user message c is waiting for the model", 0},
		{"idle with Pi 1.x's cache-warm usage", base + warm + "\n", false, "", 0},
		{"torn tail", base + `{"type":"message","id":"c","par`, false, "", 4},
		{"no final newline, complete line", strings.TrimSuffix(base, "\n"), false, "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := sessionio.ParseWith([]byte(tc.content), "t.jsonl", sessionio.Options{Light: tc.light})
			if err != nil {
				t.Fatal(err)
			}
			a := activity.Of(s)
			if (tc.want == "") == a.TurnInProgress || !strings.Contains(a.Reason, tc.want) {
				t.Fatalf("activity %+v, want turn in progress %v (%q)", a, tc.want != "", tc.want)
			}
			if a.TornLine != tc.torn {
				t.Fatalf("torn line %d, want %d", a.TornLine, tc.torn)
			}
		})
	}
}

// An assistant answer that ended in an error Pi retries by itself leaves the run open; one
// Pi does not retry (a bad key) ends it.
func TestActivityRetryableError(t *testing.T) {
	t.Parallel()
	base := header + "\n" + userA + "\n"
	errAnswer := func(msg string) string {
		return `{"type":"message","id":"b","parentId":"a","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"assistant","content":[],"api":"x","provider":"p","model":"m","usage":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"totalTokens":0},"stopReason":"error","errorMessage":` + msg + `,"timestamp":2}}` + "\n"
	}
	// Pi 1.x omits the failed attempt with a context edit and may patch its prompt before the
	// retry: the run is still open.
	omit := `{"type":"context_edit","id":"e","parentId":"b","timestamp":"2025-01-01T00:00:03.000Z","targetId":"b","replacement":null}` + "\n"
	patch := `{"type":"message","id":"s","parentId":"e","timestamp":"2025-01-01T00:00:04.000Z","message":{"role":"system","content":"","sections":{"env":"x"},"timestamp":4}}` + "\n"
	if s, err := sessionio.ParseWith([]byte(base+errAnswer(`"fetch failed"`)+omit+patch), "t.jsonl", sessionio.Options{Light: true}); err != nil {
		t.Fatal(err)
	} else if a := activity.Of(s); !a.Retrying {
		t.Errorf("Pi 1.x retry behind a context edit and a system patch: %+v, want retrying", a)
	}
	for _, tc := range []struct {
		msg      string
		retrying bool
	}{
		{`"529 {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}"`, true},
		{`"Rate limit reached for requests"`, true},
		{`"fetch failed"`, true},
		{`"prompt is too long: 210000 tokens > 200000 maximum context length"`, true},
		{`"401 invalid x-api-key"`, false},
	} {
		s, err := sessionio.ParseWith([]byte(base+errAnswer(tc.msg)), "t.jsonl", sessionio.Options{Light: true})
		if err != nil {
			t.Fatal(err)
		}
		a := activity.Of(s)
		if a.TurnInProgress || a.Retrying != tc.retrying || (tc.retrying && !strings.Contains(a.Reason, "assistant message b ended in an error Pi retries")) {
			t.Errorf("%s: %+v, want retrying %v", tc.msg, a, tc.retrying)
		}
	}
}
