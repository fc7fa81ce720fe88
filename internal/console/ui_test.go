//go:build ui

package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/operator"
	"github.com/compactor-dev/compactor/wire"
)

// The console in a real browser (headless Chromium through the DevTools protocol), on a
// fleet doing real work: make test-ui. Every check the console promises (docs/operations.md):
//   - every figure of the fleet page equals status --json and /metrics at the same moment;
//   - a new compaction appears without a reload within 2 s;
//   - retrying a dead letter by clicking compacts the session;
//   - pausing a store by clicking stops its jobs, resuming drains them;
//   - an action without the operator's credential, and a cross-site form post, are refused;
//   - no request leaves the console's origin (the browser's own network events).
// With COMPACTOR_UI_SCREENSHOTS=DIR it saves the fleet, store, session and zero-wait pages
// there (docs/operations.md shows them).

// browser is a headless Chromium of the test's own (a fresh profile), and every request
// it sent.
type browser struct {
	ctx      context.Context
	mu       sync.Mutex
	requests []string // every URL the browser asked for, in order
	statuses map[string]int64
}

func chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{os.Getenv("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium: install Debian's chromium (apt-get install chromium; .ci/run does) or set CHROMIUM")
	return ""
}

func newBrowser(t testing.TB) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{ctx: ctx, statuses: map[string]int64{}}
	if err := chromedp.Do(ctx); err != nil { // starts the browser and opens the tab
		t.Fatal(err)
	}
	err := chromedp.Listen(ctx, func(ev any) {
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			b.mu.Lock()
			b.requests = append(b.requests, e.Request.Method+" "+e.Request.URL)
			b.mu.Unlock()
		case *network.EventResponseReceived:
			b.mu.Lock()
			b.statuses[e.Response.URL] = e.Response.Status
			b.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *browser) run(t testing.TB, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// click clicks the element sel selects (a CSS selector) once. The page's live refresh may
// replace the element between chromedp finding it and clicking it ("Could not find node
// with given id"): nothing was clicked then, and the click is tried again on the element
// the refresh put in its place, as a person's click would land on it.
func (b *browser) click(t testing.TB, sel string) {
	t.Helper()
	var last error
	waitfor.Until(t, "a click on "+sel, func() bool {
		ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
		defer cancel()
		last = chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel)))
		if last != nil && !strings.Contains(last.Error(), "Could not find node") {
			t.Fatalf("click %s: %v", sel, last)
		}
		return last == nil
	})
}

// eval runs JavaScript in the page and returns its value.
func eval[T any](t testing.TB, b *browser, js string, opts ...chromedp.EvaluateOption) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, opts...))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitJS waits until the expression is true in the page (polled by the test, not slept).
func (b *browser) waitJS(t testing.TB, what, js string) {
	t.Helper()
	waitfor.Until(t, what, func() bool {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
		return err == nil && ok
	})
}

func (b *browser) sent() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.requests...)
}

