package summarize

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
)

// TestSerializeDialectRules pins where the releases' serializeConversation differ, on small
// hand-made messages (the goldens of testdata/golden/<version> cover them on real sessions).
func TestSerializeDialectRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		raw             string
		want073, want16 string
	}{
		// Pi 1.x reads a tool result's content with contentText, which takes a string as it
		// is; Pi 0.73 filters the content as blocks (and throws on a string: nothing is kept).
		{"tool result with string content",
			`{"role":"toolResult","toolCallId":"c","toolName":"bash","content":"plain output","isError":false}`,
			"", "[Tool result]: plain output"},
		{"tool result with blocks",
			`{"role":"toolResult","toolCallId":"c","toolName":"bash","content":[{"type":"text","text":"a"},{"type":"image","data":"AA","mimeType":"image/png"},{"type":"text","text":"b"}],"isError":false}`,
			"[Tool result]: ab", "[Tool result]: ab"},
		{"thinking",
			`{"role":"assistant","content":[{"type":"thinking","thinking":"hmm"},{"type":"text","text":"yes"}]}`,
			"[Assistant thinking]: hmm\n\n[Assistant]: yes", "[Assistant]: yes"},
		// The cut at 2000 UTF-16 units falls inside the pair: 0.73 keeps its high half
		// (U+FFFD once written as UTF-8), 1.x leaves the whole pair out.
		{"string tool result cut inside a surrogate pair",
			`{"role":"toolResult","toolCallId":"c","toolName":"read","content":"` + strings.Repeat("a", 1999) + `😀z","isError":false}`,
			"", "[Tool result]: " + strings.Repeat("a", 1999) + "\n\n[... 2 more characters truncated]"},
	}
	for _, tc := range tests {
		m, err := sessionio.DecodeMessage(json.RawMessage(tc.raw))
		if err != nil {
			t.Fatalf("%s: decode: %v", tc.name, err)
		}
		if got := SerializeConversation([]*sessionio.Message{m}, pi.MustParseRelease("0.73.1")); got != tc.want073 {
			t.Errorf("%s (Pi 0.73): %q, want %q", tc.name, got, tc.want073)
		}
		if got := SerializeConversation([]*sessionio.Message{m}, pi.Latest); got != tc.want16 {
			t.Errorf("%s (Pi 1.6): %q, want %q", tc.name, got, tc.want16)
		}
	}
}
