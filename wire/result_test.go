package wire

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/outcome"
)

// The shared shapes are embedded where the fields stood: the keys of an event, a result
// and a report row keep their order (they are on the wire and in goldens).
func TestEmbeddedShapesKeepTheKeyOrder(t *testing.T) {
	t.Parallel()
	tally := Tally{Outcome: outcome.Done, Reason: "r", EntryID: "e", TokensBefore: 1, TokensAfter: 2, LLMTokens: 3,
		LLMInputTokens: 4, LLMCachedInputTokens: 5, LLMOutputTokens: 6}
	ref := JobRef{Store: "s", SessionID: "i", Path: "p", Kind: KindCompact}
	const tallyJSON = `"outcome":"done","reason":"r","entryId":"e","tokensBefore":1,"tokensAfter":2,"llmTokens":3,"llmInputTokens":4,"llmCachedInputTokens":5,"llmOutputTokens":6`
	const refJSON = `"store":"s","sessionId":"i","path":"p","kind":"compact"`
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for name, c := range map[string]struct {
		v    any
		want string
	}{
		"result": {Result{Tally: tally, LLMModel: "m", LeafID: "l", Busy: true, PiUnknown: "9.9.9"},
			`{` + tallyJSON + `,"llmModel":"m","leafId":"l","busy":true,"piUnknown":"9.9.9"}`},
		"event": {Event{V: EventVersion, JobID: "j", JobSeq: 7, JobRef: ref, Tally: tally, LLMModel: "m", DurationMs: 8, Attempt: 1,
			RetryInMs: 9, Error: "x", Busy: true, PiUnknown: "9.9.9", Worker: "w", At: at},
			`{"v":1,"jobId":"j","jobSeq":7,` + refJSON + `,` + tallyJSON + `,"llmModel":"m","durationMs":8,"attempt":1,"retryInMs":9,"error":"x","busy":true,"piUnknown":"9.9.9","worker":"w","at":"2026-01-02T03:04:05Z"}`},
		"report row": {ReportRow{JobRef: ref, Tally: tally, Attempts: 2, Duration: time.Second},
			`{` + refJSON + `,` + tallyJSON + `,"attempts":2,"durationNs":1000000000}`},
		"empty result": {Result{}, `{"outcome":""}`},
	} {
		b, err := json.Marshal(c.v)
		if err != nil || string(b) != c.want {
			t.Errorf("%s: %s %v\nwant %s", name, b, err, c.want)
		}
	}
	var ev Event
	if err := json.Unmarshal([]byte(`{"v":1,"store":"s","outcome":"retry","tokensBefore":3}`), &ev); err != nil || ev.Store != "s" || ev.TokensBefore != 3 || ev.Final() {
		t.Errorf("decoded %+v %v", ev, err)
	}
}

// A dead letter keeps a payload as JSON when it is, as text when not, quoted when not UTF-8.
func TestNewDeadLetter(t *testing.T) {
	t.Parallel()
	subj := JobSubject("s", "a.b", KindCompact)
	if got := DLQSubjectFor(subj); got != DLQSubject("s", "a.b") {
		t.Errorf("dead-letter subject %s, want %s", got, DLQSubject("s", "a.b"))
	}
	if got := EventSubjectFor(subj, 9); got != JobEventSubject("s", "a.b", 9) {
		t.Errorf("event subject %s, want %s", got, JobEventSubject("s", "a.b", 9))
	}
	for payload, want := range map[string][2]string{`{"v":1}`: {`{"v":1}`, ""}, "plain": {"", "plain"}, "\xff": {"", `"\xff"`}} {
		dl := NewDeadLetter(subj, 1, []byte(payload), "r", nil, 1, "w")
		if string(dl.Job) != want[0] || dl.JobText != want[1] || dl.V != DeadLetterVersion {
			t.Errorf("%q: job %s text %q", payload, dl.Job, dl.JobText)
		}
	}
}
