package tokenize

import (
	"github.com/compactor-dev/compactor/sessionio/picontext"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/compactor-dev/compactor/sessionio"
)

// countingCounter counts how often it is really asked, around a real counter.
type countingCounter struct {
	Counter
	calls atomic.Int64
}

func (c *countingCounter) Count(m *sessionio.Message) int {
	c.calls.Add(1)
	return c.Counter.Count(m)
}

func readCorpus(tb testing.TB, name string) *sessionio.Session {
	tb.Helper()
	s, err := sessionio.ReadFile(filepath.Join(corpusDir, name))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func TestCacheEntry(t *testing.T) {
	t.Parallel()
	s := readCorpus(t, "06-custom-bash-entries.jsonl")
	cc := &countingCounter{Counter: Estimate()}
	c := NewCache(0)
	messages := 0
	for _, e := range s.Entries {
		want := 0
		if e.Type == sessionio.TypeMessage {
			want = Estimate().Count(e.Message)
			messages++
		}
		if got := c.Entry(cc, e); got != want {
			t.Fatalf("%s (%s): %d, want %d", e.ID, e.Type, got, want)
		}
	}
	if int(cc.calls.Load()) > messages || c.Len() > messages {
		t.Fatalf("non-message entries were counted: %d calls, %d cached, %d messages", cc.calls.Load(), c.Len(), messages)
	}
	calls := cc.calls.Load()
	for _, e := range s.Entries {
		c.Entry(cc, e)
	}
	if cc.calls.Load() != calls {
		t.Errorf("second pass counted %d messages again", cc.calls.Load()-calls)
	}
	hits, misses := c.Stats()
	if hits < int64(messages) || misses != calls {
		t.Errorf("stats hits %d misses %d (messages %d, calls %d)", hits, misses, messages, calls)
	}
	// The key includes the counter: another counter's count is not reused.
	tk := mustTiktoken(t, O200KBase)
	for _, e := range s.Entries {
		if e.Type == sessionio.TypeMessage {
			if got, want := c.Entry(tk, e), tk.Count(e.Message); got != want {
				t.Fatalf("tiktoken through cache: %d, want %d", got, want)
			}
		}
	}
	// custom_message, branch_summary and compaction entries count 0 via Entry, but their
	// built message can be counted and cached via Message.
	for _, e := range s.Entries {
		if e.Type == sessionio.TypeCustomMessage {
			m := picontext.AsMessage(e)
			if got, want := c.Message(Estimate(), m), Estimate().Count(m); got != want || want == 0 {
				t.Errorf("custom_message %s: %d, want %d (> 0)", e.ID, got, want)
			}
		}
	}
	if c.Entry(cc, nil) != 0 || c.Message(cc, nil) != 0 {
		t.Error("nil")
	}
}

func TestCacheBoundedLRU(t *testing.T) {
	t.Parallel()
	s := readCorpus(t, "05-compactions.jsonl")
	var msgs []*sessionio.Entry
	for _, e := range s.Entries {
		if e.Type == sessionio.TypeMessage {
			msgs = append(msgs, e)
		}
	}
	if len(msgs) < 20 {
		t.Fatalf("only %d messages", len(msgs))
	}
	cc := &countingCounter{Counter: Estimate()}
	c := NewCache(10)
	for _, e := range msgs {
		c.Entry(cc, e)
	}
	if c.Len() != 10 {
		t.Fatalf("len %d, want 10", c.Len())
	}
	// The 10 most recent are cached, the first one was evicted.
	before := cc.calls.Load()
	for _, e := range msgs[len(msgs)-10:] {
		c.Entry(cc, e)
	}
	if cc.calls.Load() != before {
		t.Errorf("recent entries were recounted")
	}
	c.Entry(cc, msgs[0])
	if cc.calls.Load() != before+1 {
		t.Errorf("evicted entry was not recounted")
	}
}

func TestCacheConcurrent(t *testing.T) {
	t.Parallel()
	s := readCorpus(t, "02-tools-parallel-errors-images.jsonl")
	c := NewCache(8)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				for _, e := range s.Entries {
					want := 0
					if e.Type == sessionio.TypeMessage {
						want = Estimate().Count(e.Message)
					}
					if got := c.Entry(Estimate(), e); got != want {
						t.Errorf("%s: %d, want %d", e.ID, got, want)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if c.Len() > 8 {
		t.Errorf("len %d over capacity", c.Len())
	}
}
