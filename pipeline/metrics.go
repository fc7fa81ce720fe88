package pipeline

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/compactor-dev/compactor/agents"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/spend"
	"github.com/compactor-dev/compactor/wire"
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
	llmInput  *prometheus.CounterVec
	llmCached *prometheus.CounterVec
	llmOutput *prometheus.CounterVec
	deadLtrs  *prometheus.CounterVec
	swept     *prometheus.CounterVec
	// handedBack counts deliveries given back without a handler attempt, by reason:
	// version, spend, shutdown (versions.go).
	handedBack *prometheus.CounterVec
	// spendUsed and spendLimit: the spend limits' current windows (spend.go).
	spendUsed, spendLimit *prometheus.GaugeVec
	// paused: 1 while a store is paused (pause.go).
	paused *prometheus.GaugeVec
	// foreign counts records refused because they name another store or session than
	// the subject or key they came on (foreign.go).
	foreign *prometheus.CounterVec
	// piUnknown counts jobs and bridge requests served for a Pi release compactor does not
	// know; piSeen bounds its version label (countPiUnknown).
	piUnknown *prometheus.CounterVec
	piMu      sync.Mutex
	piSeen    map[string]bool
}

// maxPiVersionLabels bounds the distinct versions compactor_pi_version_unknown_total keeps:
// the version comes from jobs, which any tenant may send, so after this many the rest are
// counted as "other". Versions are validated first (pi.ParseRelease: x.y.z, at most
// pi.MaxReleaseLen characters) and normalized ("v9.9.9" and "9.9.9" are one).
const maxPiVersionLabels = 16

// countPiUnknown counts one job or bridge request served for version, which compactor does
// not know.
func (m *metrics) countPiUnknown(store, version string) {
	m.piMu.Lock()
	if !m.piSeen[version] {
		if len(m.piSeen) >= maxPiVersionLabels {
			version = "other"
		} else {
			m.piSeen[version] = true
		}
	}
	m.piMu.Unlock()
	m.piUnknown.WithLabelValues(store, version).Inc()
}

// countLLM adds an event's model usage to the token counters.
func (m *metrics) countLLM(ev wire.Event) {
	model := ev.LLMModel
	if model == "" {
		model = "unknown"
	}
	if ev.LLMTokens > 0 {
		m.llmTokens.WithLabelValues(ev.Store, model).Add(float64(ev.LLMTokens))
	}
	for _, c := range []struct {
		v *prometheus.CounterVec
		n int
	}{{m.llmInput, ev.LLMInputTokens}, {m.llmCached, ev.LLMCachedInputTokens}, {m.llmOutput, ev.LLMOutputTokens}} {
		if c.n > 0 {
			c.v.WithLabelValues(ev.Store, ev.Kind, model).Add(float64(c.n))
		}
	}
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
			Name: "compactor_llm_tokens_total", Help: "LLM tokens spent by finished jobs, by the model that billed them.",
		}, []string{"store", "model"}),
		llmInput: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "compactor_llm_input_tokens_total", Help: "LLM input tokens billed to finished jobs (cached ones included).",
		}, []string{"store", "kind", "model"}),
		llmCached: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "compactor_llm_cached_input_tokens_total",
			Help: "LLM input tokens the endpoint served from its prompt cache (usage.prompt_tokens_details.cached_tokens), where it reports them.",
		}, []string{"store", "kind", "model"}),
		llmOutput: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "compactor_llm_output_tokens_total", Help: "LLM output tokens of finished jobs.",
		}, []string{"store", "kind", "model"}),
		deadLtrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "compactor_dead_letters_total", Help: "Jobs moved to COMPACTOR_DLQ, by cause.",
		}, []string{"store", "cause"}),
		swept: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "compactor_sweep_files_total", Help: "Files seen by sweeps, by result.",
		}, []string{"store", "result"}),
		handedBack: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "compactor_jobs_handed_back_total",
			Help: "Deliveries handed back to the queue without a handler attempt, by reason: version (a job schema version this worker does not understand), spend (a spend limit reached), shutdown.",
		}, []string{"store", "reason"}),
		foreign: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "compactor_foreign_records_total",
			Help: "Records refused because they name another store or session than the subject or key they came on, by the store of that subject or key and the kind of record (hook, bridge, prepared, beat, owner, sweep).",
		}, []string{"store", "kind"}),
	}
	m.piUnknown = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "compactor_pi_version_unknown_total",
		Help: "Jobs and bridge requests served for a Pi release compactor does not know, by store and release (at most 16 releases, then \"other\"); --pi-unknown says how they were served.",
	}, []string{"store", "version"})
	m.piSeen = map[string]bool{}
	m.spendUsed, m.spendLimit = spend.Gauges()
	m.paused = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "compactor_store_paused", Help: "1 while the store is paused (compactor pause): its workers take no jobs and its queue keeps them.",
	}, []string{"store"})
	m.reg.MustRegister(m.jobs, m.duration, m.inFlight, m.llmTokens, m.llmInput, m.llmCached, m.llmOutput, m.deadLtrs, m.swept, m.handedBack,
		m.spendUsed, m.spendLimit, m.paused, m.foreign, m.piUnknown,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// MetricNames are the names of every metric a worker exports (its /metrics), series or
// not yet: the deploy/ dashboard and alert rules are checked against them. A metric
// registered elsewhere than newMetrics must be added here (its constructor called on m.reg).
func MetricNames() []string {
	m := newMetrics()
	m.setBuildInfo("x")
	agents.RegisterMetrics(m.reg)
	return DescribedNames(m.reg, &queueCollector{})
}

// DescribedNames are the metric names the collectors describe.
func DescribedNames(cs ...prometheus.Collector) []string {
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		for _, c := range cs {
			c.Describe(ch)
		}
		close(ch)
	}()
	seen := map[string]bool{}
	var out []string
	for d := range ch {
		// A Desc says its name only in its String(): Desc{fqName: "NAME", ...}.
		str := d.String()
		if i := strings.Index(str, `fqName: "`); i >= 0 {
			rest := str[i+len(`fqName: "`):]
			if j := strings.IndexByte(rest, '"'); j > 0 && !seen[rest[:j]] {
				seen[rest[:j]] = true
				out = append(out, rest[:j])
			}
		}
	}
	slices.Sort(out)
	return out
}

