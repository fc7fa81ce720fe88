package pipeline

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/wire"
)

// What happens at the limits of the jobs and events streams (docs/operations.md, "State
// that stays bounded"), with limits small enough to reach: the jobs stream full refuses an
// enqueue with the reason and the setting (nothing is queued, nothing is dropped); a job
// older than the jobs' age limit is removed without an answer; the events stream drops its
// oldest events and stays within its size.
func TestStreamLimits(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	sc := fleetops.SetupConfig{Stores: []string{"default"}, DuplicateWindow: time.Second, JobsMaxAge: 2 * time.Second,
		JobsMaxBytes: 4 << 10, EventsMaxBytes: 64 << 10}
	res, err := fleetops.Setup(ctx, b.nc, sc, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if f := res.Fleet; time.Duration(f.JobsMaxAge) != 2*time.Second || f.JobsMaxBytes != 4<<10 || f.EventsMaxBytes != 64<<10 || time.Duration(f.EventsMaxAge) != fleetops.DefaultEventsMaxAge {
		t.Errorf("fleet settings %+v, want the limits set up", f)
	}
	for name, want := range map[string][2]int64{wire.StreamJobs: {int64(2 * time.Second), 4 << 10}, wire.StreamEvents: {int64(fleetops.DefaultEventsMaxAge), 64 << 10}} {
		str, err := b.js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if c := str.CachedInfo().Config; int64(c.MaxAge) != want[0] || c.MaxBytes != want[1] {
			t.Errorf("%s: max age %s, max bytes %d; want %s, %d", name, c.MaxAge, c.MaxBytes, time.Duration(want[0]), want[1])
		}
	}

	// Jobs: no worker runs, so they stay queued until the stream is full.
	queued := 0
	var full error
	for i := range 100 {
		_, err := fleetops.Enqueue(ctx, b.nc, wire.Job{Kind: wire.KindCompact, Store: "default", Path: fmt.Sprintf("s%03d.jsonl", i), SessionID: fmt.Sprintf("sess-%03d", i)}, false, 5*time.Second)
		if err != nil {
			full = err
			break
		}
		queued++
	}
	t.Logf("%d jobs queued before the limit; then: %v", queued, full)
	if full == nil || !strings.Contains(full.Error(), "is full") || !strings.Contains(full.Error(), "--jobs-max-bytes") {
		t.Errorf("the enqueue past the jobs' size limit: %v, want a refusal naming the limit", full)
	}
	if queued == 0 || b.pending() != uint64(queued) {
		t.Errorf("%d jobs pending, want the %d queued before the limit", b.pending(), queued)
	}
	// The jobs' age limit removes them, unanswered.
	waitfor.Until(t, "the jobs older than the jobs' age limit removed", func() bool { return b.pending() == 0 })

	// Events: more than the limit holds; the oldest go, the stream stays within it.
	for i := range 400 {
		ev := wire.Event{V: 1, JobSeq: uint64(i + 1), JobRef: wire.JobRef{Store: "default", SessionID: fmt.Sprintf("sess-%03d", i%50), Kind: wire.KindCompact}, Tally: wire.Tally{Outcome: OutcomeDone, Reason: strings.Repeat("r", 200)}, At: time.Now()}
		if err := publishEvent(ctx, b.js, wire.JobSubject("default", ev.SessionID, wire.KindCompact), ev); err != nil {
			t.Fatal(err)
		}
	}
	str, err := b.js.Stream(ctx, wire.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := str.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("events: 400 published, %d kept in %d bytes (first seq %d)", info.State.Msgs, info.State.Bytes, info.State.FirstSeq)
	if info.State.Bytes > 64<<10 || info.State.Msgs >= 400 || info.State.FirstSeq == 1 {
		t.Errorf("events stream: %d messages, %d bytes, first seq %d; want the oldest dropped and at most %d bytes", info.State.Msgs, info.State.Bytes, info.State.FirstSeq, 64<<10)
	}
	if _, err := str.GetMsg(ctx, info.State.LastSeq); err != nil {
		t.Errorf("the newest event is gone: %v", err)
	}
}
