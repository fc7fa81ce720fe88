package pipeline

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/sweep"
	"github.com/compactor-dev/compactor/wire"
)

// fingerprinted is leafAssessor with settings that a test can change.
type fingerprinted struct {
	sweep.Assessor
	fp atomic.Value
}

func (f *fingerprinted) SettingsFingerprint() string { return f.fp.Load().(string) }

// sweepAndWait sweeps and waits until no job is left queued or running.
func sweepAndWait(t *testing.T, b *bundle, s *Service) sweep.Stats {
	t.Helper()
	st, err := s.Sweep(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, "the queue to drain", func() bool { return b.pending() == 0 && s.running.count() == 0 })
	return st
}

// A session whose job was dead-lettered, or skipped because the session was busy, is
// left alone by sweeps while its backoff runs, then enqueued again although its file did
// not change; the backoff doubles per miss; a success clears it. A change of the settings
// that decide the budget makes every unchanged file be assessed again.
func TestSweepRetriesAfterBackoff(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	failFile := filepath.Join(b.dir, "fail.jsonl")
	busyFile := filepath.Join(b.dir, "busy.jsonl")
	writeSession(t, b.dir, "fail.jsonl")
	writeSession(t, b.dir, "busy.jsonl")
	var failing, busy atomic.Bool
	failing.Store(true)
	busy.Store(true)
	h := &fakeHandler{before: func(ctx context.Context, job wire.Job, file string) error {
		switch {
		case file == failFile && failing.Load():
			return Permanent(errors.New("the endpoint is down"))
		case file == busyFile && busy.Load():
			return SkipBusy("turn in progress: the last assistant message asks for a tool")
		}
		return nil
	}}
	const base = 1500 * time.Millisecond
	cfg := b.config(h)
	as := &fingerprinted{Assessor: leafAssessor}
	as.fp.Store("w0")
	cfg.Assessor = as
	cfg.SweepRetryBase, cfg.SweepRetryMax = base, 10*base
	clock := newFakeClock()
	cfg.sweepClock = clock.now
	s := b.service(cfg)
	b.run(s)

	st := sweepAndWait(t, b, s)
	if st.Enqueued != 2 {
		t.Fatalf("first sweep: %+v", st)
	}
	t0 := clock.now()
	if n := len(b.deadLetters()); n != 1 {
		t.Fatalf("%d dead letters, want 1", n)
	}
	rec := func(rel string) sweep.Record {
		r, _ := s.memo.Record(sweep.Key("default", rel))
		return r
	}
	waitfor.Until(t, "the outcomes noted in the memo", func() bool {
		return rec("fail.jsonl").Misses == 1 && rec("busy.jsonl").Misses == 1
	})
	if r := rec("fail.jsonl"); r.LastOutcome != "failed" || r.RetryAt.Before(t0.Add(base-time.Second)) {
		t.Errorf("failed record: %+v", r)
	}
	if r := rec("busy.jsonl"); r.LastOutcome != "busy" {
		t.Errorf("busy record: %+v", r)
	}

	// Within the backoff: unchanged.
	if st := sweepAndWait(t, b, s); st.Unchanged != 2 || st.Enqueued != 0 {
		t.Fatalf("sweep within the backoff: %+v", st)
	}
	// After it: both enqueued again; both miss again, and the backoff doubles.
	clock.set(t0.Add(base + 200*time.Millisecond))
	st = sweepAndWait(t, b, s)
	t1 := clock.now()
	if st.Retried != 2 || st.Enqueued != 2 {
		t.Fatalf("sweep after the backoff: %+v", st)
	}
	waitfor.Until(t, "the second misses noted", func() bool {
		return rec("fail.jsonl").Misses == 2 && rec("busy.jsonl").Misses == 2
	})
	if r := rec("busy.jsonl"); r.RetryAt.Before(t1.Add(2*base - time.Second)) {
		t.Errorf("second backoff not doubled: retry at %s, %s after the sweep", r.RetryAt, r.RetryAt.Sub(t1))
	}
	if n := len(b.deadLetters()); n != 2 {
		t.Errorf("%d dead letters after the retry, want 2", n)
	}
	clock.set(t1.Add(base + 200*time.Millisecond))
	if st := sweepAndWait(t, b, s); st.Unchanged != 2 || st.Enqueued != 0 {
		t.Fatalf("sweep within the doubled backoff: %+v", st)
	}

	// The endpoint recovers and the agent finishes its turn: the next retry compacts both.
	failing.Store(false)
	busy.Store(false)
	clock.set(t1.Add(2*base + 200*time.Millisecond))
	if st := sweepAndWait(t, b, s); st.Retried != 2 || st.Enqueued != 2 {
		t.Fatalf("sweep after the doubled backoff: %+v", st)
	}
	for _, f := range []string{failFile, busyFile} {
		if n := countType(t, f, "compaction"); n != 1 {
			t.Errorf("%s: %d compactions, want 1", f, n)
		}
	}
	waitfor.Until(t, "the misses cleared", func() bool {
		return rec("fail.jsonl").Misses == 0 && rec("busy.jsonl").Misses == 0
	})
	// Compacted files changed: assessed once (not over budget), then unchanged for good.
	if st := sweepAndWait(t, b, s); st.Assessed != 2 || st.Enqueued != 0 {
		t.Fatalf("sweep after the compactions: %+v", st)
	}
	if st := sweepAndWait(t, b, s); st.Unchanged != 2 {
		t.Fatalf("sweep after that: %+v", st)
	}

	// New settings: every unchanged file is assessed again, once.
	as.fp.Store("w1")
	if st := sweepAndWait(t, b, s); st.Resettled != 2 || st.Assessed != 2 {
		t.Fatalf("sweep with new settings: %+v", st)
	}
	if st := sweepAndWait(t, b, s); st.Unchanged != 2 {
		t.Fatalf("second sweep with new settings: %+v", st)
	}
}

// A sweep of unchanged files asks NATS nothing per file: the memo is in memory, loaded
// once by a watcher. A second service (another process) loads the same memo at its first
// sweep and also finds everything unchanged.
func TestSweepUnchangedWithoutRoundTrips(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	const n = 300
	for i := range n {
		writeSession(t, b.dir, fmt.Sprintf("sessions/--p%d--/s%03d.jsonl", i%7, i))
	}
	cfg := b.config(&fakeHandler{})
	cfg.Assessor = sweep.AssessorFunc(func(ctx context.Context, file string) (sweep.Assessment, error) {
		a, err := leafAssessor(ctx, file)
		a.OverBudget = false
		return a, err
	})
	s := b.service(cfg)
	if st, err := s.Sweep(context.Background(), nil); err != nil || st.Assessed != n {
		t.Fatalf("first sweep: %+v %v", st, err)
	}
	before := s.Conn().Stats()
	st, err := s.Sweep(context.Background(), nil)
	if err != nil || st.Unchanged != n {
		t.Fatalf("second sweep: %+v %v", st, err)
	}
	after := s.Conn().Stats()
	if sent := after.OutMsgs - before.OutMsgs; sent > 5 {
		t.Errorf("a sweep of %d unchanged files sent %d NATS messages, want none per file", n, sent)
	}
	other := b.service(cfg)
	if st, err := other.Sweep(context.Background(), nil); err != nil || st.Unchanged != n {
		t.Fatalf("another process's first sweep: %+v %v", st, err)
	}
}

// fakeClock is a sweep clock that moves only when the test moves it, so that a backoff is
// passed by setting the time rather than by waiting for it (and a slow machine cannot
// pass it by accident).
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}