// setBuildInfo exports the program's version (compactor_build_info, 1): the version skew
// of a fleet is the count of its versions.
func (m *metrics) setBuildInfo(version string) {
	if version == "" {
		version = "unknown"
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "compactor_build_info", Help: "1, labelled with the version this worker runs.",
		ConstLabels: prometheus.Labels{"version": version}})
	g.Set(1)
	_ = m.reg.Register(g)
}

// queueCollector reports the depth of each store's queue when scraped, from JetStream
// itself (the same figures whichever worker is scraped): jobs waiting for a worker, jobs
// delivered and not answered yet (running, or waiting for a retry's delay), and dead
// letters. A store whose figures cannot be read within 2 s is left out of that scrape.
type queueCollector struct{ s *Service }

var (
	descPending  = prometheus.NewDesc("compactor_queue_pending", "Jobs queued and not yet delivered to a worker.", []string{"store"}, nil)
	descInFlight = prometheus.NewDesc("compactor_queue_in_flight",
		"Jobs delivered and not answered yet: running, or waiting for a retry's delay.", []string{"store"}, nil)
	descDead = prometheus.NewDesc("compactor_queue_dead_letters", "Dead letters kept in COMPACTOR_DLQ (see compactor dlq).", []string{"store"}, nil)
	// DescOldest is the age of a store's oldest job: exported by the processes that may
	// read the queue by sequence (the embedded setup's service, a worker run with the
	// admin's credentials, and compactor console), not by a store's worker.
	DescOldest = prometheus.NewDesc("compactor_queue_oldest_age_seconds",
		"Age of the store's oldest job in the queue (waiting, running or waiting for a retry); 0 when the queue is empty.", []string{"store"}, nil)
	descReady = prometheus.NewDesc("compactor_ready", "1 when this worker can work jobs now (what /readyz says), 0 otherwise.", nil, nil)
)

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPending
	ch <- descInFlight
	ch <- descDead
	ch <- DescOldest
	ch <- descReady
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, st := range c.s.cfg.Stores {
		if ci, err := c.s.res.cons[st.Name].Info(ctx); err == nil {
			ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(ci.NumPending), st.Name)
			ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(ci.NumAckPending), st.Name)
		}
		if ci, err := c.s.res.dlqCons[st.Name].Info(ctx); err == nil {
			ch <- prometheus.MustNewConstMetric(descDead, prometheus.GaugeValue, float64(ci.NumPending), st.Name)
		}
		if c.s.cfg.Setup {
			if age, ok := c.oldestAge(ctx, st.Name); ok {
				ch <- prometheus.MustNewConstMetric(DescOldest, prometheus.GaugeValue, age, st.Name)
			}
		}
	}
	ready, _ := c.s.ready(ctx)
	v := 0.0
	if ready {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, v)
}

// oldestAge is the age in seconds of the store's oldest job (0: none).
func (c *queueCollector) oldestAge(ctx context.Context, store string) (float64, bool) {
	str, err := c.s.res.js.Stream(ctx, wire.StreamJobs)
	if err != nil {
		return 0, false
	}
	at, err := fleetops.OldestJob(ctx, str, wire.JobsPrefix+store+".>")
	if err != nil {
		return 0, false
	}
	if at.IsZero() {
		return 0, true
	}
	return max(0, time.Since(at).Seconds()), true
}

// RequireBearer serves h to requests that carry "Authorization: Bearer TOKEN" (every
// request when token is ""), and 401 to the others.
func RequireBearer(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="compactor metrics"`)
			http.Error(w, "unauthorized: /metrics takes the scraper's bearer token (--metrics-token-file)", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// serveMetrics serves /metrics, /healthz and /readyz until ctx ends; wait returns once the
// server has stopped. healthy reports liveness (connected to NATS), ready readiness
// (readiness.go).
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, healthy func() error,
	ready func(context.Context) (bool, []string), log *slog.Logger, rest http.Handler, token string) (net.Addr, func(), error) {
	mux := http.NewServeMux()
	if rest != nil {
		mux.Handle("/", rest)
	}
	mux.Handle("/metrics", RequireBearer(token, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := healthy(); err != nil {
			http.Error(w, "unhealthy: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ok, lines := ready(r.Context())
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprint(w, readyText(ok, lines))
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	})
	wg.Go(func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			_ = srv.Close()
		}
	})
	return ln.Addr(), wg.Wait, nil
}
