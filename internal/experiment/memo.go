package experiment

import (
	"strings"

	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/tokenize"
)

// memo counts each message of one session once, whichever policy, setting or replay step
// asks. Messages of "message" entries are keyed by pointer (they live as long as the
// session); messages that sessionio.AsMessage synthesizes afresh on every call (custom
// messages, branch and compaction summaries) are keyed by their Raw bytes, which identify
// them completely. It is used by one goroutine (one session) at a time.
type memo struct {
	byMsg map[*sessionio.Message]int // -1: known message, not counted yet
	byRaw map[string]int
	count func(*sessionio.Message) int
}

func newMemo(entries []*sessionio.Entry, count func(*sessionio.Message) int) *memo {
	m := &memo{byMsg: make(map[*sessionio.Message]int, len(entries)), byRaw: map[string]int{}, count: count}
	for _, e := range entries {
		if e.Message != nil {
			m.byMsg[e.Message] = -1
		}
	}
	return m
}

func (m *memo) get(msg *sessionio.Message) int {
	if msg == nil {
		return 0
	}
	if n, ok := m.byMsg[msg]; ok {
		if n < 0 {
			n = m.count(msg)
			m.byMsg[msg] = n
		}
		return n
	}
	if len(msg.Raw) == 0 {
		return m.count(msg)
	}
	if n, ok := m.byRaw[string(msg.Raw)]; ok {
		return n
	}
	n := m.count(msg)
	m.byRaw[string(msg.Raw)] = n
	return n
}

// memoCounter is a cutpoint.Counter answering from a memo.
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
func serializedCounter(text func(string) int, r sessionio.Release) func(*sessionio.Message) int {
	return func(m *sessionio.Message) int {
		parts := summarize.SerializeParts([]*sessionio.Message{m}, r)
		if len(parts) == 0 {
			return 0
		}
		return text(strings.Join(parts, "\n\n")) + text("\n\n")
	}
}
