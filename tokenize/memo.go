package tokenize

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/compactor-dev/compactor/sessionio"
)

// Memo is a counter that counts each message once: a policy weighs the messages of its
// range more than once (every cut candidate, then the summarized and kept parts), and for
// tiktoken counting is most of a plan's time. Messages are remembered by identity (the
// *Message of an entry). A Memo made by NewMemo counts messages synthesized anew on each call
// each time, which is right and cheap when one plan asks (they are summaries); one made by
// NewSessionMemo, for callers that ask about the same session many times over, keys those by
// their raw bytes, which identify them completely. One Memo serves one read of a session; it
// is safe for concurrent use.
type Memo struct {
	name  string
	count func(*sessionio.Message) int

	mu sync.Mutex
	m  map[*sessionio.Message]int
	// byRaw is nil for a Memo that remembers every message by identity; otherwise m holds
	// the session's own messages (notCounted until first asked) and byRaw the others.
	byRaw map[string]int
}

// notCounted marks a message of the session that has not been counted yet.
const notCounted = -1

// NewMemo returns a memoizing counter over c.
func NewMemo(c Counter) *Memo {
	return &Memo{name: c.Name(), count: c.Count, m: map[*sessionio.Message]int{}}
}

// NewSessionMemo returns a memoizing count (named name) for the messages of one session:
// the messages of entries are keyed by identity (they live as long as the session), any
// other message by its raw bytes (messages that picontext.AsMessage synthesizes afresh on
// every call: custom messages, branch and compaction summaries); a message without raw
// bytes is counted each time.
func NewSessionMemo(name string, entries []*sessionio.Entry, count func(*sessionio.Message) int) *Memo {
	m := &Memo{name: name, count: count, m: make(map[*sessionio.Message]int, len(entries)), byRaw: map[string]int{}}
	for _, e := range entries {
		if e.Message != nil {
			m.m[e.Message] = notCounted
		}
	}
	return m
}

// Name is the underlying counter's name: the counts are its counts.
func (m *Memo) Name() string { return m.name }

// Count returns the count for msg, counting it only the first time.
func (m *Memo) Count(msg *sessionio.Message) int {
	if msg == nil {
		return 0
	}
	if m.byRaw != nil {
		return m.countInSession(msg)
	}
	m.mu.Lock()
	n, ok := m.m[msg]
	m.mu.Unlock()
	if ok {
		return n
	}
	n = m.count(msg)
	m.mu.Lock()
	m.m[msg] = n
	m.mu.Unlock()
	return n
}

// countInSession is Count for a NewSessionMemo: the session's messages by identity, the
// others by their raw bytes.
func (m *Memo) countInSession(msg *sessionio.Message) int {
	m.mu.Lock()
	n, ok := m.m[msg]
	own := ok
	if !own && len(msg.Raw) > 0 {
		n, ok = m.byRaw[string(msg.Raw)]
	}
	m.mu.Unlock()
	if ok && n != notCounted {
		return n
	}
	n = m.count(msg)
	if !own && len(msg.Raw) == 0 {
		return n
	}
	m.mu.Lock()
	if own {
		m.m[msg] = n
	} else {
		m.byRaw[string(msg.Raw)] = n
	}
	m.mu.Unlock()
	return n
}

// Warm counts msgs ahead of use with up to workers goroutines (GOMAXPROCS when workers <= 0),
// so that a plan's counting runs on every core; later Counts of these messages are lookups.
// Messages are handed out one at a time, largest work first not being known, so one huge
// tool output does not hold up the others.
func (m *Memo) Warm(msgs []*sessionio.Message, workers int) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, len(msgs))
	if workers <= 1 {
		for _, msg := range msgs {
			m.Count(msg)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(msgs) {
					return
				}
				m.Count(msgs[i])
			}
		})
	}
	wg.Wait()
}

// Preload starts loading the vocabulary of encoding in the background, for a command that
// is about to count with it and has other work to do first (reading the session); a later
// NewTiktoken for it waits for that load instead of starting its own. Unknown encodings are
// ignored (NewTiktoken reports them).
func Preload(encoding string) {
	if _, ok := encodings[encoding]; ok {
		go NewTiktoken(encoding) //nolint:errcheck // NewTiktoken reports the error to its callers
	}
}
