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
// *Message of an entry; messages synthesized anew on each call are counted each time, which
// is right and cheap: they are summaries). One Memo serves one read of a session; it is
// safe for concurrent use.
type Memo struct {
	c Counter

	mu sync.Mutex
	m  map[*sessionio.Message]int
}

// NewMemo returns a memoizing counter over c.
func NewMemo(c Counter) *Memo { return &Memo{c: c, m: map[*sessionio.Message]int{}} }

// Name is the underlying counter's name: the counts are its counts.
func (m *Memo) Name() string { return m.c.Name() }

// Count returns c's count for msg, counting it only the first time.
func (m *Memo) Count(msg *sessionio.Message) int {
	if msg == nil {
		return 0
	}
	m.mu.Lock()
	n, ok := m.m[msg]
	m.mu.Unlock()
	if ok {
		return n
	}
	n = m.c.Count(msg)
	m.mu.Lock()
	m.m[msg] = n
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
