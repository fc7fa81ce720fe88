package pipeline

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/agents"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/operator"
	"github.com/compactor-dev/compactor/sweep"
	"github.com/compactor-dev/compactor/wire"
)

// Records are trusted only within their store (foreign.go): what a store's key may write
// and names another store or session than the subject or key it came on is refused and
// counted, and nothing of the store it names is touched on its word. Each kind, written
// where the store's own keys may write it: a hook report (the prepared value it would
// delete stays), a bridge request and a prepared value (no bridge), a worker's beat (not
// counted as a worker of the store), a sweep record (not taken for its key's file), an
// owner record (claimed over), a final event (enqueue --wait waits for the real one) and a
// dead letter (dlq retry refuses it naming both stores; no job is published).
func TestForeignRecordsRefused(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	sid, leaf := writeSession(t, b.dir, "s.jsonl")
	release := make(chan struct{})
	var bridged atomic.Int32
	cfg := b.config(&fakeHandler{before: func(ctx context.Context, job wire.Job, file string) error {
		if job.Reason == "hold" {
			<-release
		}
		return nil
	}})
	cfg.Stores = []Store{{Name: "hostA", Dir: b.dir}}
	cfg.Bridger = agents.BridgerFunc(func(ctx context.Context, req wire.BridgeRequest, file string, prepared []byte) ([]byte, error) {
		bridged.Add(1)
		return prepared, nil
	})
	s := b.service(cfg)
	b.run(s)
	count := func(kind string) float64 { return counterValue(t, s.m.foreign.WithLabelValues("hostA", kind)) }

	// A hook report on hostA's subject that names hostB: the prepared value stays.
	if err := s.Prepared().Put(ctx, "hostA", sid, []byte(`{"v":1,"store":"hostA","sessionId":"`+sid+`"}`)); err != nil {
		t.Fatal(err)
	}
	rep, _ := json.Marshal(wire.HookReport{V: 1, Store: "hostB", SessionID: sid, Outcome: wire.HookHit})
	if err := b.nc.Publish(wire.HookSubject("hostA", sid), rep); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, "the foreign hook report counted", func() bool { return count(agents.ForeignHook) == 1 })
	if v, _ := s.Prepared().Get(ctx, "hostA", sid); v == nil {
		t.Error("a hook report naming another store deleted the prepared value")
	}

	// A bridge request naming hostB; then a prepared value (under hostA's key) naming hostB.
	ask := func(store string) wire.BridgeReply {
		req, _ := json.Marshal(wire.BridgeRequest{V: 1, Store: store, Path: "s.jsonl", SessionID: sid, LeafID: leaf, FirstKeptEntryID: leaf})
		m, err := b.nc.Request(wire.BridgeSubject("hostA", sid), req, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var r wire.BridgeReply
		_ = json.Unmarshal(m.Data, &r)
		return r
	}
	if r := ask("hostB"); !strings.Contains(r.Error, `names store "hostB"`) || count(agents.ForeignBridge) != 1 {
		t.Errorf("a bridge request naming hostB: %+v (counted %v)", r, count(agents.ForeignBridge))
	}
	if err := s.Prepared().Put(ctx, "hostA", sid, []byte(`{"v":1,"store":"hostB","sessionId":"`+sid+`"}`)); err != nil {
		t.Fatal(err)
	}
	if r := ask("hostA"); !strings.Contains(r.Error, `names store "hostB"`) || count(agents.ForeignPrepared) != 1 || bridged.Load() != 0 {
		t.Errorf("a prepared value naming hostB bridged: %+v (counted %v, bridges %d)", r, count(agents.ForeignPrepared), bridged.Load())
	}

	// A beat under hostA's key naming hostB: not one of hostA's workers.
	beat, _ := json.Marshal(fleetops.WorkerBeat{V: 1, Worker: "forger", Store: "hostB", At: time.Now().UTC(), JobVersions: []int{1, 2}})
	if _, err := s.res.workers.Put(ctx, fleetops.WorkerKey("hostA", "forger"), beat); err != nil {
		t.Fatal(err)
	}
	beats, foreign, err := fleetops.ReadBeats(ctx, s.res.workers, "hostA")
	if err != nil || len(foreign) != 1 {
		t.Fatalf("beats %v, foreign %v, %v", beats, foreign, err)
	}
	for _, bt := range beats {
		if bt.Worker == "forger" {
			t.Errorf("a beat naming hostB counted as hostA's worker: %+v", bt)
		}
	}

	// A sweep record under one file's key that names another path: not that file's.
	m, err := s.sweepMemo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(sweep.Record{V: 1, Path: "../hostB/x.jsonl", Size: 1, At: time.Now()})
	key := sweep.Key("hostA", "s.jsonl")
	if _, err := s.res.sweep.Put(ctx, key, rec); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, "the foreign sweep record counted", func() bool { return count(foreignSweep) == 1 })
	if _, ok := m.Record(key); ok {
		t.Error("a sweep record of another path taken for s.jsonl's")
	}

	// An owner record under hostA's key naming hostB: claimed over at the next beat.
	other, _ := json.Marshal(fleetops.OwnerRecord{V: fleetops.OwnerV, StoreIdentity: fleetops.StoreIdentity{Store: "hostB", Host: "elsewhere", Root: "/b", Marker: "zz"}})
	if _, err := s.res.workers.Put(ctx, fleetops.OwnerKey("hostA"), other); err != nil {
		t.Fatal(err)
	}
	if err := fleetops.CheckOwner(ctx, s.res.workers, s.ids["hostA"], true, func(err error) { s.foreign("hostA", foreignOwner, err) }); err != nil {
		t.Fatalf("an owner record naming hostB refused hostA's worker: %v", err)
	}
	if count(foreignOwner) != 1 {
		t.Errorf("the foreign owner record not counted")
	}

	// A final event on hostA's subject naming hostB, before the real one.
	job := wire.Job{Kind: wire.KindCompact, Store: "hostA", Path: "s.jsonl", SessionID: sid, ExpectLeafID: leaf, Reason: "hold", Force: true}
	job.Normalize(time.Now())
	done := make(chan fleetops.EnqueueResult, 1)
	go func() {
		r, err := fleetops.Enqueue(ctx, b.nc, job, true, time.Minute)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	var seq uint64
	waitfor.Until(t, "the held job running", func() bool {
		p, err := fleetops.DirectLast(ctx, b.nc, wire.StreamJobs, job.Subject())
		if err == nil {
			seq = p.Sequence
		}
		return err == nil && len(s.running.list()) == 1
	})
	forged, _ := json.Marshal(wire.Event{V: 1, JobID: job.ID, JobSeq: seq, JobRef: wire.JobRef{Store: "hostB", SessionID: sid, Kind: wire.KindCompact}, Tally: wire.Tally{Outcome: OutcomeDone, Reason: "forged"}})
	if err := b.nc.Publish(wire.JobEventSubject("hostA", sid, seq), forged); err != nil {
		t.Fatal(err)
	}
	// Flushed before the job is released: the forged event reaches the wait (and the
	// events stream) before the real one, which is published only after the release.
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	close(release)
	if r := <-done; r.Event == nil || r.Event.Reason == "forged" || r.Event.Store != "hostA" {
		t.Errorf("enqueue --wait: %+v", r.Event)
	}

	// A dead letter on hostA's subject holding hostB's job: refused, naming both, no job.
	hostBJob, _ := json.Marshal(wire.Job{V: 1, Kind: wire.KindCompact, Store: "hostB", Path: "x.jsonl", SessionID: sid, Instructions: "steer hostB", ID: "forged", RequestedAt: time.Now()})
	dl, _ := json.Marshal(wire.DeadLetter{V: 1, Subject: wire.JobSubject("hostB", sid, wire.KindCompact), Job: hostBJob, Reason: "failed", At: time.Now().UTC()})
	if _, err := b.js.Publish(ctx, wire.DLQSubject("hostA", sid), dl); err != nil {
		t.Fatal(err)
	}
	q, err := operator.OpenDLQ(ctx, b.nc)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := q.List(ctx, operator.DeadLetterFilter{Store: "hostA"})
	if err != nil || len(recs) != 1 {
		t.Fatalf("dead letters %v, %v", recs, err)
	}
	jobs := func() uint64 { return streamInfoOf(t, b.js, wire.StreamJobs).State.Msgs }
	before := jobs()
	res := q.Retry(ctx, recs, false, 0)
	if len(res) != 1 || res[0].Queued || !strings.Contains(res[0].Error, "store hostA's") || !strings.Contains(res[0].Error, "store hostB") ||
		!strings.Contains(res[0].Error, "nothing published") || jobs() != before {
		t.Fatalf("dlq retry of a forged dead letter: %+v (jobs %d, before %d)", res, jobs(), before)
	}
	t.Logf("refused: %s", res[0].Error)
}
