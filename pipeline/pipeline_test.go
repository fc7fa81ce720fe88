package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/sweep"
	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// 200 enqueues for 50 sessions from 8 goroutines, with duplicates, over two workers:
// exactly one compaction per session.
func TestManyEnqueuesExactlyOnce(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	type sess struct{ rel, sid, leaf string }
	var sessions []sess
	for i := range 50 {
		rel := fmt.Sprintf("sessions/--home-u-p%d--/2026-01-01T00-00-00-000Z_%d.jsonl", i%5, i)
		sid, leaf := writeSession(t, b.dir, rel)
		sessions = append(sessions, sess{rel, sid, leaf})
	}
	h := &fakeHandler{delay: 20 * time.Millisecond}
	cfg := b.config(h)
	b.run(b.service(cfg))
	b.run(b.service(cfg))

	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[string]int{}
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < 200; i += 8 {
				s := sessions[i%50]
				job := wire.Job{Kind: wire.KindCompact, Store: "default", Path: s.rel, SessionID: s.sid, Reason: "test"}
				if i%3 != 0 {
					job.ExpectLeafID = s.leaf
				}
				r, err := fleetops.Enqueue(context.Background(), b.nc, job, false, 10*time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				switch {
				case r.AlreadyQueued:
					counts["queued"]++
				case r.Duplicate:
					counts["dup"]++
				default:
					counts["new"]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("enqueue answers: %v", counts)
	waitfor.Until(t, "all sessions compacted and queue empty", func() bool {
		for _, s := range sessions {
			if countType(t, filepath.Join(b.dir, s.rel), "compaction") == 0 {
				return false
			}
		}
		return b.pending() == 0
	})
	time.Sleep(300 * time.Millisecond) // let any stray redelivery happen
	for _, s := range sessions {
		if n := countType(t, filepath.Join(b.dir, s.rel), "compaction"); n != 1 {
			t.Errorf("%s: %d compactions, want 1", s.rel, n)
		}
	}
	if _, maxActive := h.stats(); maxActive > 1 {
		t.Errorf("a session was handled by %d jobs at once", maxActive)
	}
}

// Paths outside the store, a symlink escaping it, a non-.jsonl file, a directory, a file
// of another session than the job names and a malformed payload are dead-lettered with the
// reason; nothing is written.
func TestUnsafeJobsDeadLettered(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	outsideDir := t.TempDir()
	outside := filepath.Join(outsideDir, "victim.jsonl")
	sid, _ := writeSession(t, outsideDir, "victim.jsonl")
	before, _ := os.ReadFile(outside)
	if err := os.Symlink(outside, filepath.Join(b.dir, "link.jsonl")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.dir, "notes.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(b.dir, "dir.jsonl"), 0o755); err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(b.dir, outside)
	mineID, _ := writeSession(t, b.dir, "mine.jsonl")
	// Headers the read finds past a 4 KB first line: after blank lines, and 8 KB long; and
	// a header line too long to read.
	longHeader := "\n \n" + `{"type":"session","version":3,"id":"long-1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/` + strings.Repeat("x", 8<<10) + `"}` + "\n"
	hugeHeader := `{"type":"session","version":3,"id":"huge-1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/` + strings.Repeat("x", 2<<20) + `"}` + "\n"
	for name, text := range map[string]string{"long.jsonl": longHeader, "huge.jsonl": hugeHeader} {
		if err := os.WriteFile(filepath.Join(b.dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h := &fakeHandler{}
	b.run(b.service(b.config(h)))

	cases := map[string]string{ // path → expected reason fragment
		rel:                  "leaves the store root",
		outside:              "is absolute",
		"link.jsonl":         "resolves outside the store root",
		"notes.txt":          "not a .jsonl file",
		"dir.jsonl":          "not a regular file",
		"missing/none.jsonl": "does not exist",
	}
	i := 0
	for p := range cases {
		i++
		b.enqueue(wire.Job{Kind: wire.KindCompact, Store: "default", Path: p, SessionID: fmt.Sprintf("%s-%d", sid, i)})
	}
	// A file of the store, under another session id than its header's: the id's lease,
	// records and bounds are not the file's.
	b.enqueue(wire.Job{Kind: wire.KindCompact, Store: "default", Path: "mine.jsonl", SessionID: mineID + "-other"})
	b.enqueue(wire.Job{Kind: wire.KindCompact, Store: "default", Path: "long.jsonl", SessionID: "long-1-other"})
	b.enqueue(wire.Job{Kind: wire.KindCompact, Store: "default", Path: "huge.jsonl", SessionID: "huge-1-other"})
	// A malformed payload, published straight to a job subject.
	if _, err := b.js.Publish(context.Background(), wire.JobSubject("default", "garbage", wire.KindCompact), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	// A payload whose store disagrees with its subject.
	bad := `{"v":1,"kind":"compact","store":"other","path":"x.jsonl","sessionId":"s1","requestedAt":"2026-01-01T00:00:00Z","id":"x"}`
	if _, err := b.js.Publish(context.Background(), wire.JobSubject("default", "s1", wire.KindCompact), []byte(bad)); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, "11 dead letters", func() bool { return len(b.deadLetters()) == 11 })
	var reasons []string
	for _, dl := range b.deadLetters() {
		reasons = append(reasons, dl.Reason)
		if dl.Deliveries != 1 || dl.JobSeq == 0 || dl.Subject == "" {
			t.Errorf("dead letter lacks delivery data: %+v", dl)
		}
	}
	all := strings.Join(reasons, "\n")
	for p, frag := range cases {
		if !strings.Contains(all, frag) {
			t.Errorf("no dead letter for %q with %q in:\n%s", p, frag, all)
		}
	}
	for _, frag := range []string{"invalid job: job: malformed payload", "does not match its payload", "holds session " + mineID + ", the job names session " + mineID + "-other",
		"holds session long-1, the job names session long-1-other", "session file header: huge.jsonl:1: the header line is longer than"} {
		if !strings.Contains(all, frag) {
			t.Errorf("no dead letter with %q in:\n%s", frag, all)
		}
	}
	if calls, _ := h.stats(); calls != 0 {
		t.Errorf("handler called %d times for refused jobs", calls)
	}
	after, _ := os.ReadFile(outside)
	if string(after) != string(before) {
		t.Error("the file outside the store was modified")
	}
	if n := b.pending(); n != 0 {
		t.Errorf("%d jobs left in the queue", n)
	}
}

// A rate-limit error with a RetryAfter hint is retried no earlier than the hint and the
// job then completes.
func TestRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	sid, leaf := writeSession(t, b.dir, "s.jsonl")
	var mu sync.Mutex
	var attempts []time.Time
	h := &fakeHandler{before: func(ctx context.Context, job wire.Job, file string) error {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, time.Now())
		if len(attempts) == 1 {
			return fmt.Errorf("llm: %w", RetryAfter(700*time.Millisecond, errors.New("429 rate limited")))
		}
		return nil
	}}
	b.run(b.service(b.config(h)))
	r, err := fleetops.Enqueue(context.Background(), b.nc, wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: leaf}, true, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.Event == nil || r.Event.Outcome != OutcomeDone || r.Event.Attempt != 2 {
		t.Fatalf("event = %+v, want done on attempt 2", r.Event)
	}
	mu.Lock()
	gap := attempts[1].Sub(attempts[0])
	mu.Unlock()
	if gap < 700*time.Millisecond {
		t.Errorf("retried after %s, before the 700ms hint", gap)
	}
	var retry *wire.Event
	for _, ev := range b.events() {
		if ev.Outcome == OutcomeRetry {
			retry = &ev
		}
	}
	if retry == nil || retry.RetryInMs != 700 || !strings.Contains(retry.Error, "429") {
		t.Errorf("retry event = %+v", retry)
	}
	if n := countType(t, filepath.Join(b.dir, "s.jsonl"), "compaction"); n != 1 {
		t.Errorf("%d compactions", n)
	}
}

// A worker that stops mid-job without acking (its connection dies): the job is redelivered
// to another worker, which waits for the dead worker's lease to expire, and the effect
// happens exactly once even when the first worker's handler later wakes up and tries.
func TestCrashedWorkerRedelivered(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	file := filepath.Join(b.dir, "s.jsonl")
	sid, leaf := writeSession(t, b.dir, "s.jsonl")
	entered := make(chan struct{})
	wake := make(chan struct{})
	var once sync.Once
	crashed := &fakeHandler{before: func(ctx context.Context, job wire.Job, f string) error {
		once.Do(func() { close(entered) })
		<-wake // deaf to ctx: a stuck process
		return nil
	}}
	a := b.service(b.config(crashed))
	stopA := b.run(a)
	b.enqueue(wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: leaf})
	<-entered
	a.Conn().Close() // the worker is gone: no heartbeat, no ack, no lease renewal

	good := &fakeHandler{}
	b.run(b.service(b.config(good)))
	waitfor.Until(t, "the redelivered job to complete", func() bool {
		return countType(t, file, "compaction") == 1 && b.pending() == 0
	})
	close(wake) // the stuck handler wakes up and tries to append: refused, leaf moved
	stopA()
	if n := countType(t, file, "compaction"); n != 1 {
		t.Errorf("%d compactions, want 1", n)
	}
	if calls, _ := good.stats(); calls != 1 {
		t.Errorf("second worker's handler called %d times", calls)
	}
}

// Two workers, and two jobs of one session (compact and branch_summary): never at once,
// each effect once.
func TestLeaseSerializesSession(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	file := filepath.Join(b.dir, "s.jsonl")
	sid, _ := writeSession(t, b.dir, "s.jsonl")
	h := &fakeHandler{delay: 300 * time.Millisecond}
	b.run(b.service(b.config(h)))
	b.run(b.service(b.config(h)))
	b.enqueue(wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: sid})
	b.enqueue(wire.Job{Kind: wire.KindBranchSummary, Store: "default", Path: "s.jsonl", SessionID: sid, TargetID: "t1"})
	waitfor.Until(t, "both jobs", func() bool {
		return countType(t, file, "compaction") == 1 && countType(t, file, "branch_summary") == 1 && b.pending() == 0
	})
	if _, maxActive := h.stats(); maxActive != 1 {
		t.Errorf("max jobs at once on one session = %d, want 1", maxActive)
	}
}

func TestLeaseAcquireRelease(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	s := b.service(b.config(&fakeHandler{}))
	ctx := context.Background()
	kv := s.res.leases
	l1, err := acquireLease(ctx, kv, 2*time.Second, leaseKey("default", "sess"), "sess", "w1", "j1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = acquireLease(ctx, kv, 2*time.Second, leaseKey("default", "sess"), "sess", "w2", "j2")
	var busy *errLeaseBusy
	if !errors.As(err, &busy) || busy.holder.Worker != "w1" {
		t.Fatalf("second acquire: %v, want busy held by w1", err)
	}
	if err := l1.renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l1.release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := acquireLease(ctx, kv, 2*time.Second, leaseKey("default", "sess"), "sess", "w2", "j2")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	if err := l1.release(ctx); err == nil {
		t.Error("a stale holder released someone else's lease")
	}
	// Abandoned: expires by itself after the bucket TTL.
	_ = l2
	waitfor.Until(t, "abandoned lease to expire", func() bool {
		l, err := acquireLease(ctx, kv, 2*time.Second, leaseKey("default", "sess"), "sess", "w3", "j3")
		return err == nil && l != nil
	})
}

// Graceful shutdown: jobs running when Run's context ends are finished (stage one) or, past
// ShutdownTimeout, cancelled and given back (stage two); jobs not yet fetched stay queued.
// Another worker then finishes everything: no job is lost, none runs twice.
func TestGracefulShutdownLosesNoJob(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	h1 := &fakeHandler{delay: 150 * time.Millisecond}
	cfg1 := b.config(h1)
	cfg1.Concurrency = 2
	s1 := b.service(cfg1)
	var files []string
	for i := range 12 {
		rel := fmt.Sprintf("s%02d.jsonl", i)
		sid, leaf := writeSession(t, b.dir, rel)
		files = append(files, filepath.Join(b.dir, rel))
		b.enqueue(wire.Job{Kind: wire.KindCompact, Store: "default", Path: rel, SessionID: sid, ExpectLeafID: leaf})
	}
	// Worker 1: stage one (jobs finish within the timeout).
	stop1 := b.run(s1)
	waitfor.Until(t, "a job to start", func() bool { c, _ := h1.stats(); return c > 0 })
	stop1()
	if s1.running.count() != 0 {
		t.Fatal("jobs still in flight after Run returned")
	}
	// Worker 2: stage two (jobs outlive the timeout and are given back).
	h2 := &fakeHandler{delay: time.Minute}
	cfg2 := b.config(h2)
	cfg2.Concurrency = 3
	cfg2.ShutdownTimeout = 100 * time.Millisecond
	s2 := b.service(cfg2)
	stop2 := b.run(s2)
	waitfor.Until(t, "jobs to start", func() bool { c, _ := h2.stats(); return c >= 3 })
	stop2()
	given := 0
	for _, f := range files {
		given += 1 - countType(t, f, "compaction")
	}
	if given == 0 {
		t.Fatal("nothing left for worker 3; test is not exercising shutdown")
	}
	// Worker 3 finishes the rest.
	h3 := &fakeHandler{}
	b.run(b.service(b.config(h3)))
	waitfor.Until(t, "all jobs done", func() bool {
		for _, f := range files {
			if countType(t, f, "compaction") != 1 {
				return false
			}
		}
		return b.pending() == 0
	})
	for _, f := range files {
		if n := countType(t, f, "compaction"); n != 1 {
			t.Errorf("%s: %d compactions", f, n)
		}
	}
	for _, ev := range b.events() {
		if ev.Outcome == OutcomeFailed {
			t.Errorf("job failed: %+v", ev)
		}
	}
}

// A job that keeps failing transiently is dead-lettered on its last allowed delivery and
// its subject is free again: a new enqueue for the session is accepted and runs.
func TestMaxDeliverExhaustion(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	file := filepath.Join(b.dir, "s.jsonl")
	sid, leaf := writeSession(t, b.dir, "s.jsonl")
	var fail sync.Map
	fail.Store(leaf, true)
	h := &fakeHandler{before: func(ctx context.Context, job wire.Job, f string) error {
		if _, ok := fail.Load(job.ExpectLeafID); ok {
			return errors.New("upstream 500")
		}
		return nil
	}}
	cfg := b.config(h)
	cfg.MaxDeliver = 3
	b.run(b.service(cfg))
	r, err := fleetops.Enqueue(context.Background(), b.nc, wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: leaf}, true, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.Event.Outcome != OutcomeFailed || !strings.Contains(r.Event.Reason, "max deliveries (3) exhausted") || r.Event.Attempt != 3 {
		t.Fatalf("event = %+v", r.Event)
	}
	dls := b.deadLetters()
	if len(dls) != 1 || dls[0].Deliveries != 3 || !strings.Contains(dls[0].Error, "upstream 500") {
		t.Fatalf("dead letters = %+v", dls)
	}
	// The session changed; a new job is accepted (not "already queued") and completes.
	newLeaf, err := appendLine(file, "message", leaf)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := fleetops.Enqueue(context.Background(), b.nc, wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: newLeaf}, true, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r2.AlreadyQueued || r2.Event.Outcome != OutcomeDone {
		t.Fatalf("second job: %+v event %+v", r2, r2.Event)
	}
}

// A message whose deliveries run out without any final answer (give-backs, busy leases,
// workers lost mid-job) is dead-lettered by the worker that receives it next, with the
// message in hand and without running the handler, and the subject is unblocked. (The
// consumer itself no longer bounds deliveries: acting on an exhausted message afterwards
// took reading and deleting it by sequence, which a store's worker may not.)
func TestDeliveriesBoundedAtAdmission(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	file := filepath.Join(b.dir, "s.jsonl")
	sid, leaf := writeSession(t, b.dir, "s.jsonl")
	h := &fakeHandler{}
	cfg := b.config(h)
	cfg.MaxDeliver = 1
	w := b.service(cfg)
	r := b.enqueue(wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: leaf})
	// Spend the deliveries as give-backs would: fetched and given back at once.
	ctx := context.Background()
	cons, err := b.js.Consumer(ctx, wire.StreamJobs, fleetops.ConsumerName("default"))
	if err != nil {
		t.Fatal(err)
	}
	for spent := 0; spent < cfg.MaxDeliver+fleetops.MaxFreeDeliveries; {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			if err := m.Nak(); err != nil {
				t.Fatal(err)
			}
			spent++
		}
	}
	b.run(w)
	waitfor.Until(t, "the exhausted job's dead letter", func() bool { return len(b.deadLetters()) == 1 })
	dl := b.deadLetters()[0]
	if dl.JobSeq != r.Seq || !strings.Contains(dl.Reason, "max deliveries exhausted after 52 deliveries") {
		t.Errorf("dead letter = %+v", dl)
	}
	if calls, _ := h.stats(); calls != 0 {
		t.Errorf("the handler ran %d times on an exhausted job", calls)
	}
	waitfor.Until(t, "the job message gone", func() bool { return b.pending() == 0 })
	newLeaf, _ := appendLine(file, "message", leaf)
	r2 := b.enqueue(wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: newLeaf})
	if r2.AlreadyQueued {
		t.Fatal("subject still blocked")
	}
}

// Enqueue --wait, already queued, and a duplicate of a finished request (its event was
// published before the waiter existed), against the embedded server a Service starts.
func TestEnqueueWaitEmbedded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sid, leaf := writeSession(t, dir, "sessions/--tmp--/a.jsonl")
	release := make(chan struct{})
	h := &fakeHandler{before: func(ctx context.Context, job wire.Job, f string) error {
		if job.Reason == "slow" {
			<-release
		}
		return nil
	}}
	s, err := New(Config{Stores: []Store{{Name: "default", Dir: dir}}, DataDir: t.TempDir(), EmbeddedPort: -1, Idle: -1, Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; s.Close() })
	nc := s.Conn()

	job := wire.Job{Kind: wire.KindCompact, Store: "default", Path: "sessions/--tmp--/a.jsonl", SessionID: sid, ExpectLeafID: leaf}
	r, err := fleetops.Enqueue(context.Background(), nc, job, true, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.Event == nil || r.Event.Outcome != OutcomeDone || r.Event.EntryID == "" || r.Event.TokensBefore != 1000 {
		t.Fatalf("event = %+v", r.Event)
	}
	// Same request again: a duplicate within the window; its event is found in the stream.
	r2, err := fleetops.Enqueue(context.Background(), nc, job, true, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !r2.Duplicate || r2.Event == nil || r2.Event.EntryID != r.Event.EntryID {
		t.Fatalf("duplicate: %+v event %+v", r2, r2.Event)
	}
	// A slow job is running; a second, different request for the session waits for it to
	// end and then runs itself: it is never answered by another request's result.
	slow := wire.Job{Kind: wire.KindCompact, Store: "default", Path: job.Path, SessionID: sid, Reason: "slow", Force: true}
	r3 := make(chan fleetops.EnqueueResult, 1)
	go func() {
		r, err := fleetops.Enqueue(context.Background(), nc, slow, true, 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		r3 <- r
	}()
	waitfor.Until(t, "slow job to start", func() bool { c, _ := h.stats(); return c == 2 })
	other := wire.Job{Kind: wire.KindCompact, Store: "default", Path: job.Path, SessionID: sid, ExpectLeafID: "feedbeef"}
	r4c := make(chan fleetops.EnqueueResult, 1)
	waiting := make(chan struct{})
	go func() {
		r, err := fleetops.Enqueue(context.Background(), nc, other, true, 10*time.Second, fleetops.OnWaiting(func(string, uint64) { close(waiting) }))
		if err != nil {
			t.Error(err)
		}
		r4c <- r
	}()
	// The slow job ends only once the second request waits for it.
	select {
	case <-waiting:
	case r := <-r4c:
		t.Fatalf("second request ended before it waited: %+v", r)
	}
	close(release)
	got3, got4 := <-r3, <-r4c
	if len(got4.WaitedFor) != 1 || got4.WaitedFor[0] != got3.JobID || got4.Seq == got3.Seq || got4.Event == nil || got4.Event.JobSeq != got4.Seq || got4.Event.JobID != other.MsgID() {
		t.Fatalf("second request: %+v (event %+v), running job %+v", got4, got4.Event, got3)
	}
	if got3.Event.Outcome != OutcomeSkipped || !strings.Contains(got3.Event.Reason, "already compacted") {
		t.Errorf("slow job event = %+v", got3.Event)
	}
}

// A trigger arriving while a job runs is not lost: the enqueue is refused (already queued),
// the running job refuses the moved leaf, and the after-job re-check enqueues the new leaf.
func TestTriggerDuringJobRechecked(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	file := filepath.Join(b.dir, "s.jsonl")
	sid, leaf := writeSession(t, b.dir, "s.jsonl")
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	h := &fakeHandler{before: func(ctx context.Context, job wire.Job, f string) error {
		if job.ExpectLeafID == leaf {
			once.Do(func() { close(entered) })
			<-release
		}
		return nil
	}}
	cfg := b.config(h)
	cfg.Assessor = leafAssessor
	b.run(b.service(cfg))
	b.enqueue(wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: leaf})
	<-entered
	// The agent writes more and triggers again while the job runs.
	newLeaf, err := appendLine(file, "message", leaf)
	if err != nil {
		t.Fatal(err)
	}
	r := b.enqueue(wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: newLeaf})
	if !r.AlreadyQueued {
		t.Fatalf("second trigger: %+v, want already queued", r)
	}
	close(release)
	waitfor.Until(t, "the new leaf compacted", func() bool {
		ls := readLines(t, file)
		return ls[len(ls)-1].Type == "compaction" && b.pending() == 0
	})
	ls := readLines(t, file)
	if n := countType(t, file, "compaction"); n != 1 || ls[len(ls)-1].ParentID != newLeaf {
		t.Errorf("%d compactions, last parent %s, want 1 on %s", n, ls[len(ls)-1].ParentID, newLeaf)
	}
}

// Sweeps find Pi's layout and nested files, skip active and unchanged files, and enqueue
// what is over budget; RunOnce then processes everything and reports it.
func TestSweepAndRunOnce(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	var rels []string
	for i := range 6 {
		rel := fmt.Sprintf("sessions/--home-u-p%d--/2026-01-0%dT00-00-00-000Z_x.jsonl", i%2, i+1)
		writeSession(t, b.dir, rel)
		rels = append(rels, rel)
	}
	rels = append(rels, "deep/a/b/c.jsonl")
	writeSession(t, b.dir, "deep/a/b/c.jsonl")
	if err := os.WriteFile(filepath.Join(b.dir, "readme.md"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	for _, rel := range rels[1:] {
		if err := os.Chtimes(filepath.Join(b.dir, rel), old, old); err != nil {
			t.Fatal(err)
		}
	}
	h := &fakeHandler{}
	cfg := b.config(h)
	cfg.Assessor = leafAssessor
	cfg.Idle = 10 * time.Minute
	progress := &recordProgress{}
	cfg.Progress = progress
	s := b.service(cfg)
	rep, err := s.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st := rep.Sweep; st.Files != 7 || st.Active != 1 || st.Assessed != 6 || st.Enqueued != 6 {
		t.Errorf("sweep stats = %+v", *st)
	}
	if rep.Counts[OutcomeDone] != 6 || len(rep.Rows) != 6 {
		t.Errorf("report counts %v, rows %d", rep.Counts, len(rep.Rows))
	}
	if progress.updates != 7 || progress.lastDone != 7 || progress.bad != "" || progress.final == nil || *progress.final != *rep.Sweep {
		t.Errorf("progress: %d updates, last %d (%s), final %+v; want 7, 7 and the report's stats", progress.updates, progress.lastDone, progress.bad, progress.final)
	}
	if countType(t, filepath.Join(b.dir, rels[0]), "compaction") != 0 {
		t.Error("active session compacted")
	}
	// Second sweep: the compacted files changed, were just written (active), the rest unchanged.
	st, err := s.Sweep(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Assessed != 0 || st.Enqueued != 0 || st.Active != 7 {
		t.Errorf("second sweep = %+v", st)
	}
	// Once idle again: compacted files are assessed once (not over budget), then unchanged.
	for _, rel := range rels {
		_ = os.Chtimes(filepath.Join(b.dir, rel), old, old)
	}
	st, _ = s.Sweep(context.Background(), nil)
	if st.Assessed != 7 || st.Enqueued != 1 {
		t.Errorf("third sweep = %+v", st)
	}
	st, _ = s.Sweep(context.Background(), nil)
	if st.Unchanged != 7 || st.Assessed != 0 {
		t.Errorf("fourth sweep = %+v", st)
	}
}

// recordProgress records what a sweep reported.
// Update is called one call at a time, so it needs no lock of its own.
type recordProgress struct {
	updates, lastDone int
	bad               string
	final             *sweep.Stats
}

func (p *recordProgress) Update(done, total int, f sweep.SweptFile, st sweep.Stats) {
	p.updates++
	if done != p.lastDone+1 || total != st.Files || f.Store != "default" || f.Path == "" || f.Result == "" {
		p.bad = fmt.Sprintf("progress %d/%d after %d (files %d), file %+v", done, total, p.lastDone, st.Files, f)
	}
	p.lastDone = done
}

func (p *recordProgress) Finished(st sweep.Stats) { p.final = &st }

func TestMetricsAndHealthz(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	sid, _ := writeSession(t, b.dir, "s.jsonl")
	cfg := b.config(&fakeHandler{})
	cfg.MetricsAddr = "127.0.0.1:0"
	s := b.service(cfg)
	b.run(s)
	if _, err := fleetops.Enqueue(context.Background(), b.nc, wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: sid}, true, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, "metrics server", func() bool { return s.MetricsAddr() != nil })
	if code, body := get(t, s, "/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	wants := []string{`compactor_jobs_total{kind="compact",outcome="done",store="default"} 1`, "compactor_llm_tokens_total", "compactor_jobs_in_flight 0", "compactor_job_duration_seconds_bucket"}
	waitfor.Until(t, "metrics after the job (in-runningJob drops just after the event)", func() bool {
		_, body := get(t, s, "/metrics")
		for _, want := range wants {
			if !strings.Contains(body, want) {
				return false
			}
		}
		return true
	})
}

// The extension's reports of Pi's hook runs are counted once per report (a queue group),
// by outcome, with their lookup latency, and by what answered the hook and why not a
// preparation (an unknown reason word is counted as "other", so the label stays bounded).
func TestHookReportsMetrics(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	cfg := b.config(&fakeHandler{})
	cfg.MetricsAddr = "127.0.0.1:0"
	s := b.service(cfg)
	b.run(s)
	waitfor.Until(t, "metrics server", func() bool { return s.MetricsAddr() != nil })
	for _, r := range []wire.HookReport{
		{Outcome: wire.HookHit, LatencyMs: 3, Result: wire.HookResultPrepared, ReasonCode: "none", SpanTokens: &wire.SpanTokens{Model: 900, Extract: 100}, Base: "model"},
		{Outcome: wire.HookHit, LatencyMs: 4, Result: wire.HookResultExtract, ReasonCode: "not-ready", SpanTokens: &wire.SpanTokens{Extract: 2000}, Base: "compaction", BaseRefused: "entries-differ"},
		{Outcome: wire.HookStale, Reason: "leaf not on the branch", LatencyMs: 2, Result: wire.HookResultPi, ReasonCode: "stale-leaf", SpanTokens: &wire.SpanTokens{Model: 3000}},
		{Outcome: wire.HookMiss, LatencyMs: 1, Result: wire.HookResultPi, ReasonCode: "made-up word", Base: "made-up", BaseRefused: "made-up"},
		{Outcome: wire.HookMiss, LatencyMs: 1}, // an older extension: counted as a lookup only
	} {
		r.V, r.Store, r.SessionID = 1, "default", "s1"
		data, _ := json.Marshal(r)
		if err := b.nc.Publish(wire.HookSubject("default", "s1"), data); err != nil {
			t.Fatal(err)
		}
	}
	wants := []string{`compactor_prepared_lookups_total{outcome="hit",store="default"} 2`, `compactor_prepared_lookups_total{outcome="stale",store="default"} 1`,
		`compactor_prepared_lookups_total{outcome="miss",store="default"} 2`, `compactor_prepared_lookup_seconds_count{store="default"} 5`,
		`compactor_prepared_hook_total{reason="none",result="prepared",store="default"} 1`,
		`compactor_prepared_hook_total{reason="not-ready",result="extract",store="default"} 1`,
		`compactor_prepared_hook_total{reason="stale-leaf",result="pi",store="default"} 1`,
		`compactor_prepared_hook_total{reason="other",result="pi",store="default"} 1`,
		`compactor_summary_span_tokens_total{source="model",store="default"} 3900`,
		`compactor_summary_span_tokens_total{source="extract",store="default"} 2100`,
		`compactor_summary_base_total{base="model",refused="none",store="default"} 1`,
		`compactor_summary_base_total{base="compaction",refused="entries-differ",store="default"} 1`,
		`compactor_summary_base_total{base="pi",refused="none",store="default"} 1`,
		`compactor_summary_base_total{base="other",refused="other",store="default"} 1`}
	waitfor.Until(t, "hook metrics", func() bool {
		resp, err := http.Get("http://" + s.MetricsAddr().String() + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, want := range wants {
			if !strings.Contains(string(body), want) {
				return false
			}
		}
		return true
	})
}

// When a client sees a job's final event, the session's lease is free already: its next job
// (enqueued on that event, as `enqueue --wait` then a follow-up does) is not delayed for the
// rest of the lease's TTL by a lease that was about to be released.
func TestLeaseReleasedBeforeTheEvent(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	sid, _ := writeSession(t, b.dir, "s.jsonl")
	s := b.service(b.config(&fakeHandler{}))
	b.run(s)
	for i := range 5 {
		r, err := fleetops.Enqueue(context.Background(), b.nc, wire.Job{Kind: wire.KindBranchSummary, Store: "default", Path: "s.jsonl", SessionID: sid, TargetID: fmt.Sprintf("t%d", i)}, true, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if r.Event.Outcome != OutcomeDone {
			t.Fatalf("job %d: %+v", i, r.Event)
		}
		if _, err := s.res.leases.Get(context.Background(), leaseKey("default", sid)); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatalf("job %d: its event came while the lease was still held (%v)", i, err)
		}
	}
}
