package pipeline

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/wire"
)

// BenchmarkPipeline pushes 500 sessions through the real pipeline (embedded nats-server,
// real files, leases, events) with a fake handler of fixed 200 ms latency standing in for
// the LLM. It reports throughput as a fraction of the ideal concurrency/latency and the
// process CPU time per job (user+sys, NATS server included) outside the fake latency.
// Run: go test -run '^$' -bench Pipeline -benchtime 1x ./pipeline
func BenchmarkPipeline(b *testing.B) {
	for _, conc := range []int{16, 64} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			for range b.N {
				benchOnce(b, conc, 500, 200*time.Millisecond)
			}
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchOnce(b *testing.B, conc, n int, latency time.Duration) {
	b.StopTimer()
	bd := newBundle(b)
	type sess struct{ rel, sid, leaf string }
	var sessions []sess
	for i := range n {
		rel := fmt.Sprintf("sessions/--p%d--/s%04d.jsonl", i%10, i)
		sid, leaf := writeSession(b, bd.dir, rel)
		sessions = append(sessions, sess{rel, sid, leaf})
	}
	h := &fakeHandler{delay: latency}
	cfg := bd.config(h)
	cfg.Concurrency = conc
	cfg.AckWait = 30 * time.Second
	cfg.LeaseTTL = 30 * time.Second
	svc := bd.service(cfg)
	b.StartTimer()
	cpu0, t0 := cpuTime(), time.Now()
	stop := bd.run(svc)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 8 {
				s := sessions[i]
				if _, err := Enqueue(context.Background(), bd.nc, wire.Job{Kind: wire.KindCompact, Store: "default", Path: s.rel, SessionID: s.sid, ExpectLeafID: s.leaf}, false, 0); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	for bd.pending() > 0 || svc.flights.count() > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	wall := time.Since(t0)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	stop()
	for _, s := range sessions {
		if c := countType(b, filepath.Join(bd.dir, s.rel), "compaction"); c != 1 {
			b.Fatalf("%s: %d compactions", s.rel, c)
		}
	}
	jobsPerSec := float64(n) / wall.Seconds()
	ideal := float64(conc) / latency.Seconds()
	b.ReportMetric(jobsPerSec, "jobs/s")
	b.ReportMetric(jobsPerSec/ideal, "fraction-of-ideal")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(n), "cpu-ms/job")
	b.ReportMetric(wall.Seconds(), "wall-s")
}
