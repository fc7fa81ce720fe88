package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// baseJobFor is a base job for the session (the anchor's fields made up).
func baseJobFor(sid, leaf string) Job {
	return Job{Kind: KindBase, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: leaf, Cut: "cut-" + leaf, SummarySHA256: "sha-" + leaf}
}

// A base job names its compaction, and is written as version 2, which a worker that does
// not know the kind hands back (versions.go); ids of the other kinds are as they were.
func TestBaseJobValidation(t *testing.T) {
	t.Parallel()
	j := baseJobFor("s1", "l1")
	j.Normalize(time.Now())
	if err := j.Validate(); err != nil || j.Subject() != "compactor.jobs.default.s1.base" || j.V != BaseJobVersion {
		t.Fatalf("base job: %v, subject %s, v%d", err, j.Subject(), j.V)
	}
	for _, f := range []func(*Job){func(j *Job) { j.ExpectLeafID = "" }, func(j *Job) { j.Cut = "" }, func(j *Job) { j.SummarySHA256 = "" }} {
		k := baseJobFor("s1", "l1")
		f(&k)
		if err := k.Validate(); err == nil {
			t.Errorf("a base job without its compaction's name was accepted: %+v", k)
		}
	}
	other := baseJobFor("s1", "l1")
	other.SummarySHA256 = "another extract"
	same := baseJobFor("s1", "l1")
	if other.MsgID() == same.MsgID() {
		t.Error("two bases for different compactions have one id")
	}
	// The id of a compact job is what it was before base jobs (pinned).
	c := Job{Kind: KindCompact, Store: "default", Path: "p.jsonl", SessionID: "s1", ExpectLeafID: "l1"}
	if got := c.MsgID(); got != "compact:s1:a48e95be5e327c2805e8a8f7" {
		t.Errorf("compact job id %s changed", got)
	}
}

