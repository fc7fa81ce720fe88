package tokenize

import (
	"github.com/compactor-dev/compactor/sessionio/picontext"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/compactor-dev/compactor/sessionio"
)

// callCounter counts how often each message is counted.
type callCounter struct {
	Counter
	mu    sync.Mutex
	calls map[*sessionio.Message]int
}

func (c *callCounter) Count(m *sessionio.Message) int {
	c.mu.Lock()
	c.calls[m]++
	c.mu.Unlock()
	return c.Counter.Count(m)
}

// TestMemoCountsOnce: Warm on several goroutines and later Counts give the counter's own
// counts, and each message is counted once.
func TestMemoCountsOnce(t *testing.T) {
	t.Parallel()
	s, err := sessionio.ReadFile("../testdata/corpus/08-large.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var msgs []*sessionio.Message
	for _, e := range s.Entries {
		if e.Message != nil {
			msgs = append(msgs, e.Message)
		}
	}
	tk := mustTiktoken(t, O200KBase)
	cc := &callCounter{Counter: tk, calls: map[*sessionio.Message]int{}}
	m := NewMemo(cc)
	if m.Name() != tk.Name() {
		t.Fatalf("name %q", m.Name())
	}
	m.Warm(msgs, 3)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for _, msg := range msgs {
				if got, want := m.Count(msg), tk.Count(msg); got != want {
					t.Errorf("count %d, counter %d", got, want)
					return
				}
			}
		})
	}
	wg.Wait()
	for msg, n := range cc.calls {
		if n != 1 {
			t.Fatalf("a message was counted %d times (%s)", n, msg.Role)
		}
	}
	if len(cc.calls) != len(msgs) || m.Count(nil) != 0 {
		t.Fatalf("%d counted of %d", len(cc.calls), len(msgs))
	}
}

// TestNoVocabularyUntilUsed: a process that imports tokenize parses no vocabulary until it
// counts with tiktoken, then one, once (checked in a fresh process: the other tests load
// both vocabularies).
func TestNoVocabularyUntilUsed(t *testing.T) {
	if os.Getenv("TOKENIZE_STARTUP_CHILD") == "1" {
		for enc, l := range encodings {
			if l.t != nil || l.err != nil {
				t.Fatalf("%s loaded before use", enc)
			}
		}
		Preload(O200KBase)
		a, err := NewTiktoken(O200KBase)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := NewTiktoken(O200KBase); a != b || encodings[CL100KBase].t != nil {
			t.Fatal("loaded twice, or the other encoding too")
		}
		return
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoVocabularyUntilUsed$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TOKENIZE_STARTUP_CHILD=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// TestSessionMemoCountsOnce: a NewSessionMemo counts the session's messages once by
// identity and the messages synthesized afresh on each call (compaction summaries) once by
// their raw bytes; a message without raw bytes is counted on each call.
func TestSessionMemoCountsOnce(t *testing.T) {
	t.Parallel()
	s, err := sessionio.ReadFile("../testdata/corpus/05-compactions.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	tk := mustTiktoken(t, O200KBase)
	cc := &callCounter{Counter: tk, calls: map[*sessionio.Message]int{}}
	m := NewSessionMemo("session", s.Entries, cc.Count)
	if m.Name() != "session" {
		t.Fatalf("name %q", m.Name())
	}
	calls, synthesized := 0, 0
	for range 3 {
		for _, e := range s.Entries {
			msg := picontext.AsMessage(e)
			if msg == nil {
				continue
			}
			if got, want := m.Count(msg), tk.Count(msg); got != want {
				t.Fatalf("%s: count %d, counter %d", e.ID, got, want)
			}
		}
	}
	for _, e := range s.Entries {
		if msg := picontext.AsMessage(e); msg != nil {
			calls++
			if msg != e.Message {
				synthesized++
			}
		}
	}
	counted := 0
	for _, n := range cc.calls {
		counted += n
	}
	if synthesized == 0 || counted != calls {
		t.Fatalf("%d counts for %d messages (%d synthesized)", counted, calls, synthesized)
	}
	bare := &sessionio.Message{Role: sessionio.RoleCompactionSummary, Summary: "a summary"}
	for range 2 {
		if got, want := m.Count(bare), tk.Count(bare); got != want {
			t.Fatalf("bare: count %d, counter %d", got, want)
		}
	}
	if cc.calls[bare] != 2 || m.Count(nil) != 0 {
		t.Fatalf("a message without raw bytes was counted %d times in 2 calls", cc.calls[bare])
	}
}
