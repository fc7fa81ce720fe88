package worker

import (
	"testing"

	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/pipeline"
)

// An empty completion is a fault of the moment: the job is retried with backoff (not
// dead-lettered at its first attempt) and compacted by the next attempt.
func TestLiveEmptyCompletionIsRetried(t *testing.T) {
	t.Parallel()
	b := newLiveBundle(t, -1, nil, true)
	b.llm.Enqueue(fakellm.Behavior{Empty: true})
	file := b.session(t, "s.jsonl", "019ad9b0-0000-7000-8000-0000000e0e0e")
	r := b.enqueue(t, b.job(t, file))
	if r.Event.Outcome != pipeline.OutcomeDone || r.Event.Attempt != 2 {
		t.Fatalf("event %+v, want done on attempt 2", r.Event)
	}
	if n := len(entriesOf(t, file, "compaction")); n != 1 {
		t.Fatalf("%d compactions", n)
	}
	reqs := b.llm.Requests()
	if len(reqs) < 2 {
		t.Fatalf("%d LLM requests, want the empty one and a retry", len(reqs))
	}
}
