package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/operator"
	"github.com/compactor-dev/compactor/wire"
)

// The fleet view reads a store's queue as its consumers and stream hold it: the counts
// /metrics gives, the jobs by kind with the oldest's time, the queued jobs themselves, the
// running jobs from their leases, the store's pause, and the events as they come.
func TestFleetViewReadsTheQueue(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	release := make(chan struct{})
	started := make(chan string, 8)
	h := &fakeHandler{before: func(ctx context.Context, job wire.Job, file string) error {
		started <- job.SessionID
		<-release
		return nil
	}}
	cfg := b.config(h)
	cfg.Concurrency = 3
	s := b.service(cfg)
	b.run(s)
	released := false
	t.Cleanup(func() {
		if !released {
			close(release)
		}
	})
	var ids []string
	var jobs []wire.Job
	for i := range 3 {
		rel := "p/q" + string(rune('a'+i)) + ".jsonl"
		sid, leaf := writeSession(t, b.dir, rel)
		ids = append(ids, sid)
		jobs = append(jobs, wire.Job{Kind: wire.KindCompact, Store: "default", Path: rel, SessionID: sid, ExpectLeafID: leaf})
	}
	b.enqueue(jobs[0])
	b.enqueue(jobs[1])
	running := map[string]bool{<-started: true, <-started: true}
	ctx := context.Background()
	v, err := operator.OpenFleetView(ctx, []operator.FleetAccount{{Conn: b.nc}}, operator.FleetViewOptions{Events: true, DeadLetters: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	var sv operator.StoreView
	waitfor.Until(t, "the running jobs' leases and the queue", func() bool {
		if err := v.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		snap := v.Snapshot()
		if len(snap.Stores) != 1 {
			return false
		}
		sv = snap.Stores[0]
		return len(sv.Running) == 2 && sv.Queue.Pending == 0 && sv.Queue.InFlight == 2
	})
	for _, r := range sv.Running {
		if !running[r.SessionID] || r.Kind != wire.KindCompact || r.Worker != s.WorkerID() || r.Path == "" || r.Delivery != 1 {
			t.Errorf("running job %+v, want one of %v", r, running)
		}
	}
	if len(sv.Queue.Kinds) != 1 || sv.Queue.Kinds[0].Kind != wire.KindCompact || sv.Queue.Kinds[0].Jobs != 2 || sv.Queue.Oldest.IsZero() {
		t.Errorf("queue by kind: %+v", sv.Queue)
	}
	if len(sv.Workers) != 1 || sv.Workers[0].Worker != s.WorkerID() {
		t.Errorf("workers: %+v", sv.Workers)
	}
	if _, err := v.SetPaused(ctx, "default", true, "why", "test"); err != nil {
		t.Fatal(err)
	}
	if p := v.Snapshot().Stores[0].Paused; p == nil || p.Reason != "why" {
		t.Errorf("pause: %+v", p)
	}
	waitfor.Until(t, "the worker sees the pause", func() bool { return s.pausedNow("default") != nil })
	b.enqueue(jobs[2])
	q, err := v.QueuedJobs(ctx, "default", 50)
	if err != nil {
		t.Fatal(err)
	}
	if len(q) != 3 || !running[q[0].SessionID] || q[2].SessionID != ids[2] || q[0].Kind != wire.KindCompact || q[0].Seq >= q[2].Seq {
		t.Errorf("queued jobs: %+v", q)
	}
	if q, _ := v.QueuedJobs(ctx, "default", 1); len(q) != 1 {
		t.Errorf("queued jobs, limit 1: %d", len(q))
	}
	released = true
	close(release)
	waitfor.Until(t, "the held jobs' final events indexed", func() bool {
		n := 0
		for _, id := range ids {
			for _, ev := range v.Events().Session("default", id) {
				if ev.Final() {
					n++
				}
			}
		}
		if n > 2 {
			t.Fatalf("%d jobs ended: the one queued ran while the store was paused", n)
		}
		return n == 2
	})
	if err := v.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if q := v.Snapshot().Stores[0].Queue; q.Pending != 1 || q.InFlight != 0 {
		t.Errorf("after the held jobs, paused: %+v, want 1 pending", q)
	}
}

// The fleet view trusts an account's records for its own stores only (those of the
// operator's list, or without one, of the account's settings), and only when they name
// the store and session of their key or subject: a beat, a lease, a pause record, an event
// and a hook report under another store's name, or naming another than their key's, are
// left out and counted; the view of two accounts refuses a store listed in both.
func TestFleetViewTrustsAnAccountForItsStores(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	s := b.service(b.config(&fakeHandler{}))
	b.run(s)
	ctx := context.Background()
	for _, list := range [][]string{nil, {"default"}} {
		v, err := operator.OpenFleetView(ctx, []operator.FleetAccount{{Name: "acct", Conn: b.nc, Stores: list}}, operator.FleetViewOptions{Events: true, Hooks: true})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now().UTC()
		put := func(bucket, key string, v any) {
			raw, _ := json.Marshal(v)
			b.putRaw(bucket, key, string(raw))
		}
		put(wire.BucketWorkers, "other.w1", fleetops.WorkerBeat{V: 1, Worker: "w1", Store: "other", At: now})                           // a store not of the account
		put(wire.BucketWorkers, "default.w2", fleetops.WorkerBeat{V: 1, Worker: "w2", Store: "other", At: now})                         // another store than its key's
		put(wire.BucketLeases, "other."+wire.SessionToken("s1"), fleetops.LeaseRecord{V: 1, Worker: "w1", SessionID: "s1", Since: now}) // a store not of the account
		put(wire.BucketLeases, "default."+wire.SessionToken("s1"), fleetops.LeaseRecord{V: 1, Worker: "w1", SessionID: "s2", Since: now})
		put(wire.BucketSettings, fleetops.PauseKey("other"), fleetops.PauseRecord{V: 1, Store: "other", Paused: true, At: now})
		for subject, ev := range map[string]wire.Event{
			wire.JobEventSubject("other", "s1", 5):   {V: 1, JobSeq: 5, JobRef: wire.JobRef{Store: "other", SessionID: "s1"}, Tally: wire.Tally{Outcome: OutcomeDone}, At: now},
			wire.JobEventSubject("default", "s1", 5): {V: 1, JobSeq: 5, JobRef: wire.JobRef{Store: "default", SessionID: "s2"}, Tally: wire.Tally{Outcome: OutcomeDone}, At: now},
			wire.JobEventSubject("default", "s1", 6): {V: 1, JobSeq: 5, JobRef: wire.JobRef{Store: "default", SessionID: "s1"}, Tally: wire.Tally{Outcome: OutcomeDone}, At: now},
		} {
			raw, _ := json.Marshal(ev)
			if _, err := b.js.Publish(ctx, subject, raw); err != nil {
				t.Fatal(err)
			}
		}
		for subject, r := range map[string]wire.HookReport{wire.HookSubject("other", "s1"): {V: 1, Store: "other", SessionID: "s1", Outcome: wire.HookHit},
			wire.HookSubject("default", "s1"): {V: 1, Store: "default", SessionID: "s2", Outcome: wire.HookHit}} {
			raw, _ := json.Marshal(r)
			if err := b.nc.Publish(subject, raw); err != nil {
				t.Fatal(err)
			}
		}
		waitfor.Until(t, "every forged record left out", func() bool { return v.Snapshot().Accounts[0].LeftOut >= 10 })
		snap := v.Snapshot()
		if len(snap.Stores) != 1 || snap.Stores[0].Store != "default" || len(snap.Stores[0].Workers) != 1 || len(snap.Stores[0].Running) != 0 ||
			snap.Stores[0].Paused != nil || v.Events().Sessions() != 0 || len(v.Hooks().Recent(10)) != 0 {
			t.Errorf("list %v: a forged record is shown: %+v; %d sessions, %d hooks", list, snap, v.Events().Sessions(), len(v.Hooks().Recent(10)))
		}
		v.Close()
		for _, k := range []string{"other.w1", "default.w2", "other." + wire.SessionToken("s1"), "default." + wire.SessionToken("s1")} {
			_ = fleetops.OpenBucket(b.js, wire.BucketWorkers).Delete(ctx, k)
			_ = fleetops.OpenBucket(b.js, wire.BucketLeases).Delete(ctx, k)
		}
	}
	if _, err := operator.OpenFleetView(ctx, []operator.FleetAccount{{Name: "a", Conn: b.nc, Stores: []string{"default"}}, {Name: "b", Conn: b.nc, Stores: []string{"default"}}},
		operator.FleetViewOptions{}); err == nil || !strings.Contains(err.Error(), "in two accounts") {
		t.Errorf("a store in two accounts: %v", err)
	}
}

// A base job's lease (its session's key with ".base", and a slot's number for a job of a
// slot: leaseKeyOf) is a running job of its session like any other, not a record naming
// another session than its key's.
func TestFleetViewShowsABaseJobsLease(t *testing.T) {
	t.Parallel()
	for _, slot := range []int{0, 3} {
		t.Run(fmt.Sprint("slot ", slot), func(t *testing.T) { t.Parallel(); fleetViewShowsABaseJobsLease(t, slot) })
	}
}

func fleetViewShowsABaseJobsLease(t *testing.T, slot int) {
	b := newBundle(t)
	s := b.service(b.config(&fakeHandler{}))
	b.run(s)
	ctx := context.Background()
	v, err := operator.OpenFleetView(ctx, []operator.FleetAccount{{Name: "acct", Conn: b.nc}}, operator.FleetViewOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	job := wire.Job{Kind: wire.KindBase, Store: "default", SessionID: "s1", Path: "p/s1.jsonl", Slot: slot}
	raw, _ := json.Marshal(fleetops.LeaseRecord{V: fleetops.LeaseV, Worker: "w1", JobID: "j1", SessionID: "s1", Path: job.Path, Kind: wire.KindBase, Since: time.Now().UTC()})
	b.putRaw(wire.BucketLeases, leaseKeyOf("default", job), string(raw))
	var sv operator.StoreView
	waitfor.Until(t, "the base job's lease shown as running", func() bool {
		snap := v.Snapshot()
		if len(snap.Stores) != 1 || len(snap.Stores[0].Running) != 1 {
			return false
		}
		sv = snap.Stores[0]
		return true
	})
	if r := sv.Running[0]; r.Kind != wire.KindBase || r.SessionID != "s1" || r.Token != wire.SessionToken("s1") || r.Store != "default" {
		t.Errorf("running base job %+v", r)
	}
	if n := v.Snapshot().Accounts[0].LeftOut; n != 0 {
		t.Errorf("%d records left out, want 0", n)
	}
}