// Follow queues a job even when the session's job of that kind is pending: it waits for
// that one to end rather than being refused (the queue keeps one per session and kind).
func TestFollowWaitsForThePendingJob(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	sid, leaf := writeSession(t, b.dir, "s.jsonl")
	release := make(chan struct{})
	var first atomic.Bool
	var ended atomic.Bool
	var ran sync.Map
	h := &fakeHandler{before: func(ctx context.Context, job Job, file string) error {
		ran.Store(job.ExpectLeafID, true)
		if job.ExpectLeafID == leaf && first.CompareAndSwap(false, true) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			ended.Store(true)
		}
		return nil
	}}
	s := b.service(b.config(h))
	b.run(s)
	ctx := context.Background()
	if _, err := s.Follow(ctx, baseJobFor(sid, leaf)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the first job running", func() bool { _, ok := ran.Load(leaf); return ok })
	done := make(chan EnqueueResult, 1)
	go func() {
		r, err := s.Follow(ctx, baseJobFor(sid, "l2"))
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	// Published directly, the second job is refused while the first one is pending.
	j := baseJobFor(sid, "l2")
	if r, err := publishJob(ctx, s.res.js, &j); err != nil || !r.AlreadyQueued || !r.Other {
		t.Fatalf("the second job was not refused while the first was pending: %+v %v", r, err)
	}
	close(release)
	r := <-done
	if !ended.Load() || r.AlreadyQueued || r.Seq == 0 {
		t.Fatalf("Follow returned %+v before the pending job ended (%v)", r, ended.Load())
	}
	eventually(t, 10*time.Second, "the followed job run", func() bool { _, ok := ran.Load("l2"); return ok })
}

// Work deferred past a bridge's reply (AfterReply) runs after the reply is sent and holds no
// bridge's place: more requests than a worker bridges at once are all answered while it
// runs.
func TestAfterReplyRunsPastTheReply(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	sid, _ := writeSession(t, b.dir, "s.jsonl")
	release := make(chan struct{})
	var afters atomic.Int32
	var done atomic.Int32
	cfg := b.config(&fakeHandler{})
	cfg.Bridger = BridgerFunc(func(ctx context.Context, req BridgeRequest, file string, prepared []byte) ([]byte, error) {
		AfterReply(ctx, func(ctx context.Context) {
			afters.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
			}
			done.Add(1)
		})
		return []byte(`{"v":1}`), nil
	})
	s := b.service(cfg)
	b.run(s)
	if err := s.Prepared().Put(context.Background(), "default", sid, []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	n := 2 * maxBridges
	for i := range n {
		req, _ := json.Marshal(BridgeRequest{V: 1, Store: "default", Path: "s.jsonl", SessionID: sid, FirstKeptEntryID: fmt.Sprint("k", i), Extract: true})
		msg, err := b.nc.Request(BridgeSubject("default", sid), req, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep BridgeReply
		if err := json.Unmarshal(msg.Data, &rep); err != nil || rep.Error != "" {
			t.Fatalf("request %d: %s (%d deferred running)", i, msg.Data, afters.Load())
		}
	}
	if done.Load() != 0 {
		t.Fatal("deferred work ended before it was released")
	}
	eventually(t, 10*time.Second, "every deferred function running", func() bool { return afters.Load() == int32(n) })
	close(release)
	eventually(t, 10*time.Second, "every deferred function done", func() bool { return done.Load() == int32(n) })
	// Outside a bridge request, AfterReply runs its function at once.
	ran := false
	AfterReply(context.Background(), func(context.Context) { ran = true })
	if !ran {
		t.Fatal("AfterReply outside a bridge did not run its function")
	}
}

// A session's base lives beside its preparation: it is not deleted when a hook reports that
// the preparation was used, and concurrent updates each see the other's value.
func TestBaseStore(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	sid, _ := writeSession(t, b.dir, "s.jsonl")
	s := b.service(b.config(&fakeHandler{}))
	b.run(s)
	ctx := context.Background()
	st := s.Prepared()
	if v, err := st.GetBase(ctx, "default", sid); err != nil || v != nil {
		t.Fatalf("no base yet: %s %v", v, err)
	}
	var wg sync.WaitGroup
	const writers = 6
	for i := range writers {
		wg.Go(func() {
			err := st.UpdateBase(ctx, "default", sid, func(cur []byte) ([]byte, error) {
				return append(append([]byte{}, cur...), byte('a'+i)), nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	v, err := st.GetBase(ctx, "default", sid)
	if err != nil || len(v) != writers {
		t.Fatalf("after %d concurrent updates: %q %v", writers, v, err)
	}
	for i := range writers {
		if !strings.ContainsRune(string(v), rune('a'+i)) {
			t.Fatalf("update %d lost: %q", i, v)
		}
	}
	// f leaving the base as it is writes nothing.
	if err := st.UpdateBase(ctx, "default", sid, func([]byte) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, "default", sid, []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	rep, _ := json.Marshal(HookReport{V: 1, Store: "default", SessionID: sid, Outcome: HookHit, LatencyMs: 3})
	if err := b.nc.Publish(HookSubject("default", sid), rep); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the used preparation deleted", func() bool { p, err := st.Get(ctx, "default", sid); return err == nil && p == nil })
	if v2, err := st.GetBase(ctx, "default", sid); err != nil || string(v2) != string(v) {
		t.Fatalf("the base after the hook report: %q %v", v2, err)
	}
}

// A base job has a lease of its own: it runs while a preparation of its session runs (a
// lease taken behind another waits for the holder's whole remaining time), and two base
// jobs of a session still run one at a time.
func TestBaseJobBesidePreparation(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	sid, leaf := writeSession(t, b.dir, "s.jsonl")
	release := make(chan struct{})
	var baseRan atomic.Bool
	h := &fakeHandler{before: func(ctx context.Context, job Job, file string) error {
		switch job.Kind {
		case KindPrepare:
			select {
			case <-release:
			case <-ctx.Done():
			}
		case KindBase:
			baseRan.Store(true)
		}
		return nil
	}}
	s := b.service(b.config(h))
	b.run(s)
	ctx := context.Background()
	if _, err := Enqueue(ctx, b.nc, Job{Kind: KindPrepare, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: leaf}, false, 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the preparation running", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.active[sid] == 1
	})
	if _, err := s.Follow(ctx, baseJobFor(sid, leaf)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the base job run while the preparation holds the session", baseRan.Load)
	close(release)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.maxActive > 2 {
		t.Fatalf("%d jobs of the session at once", h.maxActive)
	}
}
