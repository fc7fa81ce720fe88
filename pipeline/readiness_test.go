package pipeline

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/wire"
)

// readyz asks a service's /readyz.
func readyz(t testing.TB, s *Service) (int, string) { return get(t, s, "/readyz") }

// waitReadyz waits until /readyz answers code with a body holding want, and returns how
// long that took from since.
func waitReadyz(t testing.TB, s *Service, code int, want string, since time.Time) time.Duration {
	t.Helper()
	var body string
	waitfor.Until(t, "/readyz "+want, func() bool {
		var c int
		c, body = readyz(t, s)
		return c == code && strings.Contains(body, want)
	})
	t.Logf("/readyz %d after %.2fs:\n%s", code, time.Since(since).Seconds(), body)
	return time.Since(since)
}

// The bounds behind "/readyz turns false within 5 s": a fetch loop is stale after
// fetchStale, a probe's result is kept readyProbeTTL and a run takes readyProbeTimeout at
// most; a store is checked at every request.
func TestReadyzBoundsWithinFiveSeconds(t *testing.T) {
	if fetchStale+fetchWait > 5*time.Second || readyProbeTTL+readyProbeTimeout > 5*time.Second {
		t.Errorf("fetch staleness %s (+ a fetch's %s), probe TTL %s + timeout %s: a failure could go unseen for more than 5s",
			fetchStale, fetchWait, readyProbeTTL, readyProbeTimeout)
	}
}

// /readyz is ready while the worker can work jobs, and turns false, naming why, when its
// fetch loop stops fetching (the store's consumer deleted), when a probe fails (then true
// again, with the last error kept), and while it drains at a stop; /healthz stays ok.
func TestReadyzFetchLoopsProbesAndDrain(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	release := make(chan struct{})
	h := &fakeHandler{before: func(ctx context.Context, job wire.Job, file string) error {
		<-release
		return nil
	}}
	var probeErr atomic.Pointer[error]
	cfg := b.config(h)
	cfg.MetricsAddr = "127.0.0.1:0"
	cfg.ReadyProbes = []ReadyProbe{{Name: "llm", Check: func(ctx context.Context) error {
		if p := probeErr.Load(); p != nil {
			return *p
		}
		return nil
	}}}
	s := b.service(cfg)
	stop := b.run(s)
	waitfor.Until(t, "metrics server", func() bool { return s.MetricsAddr() != nil })
	waitReadyz(t, s, 200, "fetch default: ok\nstore default: writable\nllm: ok", time.Now())

	// A probe that fails: not ready, with its error; answering again: ready, the error kept.
	refused := errors.New("HTTP 401: the endpoint refuses the API key")
	probeErr.Store(&refused)
	waitReadyz(t, s, 503, "llm: HTTP 401: the endpoint refuses the API key", time.Now())
	probeErr.Store(nil)
	waitReadyz(t, s, 200, "; last error", time.Now())

	// The fetch loop stops fetching: its consumer is gone, every fetch fails.
	ctx := context.Background()
	t0 := time.Now()
	if err := b.js.DeleteConsumer(ctx, wire.StreamJobs, fleetops.ConsumerName("default")); err != nil {
		t.Fatal(err)
	}
	took := waitReadyz(t, s, 503, "fetch default: no fetch ended well for", t0)
	t.Logf("fetch loop stopped: /readyz false %.2fs after the consumer was deleted", took.Seconds())
	if code, _ := get(t, s, "/healthz"); code != 200 {
		t.Errorf("/healthz %d while NATS is connected", code)
	}
	stop()

	// A draining worker is not ready: a job runs while it stops.
	s2 := b.service(cfg) // sets the consumer up again
	stop2 := b.run(s2)
	sid, leaf := writeSession(t, b.dir, "s.jsonl")
	b.enqueue(wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: leaf})
	waitfor.Until(t, "the job running", func() bool { c, _ := h.stats(); return c == 1 && s2.MetricsAddr() != nil })
	stopped := make(chan struct{})
	go func() { stop2(); close(stopped) }()
	waitReadyz(t, s2, 503, "draining: the worker is stopping", time.Now())
	close(release)
	<-stopped
}

// A store that turns read-only makes the worker not ready. As root (who writes through
// permissions) the store is a tmpfs remounted read-only; otherwise its mode is 0555.
func TestReadyzStoreReadOnly(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	store := filepath.Join(t.TempDir(), "store")
	if err := os.Mkdir(store, 0o755); err != nil {
		t.Fatal(err)
	}
	readOnly := func() { // undone when the test ends
		if err := os.Chmod(store, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(store, 0o755) })
	}
	if os.Geteuid() == 0 {
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", store).CombinedOutput(); err != nil {
			t.Skipf("root, but a tmpfs cannot be mounted here (%v: %s): a read-only store cannot be made", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("umount", store).Run() })
		readOnly = func() {
			if out, err := exec.Command("mount", "-o", "remount,ro", store).CombinedOutput(); err != nil {
				t.Fatalf("remount read-only: %v: %s", err, out)
			}
		}
	}
	cfg := b.config(&fakeHandler{})
	cfg.Stores = []Store{{Name: "default", Dir: store}}
	cfg.MetricsAddr = "127.0.0.1:0"
	s := b.service(cfg)
	b.run(s)
	waitfor.Until(t, "metrics server", func() bool { return s.MetricsAddr() != nil })
	waitReadyz(t, s, 200, "store default: writable", time.Now())
	t0 := time.Now()
	readOnly()
	took := waitReadyz(t, s, 503, "store default: not writable", t0)
	t.Logf("store read-only: /readyz false %.2fs after", took.Seconds())
}
