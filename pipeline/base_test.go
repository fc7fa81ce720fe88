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

	"github.com/compactor-dev/compactor/agents"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/wire"
)

// baseJobFor is a base job for the session (the anchor's fields made up).
func baseJobFor(sid, leaf string) wire.Job {
	return wire.Job{Kind: wire.KindBase, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: leaf, Cut: "cut-" + leaf, SummarySHA256: "sha-" + leaf}
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
	h := &fakeHandler{before: func(ctx context.Context, job wire.Job, file string) error {
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
	waitfor.Until(t, "the first job running", func() bool { _, ok := ran.Load(leaf); return ok })
	done := make(chan fleetops.EnqueueResult, 1)
	go func() {
		r, err := s.Follow(ctx, baseJobFor(sid, "l2"))
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	// Published directly, the second job is refused while the first one is pending.
	j := baseJobFor(sid, "l2")
	if r, err := fleetops.PublishJob(ctx, s.res.js, &j); err != nil || !r.AlreadyQueued || !r.Other {
		t.Fatalf("the second job was not refused while the first was pending: %+v %v", r, err)
	}
	close(release)
	r := <-done
	if !ended.Load() || r.AlreadyQueued || r.Seq == 0 {
		t.Fatalf("Follow returned %+v before the pending job ended (%v)", r, ended.Load())
	}
	waitfor.Until(t, "the followed job run", func() bool { _, ok := ran.Load("l2"); return ok })
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
	cfg.Bridger = agents.BridgerFunc(func(ctx context.Context, req wire.BridgeRequest, file string, prepared []byte) ([]byte, error) {
		agents.AfterReply(ctx, func(ctx context.Context) {
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
	n := 2 * agents.MaxBridges
	for i := range n {
		req, _ := json.Marshal(wire.BridgeRequest{V: 1, Store: "default", Path: "s.jsonl", SessionID: sid, FirstKeptEntryID: fmt.Sprint("k", i), Extract: true})
		msg, err := b.nc.Request(wire.BridgeSubject("default", sid), req, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep wire.BridgeReply
		if err := json.Unmarshal(msg.Data, &rep); err != nil || rep.Error != "" {
			t.Fatalf("request %d: %s (%d deferred running)", i, msg.Data, afters.Load())
		}
	}
	if done.Load() != 0 {
		t.Fatal("deferred work ended before it was released")
	}
	waitfor.Until(t, "every deferred function running", func() bool { return afters.Load() == int32(n) })
	close(release)
	waitfor.Until(t, "every deferred function done", func() bool { return done.Load() == int32(n) })
	// Outside a bridge request, AfterReply runs its function at once.
	ran := false
	agents.AfterReply(context.Background(), func(context.Context) { ran = true })
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
	rep, _ := json.Marshal(wire.HookReport{V: 1, Store: "default", SessionID: sid, Outcome: wire.HookHit, LatencyMs: 3})
	if err := b.nc.Publish(wire.HookSubject("default", sid), rep); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, "the used preparation deleted", func() bool { p, err := st.Get(ctx, "default", sid); return err == nil && p == nil })
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
	h := &fakeHandler{before: func(ctx context.Context, job wire.Job, file string) error {
		switch job.Kind {
		case wire.KindPrepare:
			select {
			case <-release:
			case <-ctx.Done():
			}
		case wire.KindBase:
			baseRan.Store(true)
		}
		return nil
	}}
	s := b.service(b.config(h))
	b.run(s)
	ctx := context.Background()
	if _, err := fleetops.Enqueue(ctx, b.nc, wire.Job{Kind: wire.KindPrepare, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: leaf}, false, 0); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, "the preparation running", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.active[sid] == 1
	})
	if _, err := s.Follow(ctx, baseJobFor(sid, leaf)); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, "the base job run while the preparation holds the session", baseRan.Load)
	close(release)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.maxActive > 2 {
		t.Fatalf("%d jobs of the session at once", h.maxActive)
	}
}
