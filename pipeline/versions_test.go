package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// counterValue reads a counter of a Service's metrics.
func counterValue(t testing.TB, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// versionedHandler records which worker worked which job version, then works the job
// like fakeHandler (one entry appended, idempotent by the leaf).
type versionedHandler struct {
	worker   string
	versions []int
	log      *workLog
}

type workLog struct {
	mu     sync.Mutex
	byJob  map[string][]string // job id → the workers that ran it
	wrongV []string            // jobs a worker ran without understanding their version
}

func (h *versionedHandler) Handle(ctx context.Context, job wire.Job, file string) (wire.Result, error) {
	h.log.mu.Lock()
	if h.log.byJob == nil {
		h.log.byJob = map[string][]string{}
	}
	h.log.byJob[job.ID] = append(h.log.byJob[job.ID], h.worker)
	if !slices.Contains(h.versions, job.V) {
		h.log.wrongV = append(h.log.wrongV, fmt.Sprintf("%s (v%d) on %s", job.ID, job.V, h.worker))
	}
	h.log.mu.Unlock()
	return applyFake(job, file)
}

// publishRaw publishes a job payload as a client of another version would: v is written
// as given (the new version's enqueuer writes v: 2), with its message id.
func (b *bundle) publishRaw(job wire.Job, v int) {
	b.t.Helper()
	job.Normalize(time.Now())
	job.V = v
	data, err := json.Marshal(job)
	if err != nil {
		b.t.Fatal(err)
	}
	if _, err := b.js.Publish(context.Background(), job.Subject(), data, jetstream.WithMsgID(job.ID)); err != nil {
		b.t.Fatal(err)
	}
}

// The rolling upgrade of the issue: workers of the current version (jobs v1) and of a
// version that writes v2 jobs on one NATS; 100 jobs of each; no job dead-lettered, every
// job done once, by a worker that understands its version.
//
// What is simulated: "the new version" is this code configured to work versions {1, 2}
// (Config.JobVersions), and its enqueuer publishes the v1 payload of a compact job with v: 2.
// The old worker is this code configured as a release before v2 (versions {1}), so what is
// tested is the routing: an old worker that meets a v2 job hands it back, and the job
// reaches the new worker through the store's one consumer (base jobs are v2: this is how a
// fleet in a rolling upgrade keeps them from workers that do not know the kind).
func TestRollingUpgradeRoutesJobsByVersion(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	wl := &workLog{}
	oldCfg := b.config(nil)
	oldCfg.Handler = &versionedHandler{worker: "old", versions: []int{1}, log: wl}
	oldCfg.JobVersions = []int{1}
	oldCfg.Version = "v0.9.0"
	newCfg := b.config(nil)
	newCfg.Handler = &versionedHandler{worker: "new", versions: []int{1, 2}, log: wl}
	newCfg.JobVersions = []int{1, 2}
	newCfg.Version = "v0.10.0"
	oldSvc := b.service(oldCfg)

	type queued struct {
		id, file string
		v        int
	}
	var jobs []queued
	enqueue := func(i, v int) {
		rel := fmt.Sprintf("v%d/s%03d.jsonl", v, i)
		sid, leaf := writeSession(t, b.dir, rel)
		j := wire.Job{Kind: wire.KindCompact, Store: "default", Path: rel, SessionID: sid, ExpectLeafID: leaf}
		if v == 1 {
			j.ID = b.enqueue(j).JobID
		} else {
			j.Normalize(time.Now())
			b.publishRaw(j, v)
		}
		jobs = append(jobs, queued{id: j.ID, file: filepath.Join(b.dir, rel), v: v})
	}
	// The old fleet works v1 jobs alone at first (50 of the 100).
	b.run(oldSvc)
	for i := range 50 {
		enqueue(i, 1)
	}
	// The new version starts beside it, and its enqueuers write v2 jobs.
	newSvc := b.service(newCfg)
	b.run(newSvc)
	waitfor.Until(t, "both workers' beats", func() bool {
		beats, _, err := fleetops.ReadBeats(context.Background(), newSvc.res.workers, "default")
		return err == nil && len(beats) == 2
	})
	for i := range 100 { // 100 v2 jobs and the other 50 v1 jobs, interleaved
		enqueue(i, 2)
		if i%2 == 0 {
			enqueue(50+i/2, 1)
		}
	}
	waitfor.Until(t, "every job's final event", func() bool {
		final := 0
		for _, ev := range b.events() {
			if ev.Final() {
				final++
			}
		}
		return final >= len(jobs)
	})

	wl.mu.Lock()
	defer wl.mu.Unlock()
	ranBy := map[string]int{}
	for _, q := range jobs {
		ws := wl.byJob[q.id]
		if len(ws) != 1 {
			t.Errorf("job %s (v%d) ran %d times: %v", q.id, q.v, len(ws), ws)
			continue
		}
		ranBy[fmt.Sprintf("v%d on %s", q.v, ws[0])]++
		if n := countType(t, q.file, "compaction"); n != 1 {
			t.Errorf("%s: %d compactions", q.file, n)
		}
	}
	if len(wl.wrongV) > 0 {
		t.Errorf("jobs run by a worker that does not understand their version: %v", wl.wrongV)
	}
	if dl := b.deadLetters(); len(dl) > 0 {
		t.Errorf("%d dead letters, want 0: first %+v", len(dl), dl[0])
	}
	for _, ev := range b.events() {
		if ev.Final() && ev.Outcome != OutcomeDone {
			t.Errorf("job %s ended %s: %s", ev.JobID, ev.Outcome, ev.Reason)
		}
	}
	handedBack := counterValue(t, oldSvc.m.handedBack.WithLabelValues("default", handBackVersion))
	t.Logf("jobs: %d v1, %d v2; ran: %v; v2 deliveries handed back by the old worker: %.0f; dead letters: %d",
		100, 100, ranBy, handedBack, len(b.deadLetters()))
	if ranBy["v2 on new"] != 100 || ranBy["v1 on old"]+ranBy["v1 on new"] != 100 {
		t.Errorf("ran: %v, want every v2 job on the new worker and every v1 job once", ranBy)
	}
	if handedBack == 0 {
		t.Error("the old worker handed back no v2 job: the routing was not exercised")
	}
}

// A job that waits for a version nobody works spends deliveries past the bound of its
// deliveries, keeps its message (its sequence), is never dead-lettered, and runs once a
// worker that understands it starts. Here --max-deliver 1 makes the bound 51 deliveries,
// and the job, of a version this worker cannot read, has no id (its hand-backs are counted
// under the key its workers use all the same).
func TestUnknownVersionWaitsPastTheDeliveryBound(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	wl := &workLog{}
	cfg := b.config(&versionedHandler{worker: "old", versions: []int{1}, log: wl})
	cfg.JobVersions = []int{1}
	cfg.MaxDeliver = 1
	cfg.versionWaitAlone = 10 * time.Millisecond
	old := b.service(cfg)
	b.run(old)
	sid, leaf := writeSession(t, b.dir, "s.jsonl")
	j := wire.Job{V: 2, Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: leaf, RequestedAt: time.Now().UTC()}
	payload, _ := json.Marshal(j)
	var raw map[string]any
	_ = json.Unmarshal(payload, &raw)
	delete(raw, "id")
	payload, _ = json.Marshal(raw)
	if _, err := b.js.Publish(context.Background(), j.Subject(), payload); err != nil {
		t.Fatal(err)
	}
	pending, err := fleetops.DirectLast(context.Background(), b.nc, wire.StreamJobs, j.Subject())
	if err != nil {
		t.Fatal(err)
	}
	bound := cfg.MaxDeliver + fleetops.MaxFreeDeliveries
	waitfor.Until(t, "the job handed back past its deliveries", func() bool {
		return counterValue(t, old.m.handedBack.WithLabelValues("default", handBackVersion)) > float64(bound)
	})
	if m, err := fleetops.DirectLast(context.Background(), b.nc, wire.StreamJobs, j.Subject()); err != nil || m.Sequence != pending.Sequence {
		t.Fatalf("the waiting job's message: %v %v, want the one published (seq %d)", m, err, pending.Sequence)
	}
	if dl := b.deadLetters(); len(dl) > 0 {
		t.Fatalf("dead-lettered while waiting: %+v", dl[0])
	}
	newCfg := b.config(&versionedHandler{worker: "new", versions: []int{1, 2}, log: wl})
	newCfg.JobVersions = []int{1, 2}
	b.run(b.service(newCfg))
	waitfor.Until(t, "the job done by the new worker", func() bool {
		return countType(t, filepath.Join(b.dir, "s.jsonl"), "compaction") == 1
	})
	wl.mu.Lock()
	defer wl.mu.Unlock()
	if ws := wl.byJob[j.ID]; len(ws) != 1 || ws[0] != "new" || len(wl.wrongV) > 0 {
		t.Errorf("ran by %v (wrong version: %v)", ws, wl.wrongV)
	}
	for _, ev := range b.events() {
		if ev.Final() && (ev.JobSeq != pending.Sequence || ev.Outcome != OutcomeDone) {
			t.Errorf("final event %+v, want done for the message published (seq %d)", ev, pending.Sequence)
		}
	}
	if dl := b.deadLetters(); len(dl) > 0 {
		t.Errorf("dead letters: %+v", dl)
	}
}

// A job that waits (held by a spend limit, here a handler that holds it) through more
// deliveries than the bound keeps its message: the requester's wait sees its result, and
// no step ends the message before the job is done, so no crash can lose it. Before, such
// a job was acknowledged and published again as a new message: `enqueue --wait` waited
// for the old sequence until it timed out, and a crash between the two steps lost the job.
func TestWaitSeesAJobHeldPastTheBound(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	var (
		mu    sync.Mutex
		holds int
	)
	bound := 1 + fleetops.MaxFreeDeliveries
	h := HandlerFunc(func(ctx context.Context, job wire.Job, file string) (wire.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		if holds <= bound {
			holds++
			return wire.Result{}, &HoldError{Reason: "test: the window is full", Delay: 5 * time.Millisecond, why: handBackSpend}
		}
		return applyFake(job, file)
	})
	cfg := b.config(h)
	cfg.MaxDeliver = 1
	s := b.service(cfg)
	b.run(s)
	sid, leaf := writeSession(t, b.dir, "s.jsonl")
	res, err := fleetops.Enqueue(context.Background(), b.nc, wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: leaf}, true, time.Minute)
	if err != nil {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("enqueue --wait: %v (held %d times)", err, holds)
	}
	if res.Event == nil || res.Event.Outcome != OutcomeDone || res.Event.JobSeq != res.Seq || res.Event.Attempt != 1 {
		t.Errorf("final event %+v of job seq %d, want done at attempt 1, of the same message", res.Event, res.Seq)
	}
	info, err := b.js.Stream(context.Background(), wire.StreamJobs)
	if err != nil {
		t.Fatal(err)
	}
	if last := info.CachedInfo().State.LastSeq; last != res.Seq {
		t.Errorf("the jobs stream's last sequence is %d, want %d: the job was published again", last, res.Seq)
	}
	handedBack := counterValue(t, s.m.handedBack.WithLabelValues("default", handBackSpend))
	t.Logf("held %d times (%.0f hand-backs, the bound %d deliveries), then done in the same message (seq %d)", holds, handedBack, bound, res.Seq)
	if handedBack <= float64(bound) {
		t.Errorf("%.0f hand-backs, want more than the bound %d", handedBack, bound)
	}
	if dl := b.deadLetters(); len(dl) > 0 {
		t.Errorf("dead letters: %+v", dl)
	}
}
