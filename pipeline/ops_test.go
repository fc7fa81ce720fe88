package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/natstest"
	"github.com/compactor-dev/compactor/internal/proctest"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/sweep"
	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// logger is a Service's logger writing to buf, so that a test can wait for a line.
func logger(buf *proctest.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func singleNode(t testing.TB, jetStream bool) *natstest.Restartable {
	return natstest.StartRestartable(t, server.Options{Host: "127.0.0.1", Port: -1, JetStream: jetStream, StoreDir: t.TempDir()})
}

// A renewal that fails because JetStream does not answer (here: the server came back
// without JetStream, so every request meets "no responders") is not a lost lease: the
// job keeps running, the renewal is retried, and once JetStream is back the lease is
// renewed and the job ends done on its first attempt.
func TestLeaseSurvivesJetStreamOutage(t *testing.T) {
	t.Parallel()
	n := singleNode(t, true)
	dir := t.TempDir()
	file := filepath.Join(dir, "s.jsonl")
	sid, leaf := writeSession(t, dir, "s.jsonl")
	var logs proctest.Buffer
	entered := make(chan struct{})
	proceed := make(chan struct{})
	var once sync.Once
	h := &fakeHandler{before: func(ctx context.Context, job wire.Job, f string) error {
		once.Do(func() { close(entered) })
		select {
		case <-proceed:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	cfg := Config{Stores: []Store{{Name: "default", Dir: dir}}, NATS: access.NATSConfig{URL: n.URL()}, Setup: true, Idle: -1,
		// The lease must outlast two server restarts (one without JetStream) and a reconnect
		// after its first failed renewal (at TTL/3), under -race on a loaded machine.
		AckWait: 30 * time.Second, LeaseTTL: 18 * time.Second, BackoffBase: 50 * time.Millisecond, BackoffMax: time.Second,
		ShutdownTimeout: 5 * time.Second, Handler: h, Logger: logger(&logs)}
	runService(t, startService(t, cfg))

	nc, err := nats.Connect(n.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	r, err := fleetops.Enqueue(context.Background(), nc, wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: leaf}, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	// The outage: JetStream gone, the server (and the connection) back without it.
	n.Stop()
	js := n.Opts
	n.Opts.JetStream = false
	n.Start()
	waitfor.Until(t, "a failed renewal", func() bool {
		return strings.Contains(logs.String(), "lease renewal failed; retrying while the lease lasts")
	})
	n.Stop()
	n.Opts = js
	n.Start()
	waitfor.Until(t, "the lease renewed after the outage", func() bool {
		return strings.Contains(logs.String(), "lease renewed again")
	})
	close(proceed)
	waitfor.Until(t, "the job's final event", func() bool {
		for _, ev := range eventsOf(t, nc) {
			if ev.JobSeq == r.Seq && ev.Final() {
				if ev.Outcome != OutcomeDone || ev.Attempt != 1 {
					t.Fatalf("event %+v, want done on attempt 1", ev)
				}
				return true
			}
		}
		return false
	})
	for _, line := range []string{"NATS disconnected; reconnecting", "NATS reconnected", "connected to NATS"} {
		if !strings.Contains(logs.String(), line) {
			t.Errorf("no %q line in the log", line)
		}
	}
	if strings.Contains(logs.String(), "lease lost") {
		t.Errorf("the outage was taken for a lost lease:\n%s", logs.String())
	}
	if calls, _ := h.stats(); calls != 1 {
		t.Errorf("handler called %d times, want 1", calls)
	}
	if n := countType(t, file, "compaction"); n != 1 {
		t.Errorf("%d compactions", n)
	}
}

// A renewal refused because the key is gone (someone else's business now) is a lost
// lease: the handler is cancelled at once, and the job is retried and done once.
func TestLeaseLostCancelsJob(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	file := filepath.Join(b.dir, "s.jsonl")
	sid, leaf := writeSession(t, b.dir, "s.jsonl")
	var first atomic.Bool
	cancelled := make(chan struct{})
	h := &fakeHandler{before: func(ctx context.Context, job wire.Job, f string) error {
		if first.CompareAndSwap(false, true) {
			<-ctx.Done()
			close(cancelled)
			return ctx.Err()
		}
		return nil
	}}
	var logs proctest.Buffer
	cfg := b.config(h)
	cfg.LeaseTTL, cfg.AckWait, cfg.Logger = 3*time.Second, 30*time.Second, logger(&logs)
	s := b.service(cfg)
	b.run(s)
	b.enqueue(wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: leaf})
	waitfor.Until(t, "the first attempt to start", func() bool { return first.Load() })
	if err := s.res.leases.Delete(context.Background(), leaseKey("default", sid)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("handler not cancelled after its lease was deleted")
	}
	waitfor.Until(t, "the retried job", func() bool { return countType(t, file, "compaction") == 1 && b.pending() == 0 })
	if !strings.Contains(logs.String(), "lease lost; cancelling job") {
		t.Errorf("no lease-lost line:\n%s", logs.String())
	}
}

// Shutdown with NATS down is bounded by ShutdownTimeout (plus the one-second grace of the
// give-back): a running job is cancelled, the sweep loop and every other goroutine Run
// started have ended when it returns.
func TestShutdownBoundedWithNATSDown(t *testing.T) {
	t.Parallel()
	n := singleNode(t, true)
	dir := t.TempDir()
	sid, leaf := writeSession(t, dir, "s.jsonl")
	for i := range 5 {
		writeSession(t, dir, fmt.Sprintf("other%d.jsonl", i))
	}
	var assessing atomic.Int64
	slowAssessor := sweep.AssessorFunc(func(ctx context.Context, file string) (sweep.Assessment, error) {
		assessing.Add(1)
		defer assessing.Add(-1)
		<-ctx.Done()
		time.Sleep(300 * time.Millisecond) // a read that finishes after the cancellation
		return sweep.Assessment{}, ctx.Err()
	})
	h := &fakeHandler{delay: time.Minute}
	logs := &proctest.Buffer{}
	cfg := Config{Stores: []Store{{Name: "default", Dir: dir}}, NATS: access.NATSConfig{URL: n.URL()}, Setup: true, Idle: -1,
		AckWait: 30 * time.Second, LeaseTTL: 9 * time.Second, ShutdownTimeout: time.Second, SweepEvery: time.Hour,
		MetricsAddr: "127.0.0.1:0", Handler: h, Assessor: slowAssessor, Logger: logger(logs)}
	s := startService(t, cfg)
	nc, err := nats.Connect(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := fleetops.Enqueue(context.Background(), nc, wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: leaf}, false, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- s.Run(ctx) }()
	waitfor.Until(t, "the job and the sweep to start", func() bool {
		c, _ := h.stats()
		return c == 1 && assessing.Load() > 0
	})
	n.Stop() // NATS is gone for good
	start := time.Now()
	cancel()
	runReturned(t, runDone, "with NATS down")
	took := time.Since(start)
	t.Logf("shutdown with NATS down: %.2fs (ShutdownTimeout 1s, grace %s)", took.Seconds(), shutdownGrace)
	if limit := cfg.ShutdownTimeout + 2*shutdownGrace + time.Second; took > limit {
		t.Errorf("shutdown took %s with NATS down, want at most %s", took, limit)
	}
	if a := assessing.Load(); a != 0 {
		t.Errorf("%d sweep assessments still running after Run returned", a)
	}
	// The give-back's answers cannot reach JetStream: their failure is said, with the job.
	if !logLine(logs.String(), "lease release failed; it expires by itself", "session="+sid, "job_seq=") {
		t.Errorf("the failed lease release of the given-back job is not logged with its identity:\n%s", logs.String())
	}
}

// runReturned waits for Run's result on done after its context ended, and fails the test
// if Run failed or has not returned within 30s.
func runReturned(t *testing.T, done <-chan error, when string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("Run did not return within 30s of its context ending %s", when)
	}
}

// logLine reports whether one line of logs holds every part.
func logLine(logs string, parts ...string) bool {
	for l := range strings.Lines(logs) {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			return true
		}
	}
	return false
}

// A handler that ignores its cancellation does not hold Run (its doc): Run names the job in
// its log and returns with that job alone still in flight; the job's goroutine ends when
// the handler returns, and the job, not lost, is done by another worker.
func TestRunLeavesDeafHandlerBehind(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	sid, leaf := writeSession(t, b.dir, "s.jsonl")
	started, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int64
	h := HandlerFunc(func(ctx context.Context, job wire.Job, file string) (wire.Result, error) {
		if calls.Add(1) == 1 {
			close(started)
			<-release // deaf to ctx
			return wire.Result{}, ctx.Err()
		}
		return applyFake(job, file)
	})
	logs := &proctest.Buffer{}
	cfg := b.config(h)
	cfg.ShutdownTimeout = 100 * time.Millisecond
	cfg.Logger = logger(logs)
	s := b.service(cfg)
	r := b.enqueue(wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: leaf})
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- s.Run(ctx) }()
	defer close(release) // the handler returns if the test stops early
	select {
	case <-started:
	case <-time.After(2 * time.Minute): // a hang guard only
		t.Fatal("the handler was not called")
	}
	cancel()
	runReturned(t, runDone, "while a handler ignored its cancellation")
	if n := s.running.count(); n != 1 {
		t.Fatalf("%d jobs in flight when Run returned, want the deaf handler's alone", n)
	}
	if !logLine(logs.String(), "job left behind at shutdown", "session="+sid, fmt.Sprintf("job_seq=%d", r.Seq), "path=s.jsonl") {
		t.Fatalf("the job left behind is not named in the log:\n%s", logs.String())
	}
	release <- struct{}{} // the handler returns
	waitfor.Until(t, "the left-behind job's goroutine to end", func() bool { return s.running.count() == 0 })
	b.run(b.service(b.config(h)))
	file := filepath.Join(b.dir, "s.jsonl")
	waitfor.Until(t, "the job done by another worker", func() bool {
		return countType(t, file, "compaction") == 1 && b.pending() == 0
	})
}

