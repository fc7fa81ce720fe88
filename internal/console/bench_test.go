//go:build ui

package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/operator"
	"github.com/compactor-dev/compactor/wire"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor-dev/compactor/internal/console"
	"github.com/compactor-dev/compactor/internal/natstest"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/pipeline"
)

// The console's first page (the fleet) on a large fleet: 10,000 sessions, 1,000 dead
// letters, 100,000 events (and 2,000 jobs queued in a paused store), against the same page
// on an empty fleet in the same run. The time is the browser's own (Navigation Timing:
// from the navigation's start to the load event); the server's CPU per page is the
// process's CPU time (getrusage) over the navigations, which also counts this process's
// embedded nats-server and the DevTools client, so it bounds the console's from above;
// a loop of plain HTTP GETs gives the console's alone. Opening the fleet view (reading
// the 100,000 events into the index) is measured once, with the heap it adds.
//
// make bench-ui
func BenchmarkConsoleFirstPage(b *testing.B) {
	for _, size := range []struct {
		name                          string
		sessions, perSession, letters int
	}{{"empty", 0, 0, 0}, {"10k-sessions-1k-dead-100k-events", 10_000, 10, 1_000}} {
		b.Run(size.name, func(b *testing.B) {
			srv := bigFleet(b, size.sessions, size.perSession, size.letters)
			nc, err := nats.Connect(srv)
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			var before runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			t0 := time.Now()
			view, err := operator.OpenFleetView(context.Background(), []operator.FleetAccount{{Conn: nc}}, operator.FleetViewOptions{Events: true, DeadLetters: true, Hooks: true})
			if err != nil {
				b.Fatal(err)
			}
			defer view.Close()
			open := time.Since(t0)
			var after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.Logf("fleet view open in %s: %d events indexed (%d sessions), heap +%.1f MiB", open.Round(time.Millisecond), view.Events().Len(),
				view.Events().Sessions(), float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/(1<<20))
			// The fleet as meant: every event indexed, store b's 2,000 jobs queued, none worked.
			if n := view.Events().Len(); n != size.sessions*size.perSession {
				b.Fatalf("%d events indexed, want %d", n, size.sessions*size.perSession)
			}
			for _, sv := range view.Snapshot().Stores {
				if want := map[bool]uint64{true: 2000}[sv.Store == "b" && size.sessions > 0]; sv.Queue.Pending != want {
					b.Fatalf("store %s: %d jobs queued, want %d", sv.Store, sv.Queue.Pending, want)
				}
			}
			c, err := console.New(console.Options{Open: func(context.Context) (*operator.FleetView, error) { return view, nil },
				Tokens: console.Tokens{Viewer: strings.Repeat("v", 32), Operator: strings.Repeat("o", 32)}})
			if err != nil {
				b.Fatal(err)
			}
			web := httptest.NewServer(c)
			defer web.Close()

			// The console alone: GET / with the viewer's token.
			get := func(path string) {
				req, _ := http.NewRequest(http.MethodGet, web.URL+path, nil)
				req.Header.Set("Authorization", "Bearer "+strings.Repeat("v", 32))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("GET %s: %d", path, resp.StatusCode)
				}
			}
			for _, p := range []string{"/", "/store/b", "/store/a"} {
				get(p)
				const n = 50
				cpu0, t0 := cpuTime(), time.Now()
				for range n {
					get(p)
				}
				b.Logf("GET %s (HTTP, no browser): %.2f ms a page, %.2f ms CPU a page (the whole process)", p,
					float64(time.Since(t0).Microseconds())/1000/n, float64((cpuTime()-cpu0).Microseconds())/1000/n)
			}

			br := newBrowser(b)
			br.login(b, web.URL, strings.Repeat("v", 32))
			var loads, responses []float64
			cpu0 := cpuTime()
			b.ResetTimer()
			for range b.N {
				br.run(b, chromedp.Navigate(web.URL+"/"), chromedp.WaitVisible(chromedp.ID(`stores`)))
				timing := eval[map[string]float64](b, br, `(() => { const n = performance.getEntriesByType('navigation')[0];
					return {response: n.responseEnd - n.startTime, load: n.loadEventEnd - n.startTime}; })()`)
				loads, responses = append(loads, timing["load"]), append(responses, timing["response"])
			}
			b.StopTimer()
			cpu := cpuTime() - cpu0
			slices.Sort(loads)
			slices.Sort(responses)
			b.ReportMetric(loads[len(loads)/2], "load-ms-median")
			b.ReportMetric(loads[len(loads)*95/100], "load-ms-p95")
			b.ReportMetric(responses[len(responses)/2], "response-ms-median")
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "process-cpu-ms/page")
			b.Logf("first page in the browser, %d loads: load event median %.1f ms, p95 %.1f ms, max %.1f ms; response end median %.1f ms",
				len(loads), loads[len(loads)/2], loads[len(loads)*95/100], loads[len(loads)-1], responses[len(responses)/2])
		})
	}
}