// login logs the browser in through the login page.
func (b *browser) login(t testing.TB, console, token string) {
	t.Helper()
	b.run(t, chromedp.Navigate(console+"/"), chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=token]`), token), chromedp.Submit(chromedp.CSS(`input[name=token]`)),
		chromedp.WaitVisible(chromedp.ID(`stores`)))
}

// figures reads the fleet page's figures: store → figure → text.
func (b *browser) figures(t testing.TB) map[string]map[string]string {
	t.Helper()
	return eval[map[string]map[string]string](t, b, `(() => { const o = {}; for (const tr of document.querySelectorAll('#stores tr[data-store]')) {
		const f = {}; for (const td of tr.querySelectorAll('td[data-figure]')) { f[td.dataset.figure] = td.textContent.trim(); if (td.dataset.at !== undefined) f[td.dataset.figure + '-at'] = td.dataset.at; }
		o[tr.dataset.store] = f; } return o; })()`)
}

func TestConsoleInBrowser(t *testing.T) {
	f := startFleet(t, fleetOptions{sessions: 2})
	waitfor.Until(t, "the four sessions compacted", func() bool { return f.done() == 4 })
	f.waitQuiet()
	b := newBrowser(t)
	b.login(t, f.console, f.operator)
	shots := os.Getenv("COMPACTOR_UI_SCREENSHOTS")

	t.Run("fleet figures equal status and metrics", func(t *testing.T) {
		b.run(t, chromedp.Navigate(f.console+"/"), chromedp.WaitVisible(chromedp.ID(`stores`)))
		// Two consecutive page reads that agree bracket the status and /metrics reads: the
		// figures were those at that moment.
		var page map[string]map[string]string
		var st statusJSON
		var metrics string
		waitfor.Until(t, "the page, status and /metrics at one moment", func() bool {
			p1 := b.figures(t)
			st, metrics = f.status(), f.metrics()
			p2 := b.figures(t)
			page = p2
			return fmt.Sprint(p1) == fmt.Sprint(p2)
		})
		if len(page) != 2 {
			t.Fatalf("the fleet page shows %d stores, want 2: %v", len(page), page)
		}
		checked := 0
		for _, s := range st.Stores {
			p := page[s.Store]
			want := map[string]string{"workers": fmt.Sprint(len(s.Workers)), "pending": fmt.Sprint(s.Queue.Pending), "in-flight": fmt.Sprint(s.Queue.InFlight),
				"dead-letters": fmt.Sprint(s.Queue.DeadLetters), "running": fmt.Sprint(len(s.Running)), "paused": "no"}
			if !s.Queue.Oldest.IsZero() {
				want["oldest-at"] = s.Queue.Oldest.Format("2006-01-02T15:04:05.000000000Z07:00")
			} else {
				want["oldest"] = "-"
			}
			for k, v := range want {
				checked++
				if p[k] != v {
					t.Errorf("store %s: the page says %s %q, status --json %q", s.Store, k, p[k], v)
				}
			}
			for metric, fig := range map[string]string{"compactor_queue_pending": "pending", "compactor_queue_in_flight": "in-flight",
				"compactor_queue_dead_letters": "dead-letters", "compactor_store_paused": ""} {
				v := p[fig]
				if fig == "" {
					v = "0"
				}
				checked++
				if line := fmt.Sprintf(`%s{store="%s"} %s`, metric, s.Store, v); !strings.Contains(metrics, line) {
					t.Errorf("store %s: /metrics has no %q", s.Store, line)
				}
			}
		}
		t.Logf("%d figures of the fleet page checked against status --json and /metrics", checked)
	})

	t.Run("a new compaction appears without reload within 2 s", func(t *testing.T) {
		b.run(t, chromedp.Navigate(f.console+"/store/a"), chromedp.WaitVisible(chromedp.ID(`recent`)))
		eval[chromedp.Void](t, b, `window.__stay = 42; undefined`)
		id, file := f.addSession("a", true)
		if code, out, errs := run(t, "enqueue", file, "--store-dir", f.stores["a"], "--store", "a", "--data-dir", f.dataDir); code != 0 {
			t.Fatalf("enqueue: %d %s %s", code, out, errs)
		}
		done := f.waitDoneEvent("a", id)
		b.waitJS(t, "the compaction on the store page", fmt.Sprintf(`document.querySelector('#recent tr[data-session=%q][data-outcome="done"]') !== null`, id))
		seen := time.Now()
		stayed := eval[int](t, b, `window.__stay || 0`)
		if stayed != 42 {
			t.Error("the page was reloaded")
		}
		lag := seen.Sub(done)
		t.Logf("compaction shown %s after its event was recorded", lag.Round(time.Millisecond))
		if lag > 2*time.Second {
			t.Errorf("the compaction appeared %s after its event, want within 2 s", lag)
		}
		if compactions(t, file) != 1 {
			t.Error("the session file has no compaction")
		}
	})

	t.Run("retry a dead letter by clicking", func(t *testing.T) {
		f.llm.Enqueue(fakellm.Behavior{Status: 400, Message: "the request is bad"})
		id, file := f.addSession("b", true)
		b.run(t, chromedp.Navigate(f.console+"/store/b"), chromedp.WaitVisible(chromedp.ID(`deadletters`)))
		if code, out, errs := run(t, "enqueue", file, "--store-dir", f.stores["b"], "--store", "b", "--data-dir", f.dataDir); code != 0 {
			t.Fatalf("enqueue: %d %s %s", code, out, errs)
		}
		sel := fmt.Sprintf(`#deadletters tr[data-session=%q] button.retry`, id)
		b.waitJS(t, "the dead letter on the store page", fmt.Sprintf(`document.querySelector(%q) !== null`, sel))
		b.click(t, sel)
		b.run(t, chromedp.WaitVisible(chromedp.CSS(`p.notice`)))
		waitfor.Until(t, "the retried session compacted", func() bool { return compactions(t, file) == 1 })
		b.waitJS(t, "the dead letter gone from the page", fmt.Sprintf(`document.querySelector('#deadletters tr[data-session=%q]') === null`, id))
	})

	t.Run("pause by clicking stops the store's jobs, resume drains them", func(t *testing.T) {
		b.run(t, chromedp.Navigate(f.console+"/store/a"), chromedp.WaitVisible(chromedp.ID(`pause`)),
			chromedp.SendKeys(chromedp.CSS(`input[name=reason]`), "browser test"))
		b.click(t, `#pause`)
		b.run(t, chromedp.WaitVisible(chromedp.ID(`paused`)))
		// The worker says it in /readyz once its fetch loop has read the pause.
		t0 := time.Now()
		waitfor.Until(t, "store a's worker paused (its /readyz)", func() bool {
			_, _, body := f.get(http.DefaultClient, "/readyz", "")
			return strings.Contains(body, "store a: paused since")
		})
		t.Logf("the worker took no more jobs %s after the click's answer (its /readyz says paused)", time.Since(t0).Round(time.Millisecond))
		waitfor.Until(t, "store a's worker's beat says paused", func() bool {
			for _, s := range f.status().Stores {
				if s.Store == "a" {
					return len(s.Workers) == 1 && s.Workers[0].Paused
				}
			}
			return false
		})
		var files []string
		for range 3 {
			_, file := f.addSession("a", true)
			files = append(files, file)
			if code, out, errs := run(t, "enqueue", file, "--store-dir", f.stores["a"], "--store", "a", "--data-dir", f.dataDir); code != 0 {
				t.Fatalf("enqueue: %d %s %s", code, out, errs)
			}
		}
		b.waitJS(t, "the 3 jobs queued on the page", `(() => { const q = document.querySelectorAll('#queued tbody tr td:first-child'); return q.length === 3 && /^\d+$/.test(q[0].textContent); })()`)
		// A beat of the worker written after the jobs were queued still says paused, and no
		// job was taken: a paused worker's loop reads the pause before each fetch.
		queued := time.Now()
		waitfor.Until(t, "a beat of store a's worker after the jobs were queued", func() bool { return f.beatsOf("a").After(queued) })
		for _, file := range files {
			if compactions(t, file) != 0 {
				t.Fatal("a job of the paused store ran")
			}
		}
		if s := f.storeStatus("a"); s.Queue.Pending != 3 || s.Queue.InFlight != 0 {
			t.Fatalf("paused store's queue: %+v, want 3 pending and none in flight", s.Queue)
		}
		b.click(t, `#resume`)
		b.run(t, chromedp.WaitVisible(chromedp.ID(`pause`)))
		waitfor.Until(t, "the queue drained after the resume", func() bool {
			for _, file := range files {
				if compactions(t, file) != 1 {
					return false
				}
			}
			return true
		})
	})

	t.Run("zero-wait hooks", func(t *testing.T) {
		nc, err := nats.Connect(f.natsURL, nats.Token(readToken(t, filepath.Join(f.dataDir, "nats.token"))))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		reports := []wire.HookReport{
			{V: 1, Store: "a", Outcome: wire.HookHit, Result: wire.HookResultPrepared, ReasonCode: "none", LatencyMs: 3.2},
			{V: 1, Store: "a", Outcome: wire.HookMiss, Result: wire.HookResultExtract, ReasonCode: "not-ready", LatencyMs: 41},
			{V: 1, Store: "b", Outcome: wire.HookMiss, Result: wire.HookResultPi, ReasonCode: "not-prepared", PiReason: "threshold", LatencyMs: 1.1},
			{V: 1, Store: "b", Outcome: wire.HookHit, Result: wire.HookResultPrepared, ReasonCode: "none", LatencyMs: 2.4, Bridged: true},
		}
		for i, r := range reports {
			r.SessionID = fmt.Sprintf("019d0000-0000-7000-8000-00000000000%d", i)
			data, _ := json.Marshal(r)
			if err := nc.Publish(wire.HookSubject(r.Store, r.SessionID), data); err != nil {
				t.Fatal(err)
			}
		}
		b.run(t, chromedp.Navigate(f.console+"/zero-wait"), chromedp.WaitVisible(chromedp.ID(`hook-totals`)))
		b.waitJS(t, "the hooks counted", `(() => { const c = document.querySelectorAll('#hook-totals td[data-figure="hooks"]'); return c.length === 2 && c[0].textContent === '2' && c[1].textContent === '2'; })()`)
	})

	if shots != "" {
		t.Run("screenshots", func(t *testing.T) {
			f.waitQuiet()
			var sid string
			for _, ev := range f.events("a") {
				if ev["outcome"] == "done" {
					sid, _ = ev["sessionId"].(string)
				}
			}
			pages := map[string]string{"console-fleet.png": "/", "console-store.png": "/store/b", "console-session.png": "/session?store=a&id=" + url.QueryEscape(sid),
				"console-zero-wait.png": "/zero-wait"}
			for name, p := range pages {
				b.run(t, chromedp.EmulateViewport(1280, 860), chromedp.Navigate(f.console+p), chromedp.WaitVisible(chromedp.CSS(`main`)))
				ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
				png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(shots, name), png, 0o644); err != nil {
					t.Fatal(err)
				}
				t.Logf("%s: %d bytes", name, len(png))
			}
		})
	}

	var viewerRequests []string
	t.Run("an action without the operator's credential is refused", func(t *testing.T) {
		v := newBrowser(t)
		defer func() { viewerRequests = v.sent() }()
		v.login(t, f.console, f.viewer)
		v.run(t, chromedp.Navigate(f.console+"/store/a"), chromedp.WaitVisible(chromedp.ID(`queued`)))
		buttons := eval[int](t, v, `document.querySelectorAll('#pause, #resume, button.retry, button.purge').length`)
		if buttons != 0 {
			t.Errorf("the viewer's store page has %d action buttons", buttons)
		}
		// The viewer posts the action itself, from the console's own page.
		status := eval[int](t, v, `fetch('/action/pause', {method: 'POST', headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: 'store=a'}).then(r => r.status)`,
			chromedp.EvalAwaitPromise)
		if status != http.StatusForbidden {
			t.Errorf("the viewer's pause: %d, want 403", status)
		}
		if s := f.storeStatus("a"); s.Paused != nil {
			t.Error("the viewer paused the store")
		}
	})

	t.Run("a cross-site form post is refused", func(t *testing.T) {
		// Another site the operator's browser visits posts a form to the console.
		evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%s/action/pause"><input name="store" value="a"><input name="csrf" value="guess"><input name="back" value="/store/a"></form><script>document.getElementById('f').submit()</script>`, f.console)
		}))
		defer evil.Close()
		before := len(b.sent())
		target := f.console + "/action/pause"
		b.mu.Lock()
		delete(b.statuses, target) // the operator's own pause, earlier
		b.mu.Unlock()
		b.run(t, chromedp.Navigate(evil.URL))
		waitfor.Until(t, "the form's post answered", func() bool {
			b.mu.Lock()
			defer b.mu.Unlock()
			_, ok := b.statuses[target]
			return ok
		})
		b.mu.Lock()
		code := b.statuses[target]
		b.mu.Unlock()
		if code != http.StatusForbidden && code != http.StatusUnauthorized {
			t.Errorf("the cross-site post was answered %d", code)
		}
		if s := f.storeStatus("a"); s.Paused != nil {
			t.Error("the cross-site post paused the store")
		}
		b.mu.Lock()
		b.requests = b.requests[:before] // the other site's own requests are the test's, not the console's
		b.mu.Unlock()
	})

	t.Run("records carrying markup are rendered inert", func(t *testing.T) {
		// What ran in the page: any alert (the forged markup's), any blocked script or
		// handler (the Content-Security-Policy's reports), recorded from before each load.
		if _, err := chromedp.Call(b.ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: `
			window.__ran = []; window.__blocked = [];
			for (const f of ['alert', 'confirm', 'prompt']) { window[f] = (m) => { window.__ran.push(f + ':' + m); }; }
			document.addEventListener('securitypolicyviolation', (e) => { window.__blocked.push(e.violatedDirective + ' ' + e.blockedURI); });`}); err != nil {
			t.Fatal(err)
		}
		b.run(t, chromedp.Navigate(f.console+"/zero-wait"), chromedp.WaitVisible(chromedp.ID(`hook-totals`))) // the hooks are followed from now
		fg := forgeRecords(t, f, true)
		before := len(b.sent())
		pages := []string{"/", "/store/b", "/session?store=b&id=" + url.QueryEscape(fg.session), "/zero-wait", "/charts?store=b",
			fmt.Sprintf("/deadletter?store=b&seq=%d", fg.dlSeq)}
		for _, p := range pages {
			b.run(t, chromedp.Navigate(f.console+p), chromedp.WaitVisible(chromedp.CSS(`main`)))
			b.waitJS(t, p+" showing the forged text", `document.querySelector('main').textContent.includes('<img src=x onerror=alert(1)><script>alert(2)</script>')`)
			// Once as loaded, once after a live refresh (the server's partial, put in place by
			// the script through its Trusted Types policy).
			for _, when := range []string{"loaded", "refreshed"} {
				if when == "refreshed" {
					b.waitJS(t, p+" refreshed", `document.documentElement.dataset.refreshed !== undefined`)
				}
				got := eval[map[string]any](t, b, `(() => {
					const m = document.querySelector('main');
					return {
						elements: m.querySelectorAll('img, iframe, object, embed, script, svg:not(.chart)').length,
						handlers: [...m.querySelectorAll('*')].filter(e => [...e.attributes].some(a => a.name.startsWith('on') || a.name === 'srcdoc')).length,
						jsLinks: [...m.querySelectorAll('[href], [src], [action]')].filter(e => /^\s*javascript:/i.test(e.getAttribute('href') || e.getAttribute('src') || e.getAttribute('action') || '')).length,
						raw: /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]/.test(m.innerText + m.innerHTML),
						escaped: m.textContent.includes('\\x1b[31m\\u202eRTL'),
						ran: window.__ran.length, blocked: window.__blocked.join('; '),
					}; })()`)
				if got["elements"].(float64) != 0 || got["handlers"].(float64) != 0 || got["jsLinks"].(float64) != 0 || got["raw"].(bool) || !got["escaped"].(bool) ||
					got["ran"].(float64) != 0 || got["blocked"].(string) != "" {
					t.Errorf("%s (%s): the forged records are not inert: %v", p, when, got)
				}
				if when == "loaded" {
					eval[bool](t, b, `delete document.documentElement.dataset.refreshed; true`)
				}
			}
		}
		// The policy holds: a script may not write markup but through the console's policy.
		if got := eval[string](t, b, `(() => { try { document.body.insertAdjacentHTML('beforeend', '<b>x</b>'); return 'written'; } catch (e) { return e.name; } })()`); got != "TypeError" {
			t.Errorf("a string written as markup: %s, want Trusted Types' TypeError", got)
		}
		for _, r := range b.sent()[before:] {
			_, u, _ := strings.Cut(r, " ")
			if strings.HasSuffix(u, "/x") || strings.Contains(u, "evil") || strings.HasPrefix(u, "javascript:") {
				t.Errorf("the forged markup made the browser ask for %s", u)
			}
		}
	})

	t.Run("no request leaves the origin", func(t *testing.T) {
		n := 0
		for _, r := range append(b.sent(), viewerRequests...) {
			_, u, _ := strings.Cut(r, " ")
			if !strings.HasPrefix(u, f.console+"/") && !strings.HasPrefix(u, "data:") {
				t.Errorf("the browser asked another origin: %s", r)
			}
			n++
		}
		if n < 20 {
			t.Errorf("only %d requests seen: the network events are not recorded", n)
		}
		t.Logf("%d requests, all to %s", n, f.console)
	})

}