// A job that takes its worker down with it (no answer, ever) costs one attempt per crash,
// counted in NATS so that the count survives the restarts: after MaxDeliver crashed
// attempts the next delivery dead-letters it without calling the handler again.
func TestCrashingJobBoundedByMaxDeliver(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	sid, leaf := writeSession(t, b.dir, "s.jsonl")
	const maxDeliver = 2
	var calls atomic.Int64
	for crash := 1; crash <= maxDeliver+1; crash++ {
		entered := make(chan struct{})
		var once sync.Once
		h := HandlerFunc(func(ctx context.Context, job wire.Job, file string) (wire.Result, error) {
			calls.Add(1)
			once.Do(func() { close(entered) })
			<-ctx.Done()
			return wire.Result{}, ctx.Err()
		})
		cfg := b.config(h)
		cfg.MaxDeliver, cfg.ShutdownTimeout = maxDeliver, 100*time.Millisecond
		s := b.service(cfg)
		b.run(s)
		if crash == 1 {
			b.enqueue(wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: leaf})
		}
		if crash > maxDeliver {
			waitfor.Until(t, "the dead letter", func() bool { return len(b.deadLetters()) == 1 })
			break
		}
		select {
		case <-entered:
		case <-time.After(30 * time.Second):
			t.Fatalf("crash %d: the job was not delivered", crash)
		}
		s.Conn().Close() // the worker dies: no answer, no renewal
	}
	dl := b.deadLetters()[0]
	if !strings.Contains(dl.Reason, "2 attempts ended without an answer") {
		t.Errorf("dead letter reason %q", dl.Reason)
	}
	if c := calls.Load(); c != maxDeliver {
		t.Errorf("handler called %d times, want %d", c, maxDeliver)
	}
	t.Logf("dead-lettered after %d deliveries (MaxDeliver %d; busy-lease deliveries included)", dl.Deliveries, maxDeliver)
	waitfor.Until(t, "the job message gone", func() bool { return b.pending() == 0 })
}

