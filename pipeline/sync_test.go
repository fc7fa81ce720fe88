package pipeline

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/wire"
)

// embeddedService starts a Service on its own embedded server (a random port, its data
// directory under dir), as `compactor run` without --nats-url does.
func embeddedService(t testing.TB, dir string, adjust func(*Config)) *Service {
	t.Helper()
	store := t.TempDir()
	cfg := Config{Stores: []Store{{Name: "default", Dir: store}}, DataDir: dir, EmbeddedPort: -1, Idle: -1}
	if adjust != nil {
		adjust(&cfg)
	}
	return startService(t, cfg)
}

// --nats-sync reaches the embedded server: its default interval, an interval, always; and
// it is refused with an external server, whose setting is its own.
func TestEmbeddedSyncSetting(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		every  time.Duration
		always bool
		want   string
	}{{0, false, "2m0s"}, {5 * time.Second, false, "5s"}, {0, true, "2m0s always"}} {
		s := embeddedService(t, t.TempDir(), func(cfg *Config) { cfg.EmbeddedSync, cfg.EmbeddedSyncAlways = c.every, c.always })
		jc := s.ns.JetStreamConfig()
		got := jc.SyncInterval.String()
		if jc.SyncAlways {
			got += " always"
		}
		if got != c.want {
			t.Errorf("sync %s, always %v: the server syncs %s, want %s", c.every, c.always, got, c.want)
		}
	}
	cfg := Config{Stores: []Store{{Name: "default", Dir: t.TempDir()}}, NATS: NATSConfig{URL: "nats://127.0.0.1:1"}, EmbeddedSyncAlways: true}
	if err := cfg.Validate(); err == nil {
		t.Error("a sync setting with an external server: accepted, want refused")
	}
}

// BenchmarkEnqueueSync is what `--nats-sync always` costs an enqueue on the embedded
// server: the same enqueues (a job per session, as `enqueue` publishes it, and its
// acknowledgement) with the server's default (sync every 2 minutes) and with a sync of
// every write before its acknowledgement. Reported: the latency of one enqueue at a time
// (p50, p99) and the throughput of 16 clients. The data directory is in the test's temp
// dir, or under COMPACTOR_BENCH_DIR (to measure another disk).
// Run: go test -run '^$' -bench EnqueueSync -benchtime 1x ./pipeline
func BenchmarkEnqueueSync(b *testing.B) {
	for _, mode := range []string{"default", "always"} {
		b.Run("sync="+mode, func(b *testing.B) {
			for range b.N {
				dir := b.TempDir()
				if root := os.Getenv("COMPACTOR_BENCH_DIR"); root != "" {
					var err error
					if dir, err = os.MkdirTemp(root, "sync-"); err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { os.RemoveAll(dir) })
				}
				s := embeddedService(b, dir, func(cfg *Config) { cfg.EmbeddedSyncAlways = mode == "always" })
				enqueueBench(b, s)
			}
		})
	}
}

func enqueueBench(b *testing.B, s *Service) {
	ctx := context.Background()
	n := 0
	enqueue := func() error {
		n++
		_, err := Enqueue(ctx, s.Conn(), wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: fmt.Sprintf("sess-%s-%d", randHex(8), n)}, false, 0)
		return err
	}
	for range 50 { // warm up
		if err := enqueue(); err != nil {
			b.Fatal(err)
		}
	}
	// No timer games: an op is the whole measurement (a second or two), so that `-bench .`
	// at its default benchtime runs it once or twice instead of thousands of times (a
	// timer reset inside the op made each look free: b.N grew until the file descriptors
	// of as many servers ran out).
	const sequential = 500
	lat := make([]time.Duration, 0, sequential)
	for range sequential {
		t0 := time.Now()
		if err := enqueue(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	const clients, each = 16, 200
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	t0 := time.Now()
	for c := range clients {
		wg.Go(func() {
			for i := range each {
				_, err := Enqueue(ctx, s.Conn(), wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: fmt.Sprintf("par-%d-%d", c, i)}, false, 0)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(t0)
	if len(errs) > 0 {
		b.Fatal(errs[0])
	}
	p := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(p(0.5), "p50-ms")
	b.ReportMetric(p(0.99), "p99-ms")
	b.ReportMetric(float64(clients*each)/wall.Seconds(), "enqueues/s(16-clients)")
	b.ReportMetric(float64(sequential)/sumDur(lat).Seconds(), "enqueues/s(1-client)")
}

func sumDur(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}