// cpuTime is this process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// bigFleet sets up a fleet of stores a and b on a nats-server of this process, with its
// workers (store b paused, 2,000 jobs queued there), and fills it as a fleet that has
// worked a day would be: sessions events per session (a retry, then done, in turn) and
// dead letters. It returns the server's URL.
func bigFleet(b testing.TB, sessions, perSession, letters int) string {
	b.Helper()
	ns := natstest.StartServer(b)
	dirs := map[string]string{"a": b.TempDir(), "b": b.TempDir()}
	cfg := pipeline.Config{
		Stores: []pipeline.Store{{Name: "a", Dir: dirs["a"]}, {Name: "b", Dir: dirs["b"]}}, NATS: access.NATSConfig{URL: ns.ClientURL()}, Setup: true,
		MetricsAddr: "127.0.0.1:0",
		Handler: pipeline.HandlerFunc(func(ctx context.Context, job wire.Job, file string) (wire.Result, error) {
			return wire.Result{}, pipeline.Skip("benchmark")
		}),
	}
	svc, err := pipeline.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done; svc.Close() })
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	// Store b paused, once the fleet is set up (its settings list the stores), and its
	// worker's fetch loop holding (its gauge set as it reads the pause, before it would
	// fetch): the 2,000 jobs published below stay queued (without this wait, a fetch loop
	// that read "not paused" less than a second before worked 697 of them in one run).
	waitfor.Until(b, "the fleet set up and store b paused", func() bool {
		_, err := fleetops.SetPaused(context.Background(), nc, "b", true, "benchmark", "bench")
		return err == nil
	})
	waitfor.Until(b, "store b's worker holding its jobs", func() bool {
		addr := svc.MetricsAddr()
		if addr == nil {
			return false
		}
		resp, err := http.Get("http://" + addr.String() + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		m, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(m), `compactor_store_paused{store="b"} 1`)
	})
	js, _ := jetstream.New(nc)
	pub := func(subject string, v any) {
		data, _ := json.Marshal(v)
		if _, err := js.PublishAsync(subject, data); err != nil {
			b.Fatal(err)
		}
	}
	flush := func() {
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(2 * time.Minute):
			b.Fatal("publishes not acknowledged")
		}
	}
	now := time.Now().UTC()
	seq := uint64(0)
	for i := range sessions {
		store := []string{"a", "b"}[i%2]
		id := fmt.Sprintf("019d%04x-0000-7000-8000-%012x", i>>12, i)
		path := "--home-dev-p--/2026-01-01T00-00-00-000Z_" + id + ".jsonl"
		for k := range perSession {
			seq++
			ev := wire.Event{V: 1, JobID: fmt.Sprintf("compact:%s:%d", id, k/2), JobSeq: uint64(i*perSession + k/2*2 + 1), JobRef: wire.JobRef{Store: store, SessionID: id, Path: path, Kind: wire.KindCompact}, Attempt: k%2 + 1, Worker: "bench-worker", At: now.Add(-time.Duration(sessions*perSession-int(seq)) * 500 * time.Millisecond)}
			if k%2 == 0 {
				ev.Outcome, ev.Reason, ev.RetryInMs = pipeline.OutcomeRetry, "llm transient: HTTP 503", 5000
			} else {
				ev.Outcome, ev.EntryID, ev.TokensBefore, ev.TokensAfter = pipeline.OutcomeDone, fmt.Sprintf("%08x", seq), 180_000, 22_000
				ev.LLMTokens, ev.LLMInputTokens, ev.LLMCachedInputTokens, ev.LLMOutputTokens, ev.LLMModel = 160_000, 150_000, 90_000, 10_000, "model-x"
			}
			pub(wire.JobEventSubject(store, id, ev.JobSeq), ev)
		}
		if i%1000 == 999 {
			flush()
		}
	}
	flush()
	for i := range letters {
		store := []string{"a", "b"}[i%2]
		id := fmt.Sprintf("019e%04x-0000-7000-8000-%012x", i>>12, i)
		job := wire.Job{V: 1, ID: "compact:" + id, Kind: wire.KindCompact, Store: store, SessionID: id, Path: "--home-dev-p--/" + id + ".jsonl"}
		payload, _ := json.Marshal(job)
		pub("compactor.dlq."+store+"."+wire.SessionToken(id), wire.DeadLetter{V: 1, Subject: job.Subject(), JobSeq: uint64(i + 1), Job: payload,
			Reason: "llm permanent: HTTP 400", Error: "the request is bad", Deliveries: 1, Worker: "bench-worker", At: now})
	}
	flush()
	if sessions > 0 {
		for i := range 2000 {
			id := fmt.Sprintf("019f%04x-0000-7000-8000-%012x", i>>12, i)
			job := wire.Job{V: 1, ID: "compact:" + id, Kind: wire.KindCompact, Store: "b", SessionID: id, Path: "--home-dev-p--/" + id + ".jsonl",
				RequestedAt: now}
			pub(job.Subject(), job)
		}
		flush()
	}
	return ns.ClientURL()
}