// One data directory, one server: a second service fails at once and says who holds it;
// with JoinRunning (run --once) it works through the running one's NATS instead, with the
// same credentials, and the service file holds no secret.
func TestDataDirLockAndJoin(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	dir := t.TempDir()
	file := filepath.Join(dir, "s.jsonl")
	writeSession(t, dir, "s.jsonl")
	base := Config{Stores: []Store{{Name: "default", Dir: dir}}, DataDir: data, EmbeddedPort: -1, Idle: -1,
		NATS: access.NATSConfig{Token: "s3cret-token"}, Handler: &fakeHandler{}, Assessor: leafAssessor}
	first, err := New(base)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	url := first.ClientURL()

	second, _ := New(base)
	start := time.Now()
	err = second.Start(context.Background())
	var busy *access.DataDirBusyError
	if !errors.As(err, &busy) || busy.Info == nil || busy.Info.ClientURL != url || !strings.Contains(err.Error(), "in use by another compactor") {
		t.Fatalf("second server on the data dir: %v", err)
	}
	// A retried refusal would last the StartupTimeout (a minute by default).
	if d := time.Since(start); d >= DefaultStartupTimeout/2 {
		t.Errorf("refusal took %s: it was retried", d)
	}
	if b, _ := os.ReadFile(filepath.Join(data, access.ServiceFileName)); bytes.Contains(b, []byte("s3cret")) || !bytes.Contains(b, []byte(`"auth": "token"`)) {
		t.Errorf("service file: %s", b)
	}
	if info := access.RunningService(data); info == nil || info.ClientURL != url {
		t.Errorf("RunningService = %+v", info)
	}

	// The token protects the embedded server.
	if nc, err := nats.Connect(url); err == nil {
		nc.Close()
		t.Error("connected to the embedded server without its token")
	}
	if _, err := (access.NATSConfig{URL: url}).Connect(); err == nil || !strings.Contains(err.Error(), "--nats-token") {
		t.Errorf("error without the token: %v", err)
	}

	noAuth := base
	noAuth.JoinRunning, noAuth.NATS = true, access.NATSConfig{}
	joiner, _ := New(noAuth)
	if err := joiner.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "requires token authentication") {
		t.Fatalf("join without the token: %v", err)
	}

	join := base
	join.JoinRunning, join.LeaseTTL = true, 7*time.Second // its own flag: not the running service's to change
	once, _ := New(join)
	rep, err := once.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer once.Close()
	if f, err := fleetops.ReadFleet(context.Background(), once.Conn()); err != nil || time.Duration(f.LeaseTTL) != fleetops.DefaultLeaseTTL {
		t.Errorf("the joined run --once changed the fleet's lease TTL: %+v %v", f, err)
	}
	if once.ClientURL() != url || rep.Counts[OutcomeDone] != 1 {
		t.Errorf("joined run --once: url %s (want %s), report %v", once.ClientURL(), url, rep.Counts)
	}
	if n := countType(t, file, "compaction"); n != 1 {
		t.Errorf("%d compactions", n)
	}
	first.Close()
	if info := access.RunningService(data); info != nil {
		t.Errorf("RunningService after Close = %+v", info)
	}
	third, _ := New(base)
	if err := third.Start(context.Background()); err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	third.Close()
}

