package promptcache

import (
	"strings"
	"testing"
)

func TestLookup(t *testing.T) {
	c := New()
	span := strings.Repeat("[User]: read the file\n\n", 400) // ~2,300 tokens
	first := []Message{{"system", "notes"}, {"user", "<conversation>\n" + span + "</conversation>\n\nSummarize."}}
	if got := c.Lookup(first); got != 0 {
		t.Fatalf("first request: %d cached tokens, want 0", got)
	}
	// The same beginning, more conversation appended: cached up to where it differs, in
	// blocks of 128.
	second := []Message{{"system", "notes"}, {"user", "<conversation>\n" + span + "[User]: more\n\n</conversation>\n\nSummarize."}}
	got := c.Lookup(second)
	shared := Tokens("system\x00notes\x01user\x00<conversation>\n" + span)
	if got == 0 || got > shared || shared-got >= c.BlockTokens || got%c.BlockTokens != 0 {
		t.Fatalf("second request: %d cached tokens, want the shared %d rounded down to a block of %d", got, shared, c.BlockTokens)
	}
	// Another system prompt: nothing shared.
	if got := c.Lookup([]Message{{"system", "other"}, second[1]}); got != 0 {
		t.Fatalf("a different first message: %d cached, want 0", got)
	}
	// Below MinTokens nothing is cached, even when repeated.
	small := []Message{{"user", "hello"}}
	c.Lookup(small)
	if got := c.Lookup(small); got != 0 {
		t.Fatalf("a short prompt: %d cached, want 0", got)
	}
}
