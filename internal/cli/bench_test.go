package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor-dev/compactor/engine"
	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/wire"
	"github.com/compactor-dev/compactor/worker"
)

// BenchmarkPipelineEngine pushes 500 sessions through the whole service: an embedded
// nats-server, the sweep, JetStream jobs, leases, and the real engine (read, plan with
// tiktoken, serialize, summarize over HTTP, guards, fsynced append), with a fake
// OpenAI-compatible endpoint of fixed 200 ms latency standing in for the LLM. It reports
// jobs/s as a fraction of the ideal (concurrency / latency), measured from the workers'
// start to the last job's result event, and the process CPU time per job (user+sys, NATS
// server and fake LLM included) beyond the fake latency.
//
//	go test -run '^$' -bench PipelineEngine -benchtime 1x ./internal/cli
func BenchmarkPipelineEngine(b *testing.B) {
	for _, conc := range []int{16, 64} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			for range b.N {
				benchPipeline(b, conc, 500, 200*time.Millisecond)
			}
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// writeSessions makes n distinct sessions (own header id) from a corpus file.
func writeSessions(b *testing.B, dir, src string, n int) {
	data, err := os.ReadFile(src)
	if err != nil {
		b.Fatal(err)
	}
	first, rest, _ := strings.Cut(string(data), "\n")
	var h map[string]any
	if err := json.Unmarshal([]byte(first), &h); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		h["id"] = fmt.Sprintf("019ad9b0-0000-7000-8000-%012d", i)
		hb, _ := json.Marshal(h)
		p := filepath.Join(dir, fmt.Sprintf("--p%d--", i%10), fmt.Sprintf("s%04d.jsonl", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(string(hb)+"\n"+rest), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

func benchPipeline(b *testing.B, conc, n int, latency time.Duration) {
	b.StopTimer()
	dir := b.TempDir()
	store := filepath.Join(dir, "sessions")
	writeSessions(b, store, "../../testdata/corpus/12-tricky-custom-message-cut.jsonl", n)
	llm := fakellm.New()
	defer llm.Close()
	llm.SetDefault(fakellm.Behavior{Latency: latency})
	sum, err := summarize.NewOpenAI(summarize.OpenAIConfig{BaseURL: llm.URL(), Model: "fake", APIKey: "k", MaxConcurrent: conc})
	if err != nil {
		b.Fatal(err)
	}
	eng, err := engine.New(sum, engine.Settings{KeepRecentTokens: 2000, ContextWindow: 20000})
	if err != nil {
		b.Fatal(err)
	}
	svc, err := pipeline.New(pipeline.Config{
		Stores: []pipeline.Store{{Name: "default", Dir: store}}, DataDir: filepath.Join(dir, "nats"), EmbeddedPort: -1,
		Concurrency: conc, Idle: -1, Handler: worker.Handler(eng, worker.PiVersions{}, nil, worker.Queues{}), Assessor: worker.Assessor(eng, worker.PiVersions{}),
	})
	if err != nil {
		b.Fatal(err)
	}
	defer svc.Close()
	ctx := context.Background()
	if err := svc.Start(ctx); err != nil {
		b.Fatal(err)
	}
	st, err := svc.Sweep(ctx, nil)
	if err != nil || st.Enqueued != n {
		b.Fatalf("sweep: %v, %+v", err, st)
	}
	// Count final events: the workers are measured from their start to the n-th result.
	done := make(chan struct{})
	var got, ok atomic.Int64
	var jobTime atomic.Int64
	sub, err := svc.Conn().Subscribe("compactor.events.>", func(m *nats.Msg) {
		var ev wire.Event
		if json.Unmarshal(m.Data, &ev) != nil || !ev.Final() {
			return
		}
		if ev.Outcome == pipeline.OutcomeDone {
			ok.Add(1)
		}
		jobTime.Add(ev.DurationMs)
		if got.Add(1) == int64(n) {
			close(done)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	b.StartTimer()
	cpu0, t0 := cpuTime(), time.Now()
	go func() { _ = svc.Run(runCtx) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		b.Fatalf("only %d of %d jobs finished", got.Load(), n)
	}
	wall, cpu := time.Since(t0), cpuTime()-cpu0
	b.StopTimer()
	stop()
	if ok.Load() != int64(n) {
		b.Fatalf("%d of %d jobs done", ok.Load(), n)
	}
	b.ReportMetric(float64(jobTime.Load())/float64(n), "job-ms")
	jobsPerSec := float64(n) / wall.Seconds()
	b.ReportMetric(jobsPerSec, "jobs/s")
	b.ReportMetric(jobsPerSec/(float64(conc)/latency.Seconds()), "fraction-of-ideal")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(n), "cpu-ms/job")
	b.ReportMetric(wall.Seconds(), "wall-s")
}
