package pipeline

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/wire"
)

// Pausing a store: its worker finishes the job it holds, takes no other while paused (the
// queue keeps them), and says so in /readyz (still ready: a pause is no fault), /metrics
// and its beat; resuming drains the queue.
func TestPauseHoldsTheQueueAndResumeDrains(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	release := make(chan struct{})
	first := make(chan string, 1)
	h := &fakeHandler{before: func(ctx context.Context, job wire.Job, file string) error {
		select {
		case first <- job.SessionID: // the first job is held until released
			<-release
		default:
		}
		return nil
	}}
	cfg := b.config(h)
	cfg.MetricsAddr = "127.0.0.1:0"
	s := b.service(cfg)
	b.run(s)
	var jobs []wire.Job
	for i := range 4 {
		sid, leaf := writeSession(t, b.dir, "p/s"+string(rune('a'+i))+".jsonl")
		jobs = append(jobs, wire.Job{Kind: wire.KindCompact, Store: "default", Path: "p/s" + string(rune('a'+i)) + ".jsonl", SessionID: sid, ExpectLeafID: leaf})
	}
	b.enqueue(jobs[0])
	held := <-first

	ctx := context.Background()
	t0 := time.Now()
	if _, err := fleetops.SetPaused(ctx, b.nc, "default", true, "incident 42", "the test"); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, "the worker sees the pause", func() bool { return s.pausedNow("default") != nil })
	t.Logf("pause seen by the worker %s after it was written", time.Since(t0).Round(time.Millisecond))
	for _, j := range jobs[1:] {
		b.enqueue(j)
	}
	// The fetch loop goes round several times while paused: nothing more is taken.
	turns := s.pauses.held.Load()
	waitfor.Until(t, "three turns of the paused fetch loop", func() bool { return s.pauses.held.Load() >= turns+3 })
	if calls, _ := h.stats(); calls != 1 {
		t.Fatalf("%d jobs handled while paused, want only the one held before", calls)
	}
	if n := b.pending(); n != 4 {
		t.Fatalf("%d jobs in the queue while paused, want the one held and the 3 enqueued", n)
	}
	code, body := get(t, s, "/readyz")
	if code != 200 || !strings.Contains(body, "store default: paused since") || !strings.Contains(body, "incident 42") {
		t.Errorf("/readyz %d while paused:\n%s", code, body)
	}
	if _, body := get(t, s, "/metrics"); !strings.Contains(body, `compactor_store_paused{store="default"} 1`) {
		t.Error("/metrics does not say the store is paused")
	}
	waitfor.Until(t, "the worker's beat says paused", func() bool {
		beats, _, err := fleetops.Workers(ctx, b.nc)
		return err == nil && len(beats) == 1 && beats[0].Paused
	})

	// The job held finishes while paused.
	close(release)
	waitfor.Until(t, "the held job's event", func() bool {
		for _, ev := range b.events() {
			if ev.SessionID == held && ev.Final() {
				return true
			}
		}
		return false
	})
	if calls, _ := h.stats(); calls != 1 {
		t.Fatalf("%d jobs handled while paused, want 1", calls)
	}

	if _, err := fleetops.SetPaused(ctx, b.nc, "default", false, "", "the test"); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, "every job done after the resume", func() bool {
		done := 0
		for _, ev := range b.events() {
			if ev.Outcome == OutcomeDone {
				done++
			}
		}
		return done == 4
	})
	if _, body := get(t, s, "/metrics"); !strings.Contains(body, `compactor_store_paused{store="default"} 0`) {
		t.Error("/metrics still says the store is paused")
	}
	if r, err := fleetops.ReadPaused(ctx, b.nc, "default"); err != nil || r == nil || r.Paused {
		t.Errorf("pause record after resume: %+v, %v", r, err)
	}
}

// The fetch loop notices a pause within pauseCheckEvery and one fetch's wait: well
// within the 5 s an operator is promised (docs/operations.md).
func TestPauseNoticedWithinFiveSeconds(t *testing.T) {
	if bound := pauseCheckEvery + fetchWait; bound >= 5*time.Second {
		t.Fatalf("a pause is noticed within %s, more than 5 s", bound)
	}
}
