package pipeline

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/operator"
	"github.com/compactor-dev/compactor/wire"
)

// Dead letters an operator can act on: filters, retry of the original request (a new id,
// so it is not a duplicate), retry refused for a payload that is no job, delete.
func TestDLQListRetryDelete(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	var fail sync.Map
	h := &fakeHandler{before: func(ctx context.Context, job wire.Job, f string) error {
		if _, ok := fail.Load(job.SessionID); ok {
			return Permanent(errors.New("model refused the prompt"))
		}
		return nil
	}}
	b.run(b.service(b.config(h)))
	var sids []string
	for i := range 3 {
		rel := fmt.Sprintf("s%d.jsonl", i)
		sid, leaf := writeSession(t, b.dir, rel)
		fail.Store(sid, true)
		sids = append(sids, sid)
		r, err := fleetops.Enqueue(context.Background(), b.nc, wire.Job{Kind: wire.KindCompact, Store: "default", Path: rel, SessionID: sid, ExpectLeafID: leaf, Reason: "sweep"}, true, 20*time.Second)
		if err != nil || r.Event.Outcome != OutcomeFailed {
			t.Fatalf("job %d: %+v %v", i, r.Event, err)
		}
	}
	if _, err := b.js.Publish(context.Background(), "compactor.jobs.default.junk.compact", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, "4 dead letters", func() bool { return len(b.deadLetters()) == 4 })

	q, err := operator.OpenDLQ(context.Background(), b.nc)
	if err != nil {
		t.Fatal(err)
	}
	count := func(f operator.DeadLetterFilter) int {
		t.Helper()
		recs, err := q.List(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		return len(recs)
	}
	all, _ := q.List(context.Background(), operator.DeadLetterFilter{})
	for _, tc := range []struct {
		f    operator.DeadLetterFilter
		want int
	}{
		{operator.DeadLetterFilter{}, 4},
		{operator.DeadLetterFilter{Store: "default"}, 4},
		{operator.DeadLetterFilter{Store: "other"}, 0},
		{operator.DeadLetterFilter{SessionID: sids[1]}, 1},
		{operator.DeadLetterFilter{Store: "default", SessionID: sids[1]}, 1},
		{operator.DeadLetterFilter{Reason: "MODEL REFUSED"}, 3},
		{operator.DeadLetterFilter{Reason: "invalid job"}, 1},
		{operator.DeadLetterFilter{OlderThan: time.Hour}, 0},
		{operator.DeadLetterFilter{NewerThan: time.Hour}, 4},
		{operator.DeadLetterFilter{Seqs: []uint64{all[2].Seq}}, 1},
	} {
		if got := count(tc.f); got != tc.want {
			t.Errorf("filter %+v: %d dead letters, want %d", tc.f, got, tc.want)
		}
	}
	one, _ := q.List(context.Background(), operator.DeadLetterFilter{SessionID: sids[0]})
	if r := one[0]; r.Store != "default" || r.Path != "s0.jsonl" || r.Kind != wire.KindCompact || r.Deliveries != 1 || !strings.Contains(r.Error, "model refused") {
		t.Errorf("record %+v", r)
	}

	// The model is fixed: a retry compacts the session and removes its dead letter.
	for _, sid := range sids {
		fail.Delete(sid)
	}
	res := q.Retry(context.Background(), one, true, 20*time.Second)
	if len(res) != 1 || !res[0].Queued || res[0].Error != "" || res[0].Event == nil || res[0].Event.Outcome != OutcomeDone {
		t.Fatalf("retry: %+v", res)
	}
	orig, _ := wire.DecodeJob(one[0].Job)
	if res[0].JobID == orig.ID || !strings.Contains(res[0].JobID, ":retry-") {
		t.Errorf("retried job id %q: want a new one", res[0].JobID)
	}
	if n := countType(t, filepath.Join(b.dir, "s0.jsonl"), "compaction"); n != 1 {
		t.Errorf("%d compactions after retry", n)
	}
	if got := count(operator.DeadLetterFilter{}); got != 3 {
		t.Errorf("%d dead letters after one retry, want 3", got)
	}

	junk, _ := q.List(context.Background(), operator.DeadLetterFilter{Reason: "invalid job"})
	res = q.Retry(context.Background(), junk, false, 0)
	if res[0].Queued || !strings.Contains(res[0].Error, "purge it") {
		t.Errorf("retry of a payload that is no job: %+v", res[0])
	}
	if n, err := q.Delete(context.Background(), junk); n != 1 || err != nil {
		t.Errorf("delete: %d %v", n, err)
	}

	rest, _ := q.List(context.Background(), operator.DeadLetterFilter{})
	res = q.Retry(context.Background(), rest, false, 0)
	for _, r := range res {
		if !r.Queued || r.JobSeq == 0 {
			t.Errorf("retry %+v", r)
		}
	}
	waitfor.Until(t, "the other two sessions compacted", func() bool {
		return countType(t, filepath.Join(b.dir, "s1.jsonl"), "compaction") == 1 && countType(t, filepath.Join(b.dir, "s2.jsonl"), "compaction") == 1
	})
	if got := count(operator.DeadLetterFilter{}); got != 0 {
		t.Errorf("%d dead letters left", got)
	}
}