// The errors of enqueue name the problem: no stream (no service has started here), no
// JetStream at all. (A stream offline in a cluster is in cluster_test.go.)
func TestEnqueueNamesTheProblem(t *testing.T) {
	t.Parallel()
	job := wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: "abc"}
	for _, tc := range []struct {
		js   bool
		kind error
		want string
	}{
		{true, fleetops.ErrNoService, "does not exist on this NATS server: no `compactor run` has started against it"},
		{false, fleetops.ErrNoJetStream, "JetStream is unavailable"},
	} {
		n := singleNode(t, tc.js)
		nc, err := nats.Connect(n.URL())
		if err != nil {
			t.Fatal(err)
		}
		for _, wait := range []bool{false, true} {
			_, err = fleetops.Enqueue(context.Background(), nc, job, wait, 10*time.Second)
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "is `compactor run` running?") {
				t.Errorf("jetstream=%v wait=%v: %v", tc.js, wait, err)
			}
		}
		nc.Close()
	}
}

// --replicas above 1 on a server that is not clustered fails at once, saying why.
func TestReplicasNeedACluster(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	cfg := b.config(&fakeHandler{})
	cfg.Replicas = 3
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = s.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "needs a clustered NATS") {
		t.Fatalf("Start with 3 replicas on one server: %v", err)
	}
	// A retried error lasts StartupTimeout; half of it cannot be reached by a slow machine.
	if d := time.Since(start); d >= s.cfg.StartupTimeout/2 {
		t.Errorf("took %s: a permanent error was retried", d)
	}
}

