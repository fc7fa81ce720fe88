package experiment

import (
	"strings"

	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/tokenize"
)

// memo counts each message of one session once, whichever policy, setting or replay step
// asks: a tokenize.Memo keyed by the session's entries (see tokenize.NewSessionMemo).
type memo struct{ counts *tokenize.Memo }

func newMemo(entries []*sessionio.Entry, count func(*sessionio.Message) int) *memo {
	return &memo{counts: tokenize.NewSessionMemo("", entries, count)}
}

func (m *memo) get(msg *sessionio.Message) int { return m.counts.Count(msg) }

// memoCounter is a cutpoint.Counter answering from a memo under the counter's name.
type memoCounter struct {
	name string
	m    *memo
}

func (c memoCounter) Name() string                   { return c.name }
func (c memoCounter) Count(m *sessionio.Message) int { return c.m.get(m) }

// textCounter returns how c counts a plain text: tiktoken's CountText, or Pi's chars/4.
func textCounter(c tokenize.Counter) func(string) int {
	if tc, ok := c.(summarize.TextCounter); ok {
		return tc.CountText
	}
	return summarize.EstimateText
}

// serializedCounter counts what one message costs inside the summarizer's prompt: the
// tokens of its text as summarize.SerializeConversation renders it (tool results clipped
// to summarize.ToolResultMaxChars), plus the "\n\n" that joins it to its neighbours.
func serializedCounter(text func(string) int, r pi.Release) func(*sessionio.Message) int {
	return func(m *sessionio.Message) int {
		parts := summarize.SerializeParts([]*sessionio.Message{m}, r)
		if len(parts) == 0 {
			return 0
		}
		return text(strings.Join(parts, "\n\n")) + text("\n\n")
	}
}