// waitDoneEvent waits for the done event of a session and returns when it was recorded.
func (f *fleet) waitDoneEvent(store, id string) time.Time {
	f.t.Helper()
	var at time.Time
	waitfor.Until(f.t, "the session's done event", func() bool {
		for _, ev := range f.events(store) {
			if ev["sessionId"] == id && ev["outcome"] == "done" {
				at, _ = time.Parse(time.RFC3339Nano, ev["at"].(string))
				return true
			}
		}
		return false
	})
	return at
}

// storeStatus is a store's part of status --json.
func (f *fleet) storeStatus(store string) struct {
	Queue  *operator.StoreQueue
	Paused *fleetops.PauseRecord
} {
	for _, s := range f.status().Stores {
		if s.Store == store {
			return struct {
				Queue  *operator.StoreQueue
				Paused *fleetops.PauseRecord
			}{s.Queue, s.Paused}
		}
	}
	f.t.Fatalf("no store %s in status", store)
	return struct {
		Queue  *operator.StoreQueue
		Paused *fleetops.PauseRecord
	}{}
}

// beatsOf is the time of the latest beat of a store's workers.
func (f *fleet) beatsOf(store string) time.Time {
	var last time.Time
	for _, s := range f.status().Stores {
		if s.Store == store {
			for _, w := range s.Workers {
				if w.At.After(last) {
					last = w.At
				}
			}
		}
	}
	return last
}