// The queue-depth gauges: pending, in flight and dead letters per store, read from JetStream.
func TestQueueDepthMetrics(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	release := make(chan struct{})
	h := &fakeHandler{before: func(ctx context.Context, job wire.Job, f string) error {
		if job.Reason == "fail" {
			return Permanent(errors.New("bad"))
		}
		<-release
		return nil
	}}
	cfg := b.config(h)
	cfg.Concurrency, cfg.MetricsAddr, cfg.AckWait = 1, "127.0.0.1:0", 30*time.Second
	s := b.service(cfg)
	sid, leaf := writeSession(t, b.dir, "bad.jsonl")
	b.enqueue(wire.Job{Kind: wire.KindCompact, Store: "default", Path: "bad.jsonl", SessionID: sid, ExpectLeafID: leaf, Reason: "fail"})
	b.run(s)
	waitfor.Until(t, "the dead letter", func() bool { return len(b.deadLetters()) == 1 })
	for i := range 3 {
		sid, leaf := writeSession(t, b.dir, fmt.Sprintf("s%d.jsonl", i))
		b.enqueue(wire.Job{Kind: wire.KindCompact, Store: "default", Path: fmt.Sprintf("s%d.jsonl", i), SessionID: sid, ExpectLeafID: leaf})
	}
	want := []string{`compactor_queue_pending{store="default"} 2`, `compactor_queue_in_flight{store="default"} 1`, `compactor_queue_dead_letters{store="default"} 1`}
	waitfor.Until(t, "queue gauges", func() bool {
		body := scrape(t, s)
		for _, w := range want {
			if !strings.Contains(body, w) {
				return false
			}
		}
		return true
	})
	close(release)
}

// eventsOf reads every event in COMPACTOR_EVENTS through nc.
func eventsOf(t testing.TB, nc *nats.Conn) []wire.Event {
	t.Helper()
	js, _ := jetstream.New(nc)
	return (&bundle{t: t, js: js}).events()
}

// scrape returns the text of s's /metrics.
func scrape(t testing.TB, s *Service) string {
	t.Helper()
	waitfor.Until(t, "metrics server", func() bool { return s.MetricsAddr() != nil })
	resp, err := http.Get("http://" + s.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// At a stop, a job that has not started a paid call is handed back at once (its first
// ReserveLLM is refused), without using an attempt, while one that has started paying
// finishes: the drain pays for nothing it throws away.
func TestStopHandsBackJobsNotPaying(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	release := make(chan struct{})
	var paying, waiting atomic.Int32
	h := HandlerFunc(func(ctx context.Context, job wire.Job, file string) (wire.Result, error) {
		if job.Reason == "paying" {
			if err := ReserveLLM(ctx, func() int { return 100 }); err != nil {
				return wire.Result{}, err
			}
			paying.Add(1)
		} else {
			waiting.Add(1)
		}
		<-release // the summary is being written, or the job is still planning
		if job.Reason != "paying" {
			if err := ReserveLLM(ctx, func() int { return 100 }); err != nil {
				return wire.Result{}, err
			}
		}
		return applyFake(job, file)
	})
	cfg := b.config(h)
	cfg.ShutdownTimeout = time.Minute
	s := b.service(cfg)
	files := map[string]string{}
	for _, reason := range []string{"paying", "planning"} {
		sid, leaf := writeSession(t, b.dir, reason+".jsonl")
		files[reason] = filepath.Join(b.dir, reason+".jsonl")
		b.enqueue(wire.Job{Kind: wire.KindCompact, Store: "default", Path: reason + ".jsonl", SessionID: sid, ExpectLeafID: leaf, Reason: reason})
	}
	stop := b.run(s)
	waitfor.Until(t, "both jobs running", func() bool { return paying.Load() == 1 && waiting.Load() == 1 })
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	waitfor.Until(t, "the stop to begin", func() bool { return s.draining.Load() })
	close(release)
	<-stopped
	if n := countType(t, files["paying"], "compaction"); n != 1 {
		t.Errorf("the paying job: %d compactions, want 1 (finished in the drain)", n)
	}
	if n := countType(t, files["planning"], "compaction"); n != 0 {
		t.Errorf("the job that had not started paying: %d compactions, want 0 (handed back)", n)
	}
	// Once by its handler; its redelivery may be fetched again as the fetch loop ends, and
	// handed back again at once.
	if got := counterValue(t, s.m.handedBack.WithLabelValues("default", handBackShutdown)); got < 1 {
		t.Errorf("handed back at shutdown: %.0f, want at least 1", got)
	}
	// Handed back at once and without an attempt: a new worker takes it now (AckWait is
	// 1s here; the job's attempt count is checked by its event).
	b.run(b.service(b.config(&fakeHandler{})))
	waitfor.Until(t, "the handed-back job done by another worker", func() bool {
		return countType(t, files["planning"], "compaction") == 1
	})
	for _, ev := range b.events() {
		if ev.Path == "planning.jsonl" && ev.Final() && ev.Attempt != 1 {
			t.Errorf("the handed-back job ended at attempt %d, want 1 (the hand-back used none)", ev.Attempt)
		}
	}
}
