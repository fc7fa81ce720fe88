package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics live in a registry per Service (not the global one), so several services in one
// process (tests, benchmarks) do not collide.
type metrics struct {
	reg       *prometheus.Registry
	jobs      *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	inFlight  prometheus.Gauge
	llmTokens *prometheus.CounterVec
	deadLtrs  *prometheus.CounterVec
	swept     *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "compactor_jobs_total", Help: "Job deliveries by store and outcome (done, skipped, retry, failed).",
		}, []string{"store", "kind", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "compactor_job_duration_seconds", Help: "Time from delivery to outcome.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"store", "kind", "outcome"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "compactor_jobs_in_flight", Help: "Jobs being handled right now.",
		}),
		llmTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "compactor_llm_tokens_total", Help: "LLM tokens spent by finished jobs.",
		}, []string{"store"}),
		deadLtrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "compactor_dead_letters_total", Help: "Jobs moved to COMPACTOR_DLQ, by cause.",
		}, []string{"store", "cause"}),
		swept: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "compactor_sweep_files_total", Help: "Files seen by sweeps, by result.",
		}, []string{"store", "result"}),
	}
	m.reg.MustRegister(m.jobs, m.duration, m.inFlight, m.llmTokens, m.deadLtrs, m.swept,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// serveMetrics serves /metrics and /healthz until ctx ends. healthy reports readiness.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, healthy func() error, log *slog.Logger) (net.Addr, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := healthy(); err != nil {
			http.Error(w, "unhealthy: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return ln.Addr(), nil
}
