package console_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/internal/waitfor"
)

// The console over HTTP on a fleet doing real work: who may read and act, the headers,
// the figures against status and /metrics, pause and resume, retry of a dead letter, and
// what a viewer does not see.
func TestConsoleOverHTTP(t *testing.T) {
	f := startFleet(t, fleetOptions{sessions: 2})
	waitfor.Until(t, "the four sessions compacted", func() bool { return f.done() == 4 })

	anon := f.client()
	t.Run("reading needs a token", func(t *testing.T) {
		code, hdr, _ := f.get(anon, "/", "")
		if code != http.StatusSeeOther || !strings.HasPrefix(hdr.Get("Location"), "/login") {
			t.Errorf("GET / without a token: %d to %q, want a redirect to /login", code, hdr.Get("Location"))
		}
		for _, p := range []string{"/api/fleet", "/api/store?store=a", "/api/zero-wait"} {
			if code, _, _ := f.get(anon, p, ""); code != http.StatusUnauthorized {
				t.Errorf("GET %s without a token: %d, want 401", p, code)
			}
			if code, _, _ := f.get(anon, p, "not-a-token-of-this-console"); code != http.StatusUnauthorized {
				t.Errorf("GET %s with a wrong token: %d, want 401", p, code)
			}
		}
		if code := f.login(f.client(), "wrong-token-0123456789"); code != http.StatusUnauthorized {
			t.Errorf("login with a wrong token: %d, want 401", code)
		}
	})

	t.Run("headers", func(t *testing.T) {
		c := f.client()
		f.login(c, f.viewer)
		for _, p := range []string{"/", "/store/a", "/zero-wait", "/charts", "/static/console.js", "/login"} {
			_, hdr, _ := f.get(c, p, "")
			csp := hdr.Get("Content-Security-Policy")
			if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "http") ||
				!strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "form-action 'self'") {
				t.Errorf("%s: Content-Security-Policy %q allows more than this origin", p, csp)
			}
			if hdr.Get("X-Content-Type-Options") != "nosniff" || hdr.Get("X-Frame-Options") != "DENY" {
				t.Errorf("%s: headers %v", p, hdr)
			}
		}
		// The session cookie: HttpOnly, SameSite=Strict.
		c2 := f.client()
		req, _ := http.NewRequest(http.MethodPost, f.console+"/login", strings.NewReader(url.Values{"token": {f.viewer}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := c2.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		ck := resp.Header.Get("Set-Cookie")
		if !strings.Contains(ck, "HttpOnly") || !strings.Contains(ck, "SameSite=Strict") {
			t.Errorf("session cookie %q", ck)
		}
	})

	viewer, operator := f.client(), f.client()
	if code := f.login(viewer, f.viewer); code != http.StatusSeeOther {
		t.Fatalf("viewer login: %d", code)
	}
	if code := f.login(operator, f.operator); code != http.StatusSeeOther {
		t.Fatalf("operator login: %d", code)
	}
	csrf := func(c *http.Client) string {
		_, _, body := f.get(c, "/store/a", "")
		m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
		if m == nil {
			return ""
		}
		return m[1]
	}
	opCSRF := csrf(operator)
	if opCSRF == "" {
		t.Fatal("the operator's store page has no CSRF token")
	}

	t.Run("no secret in pages", func(t *testing.T) {
		for _, c := range []*http.Client{viewer, operator} {
			for _, p := range []string{"/", "/store/a", "/store/b", "/zero-wait", "/charts", "/api/fleet", "/api/store?store=b"} {
				_, _, body := f.get(c, p, "")
				if strings.Contains(body, f.viewer) || strings.Contains(body, f.operator) {
					t.Errorf("%s shows a console token", p)
				}
			}
		}
		for _, p := range []*proc{f.main, f.second} {
			if strings.Contains(p.log.String(), f.viewer) || strings.Contains(p.log.String(), f.operator) {
				t.Error("a console token is in the log")
			}
		}
	})

	t.Run("actions need the operator, this origin and the CSRF token", func(t *testing.T) {
		pause := url.Values{"store": {"a"}, "back": {"/store/a"}}
		cases := []struct {
			name    string
			c       *http.Client
			form    url.Values
			headers map[string]string
			want    int
		}{
			{"no credentials", anon, pause, nil, http.StatusUnauthorized},
			{"viewer", viewer, withCSRF(pause, csrf(viewer)), nil, http.StatusForbidden},
			{"operator without the CSRF token", operator, pause, nil, http.StatusForbidden},
			{"operator with a wrong CSRF token", operator, withCSRF(pause, "x"+opCSRF), nil, http.StatusForbidden},
			{"operator from another site", operator, withCSRF(pause, opCSRF), map[string]string{"Origin": "http://127.0.0.1:1"}, http.StatusForbidden},
			{"operator, cross-site fetch metadata", operator, withCSRF(pause, opCSRF), map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
			{"viewer's token as a bearer", http.DefaultClient, pause, map[string]string{"Authorization": "Bearer " + f.viewer}, http.StatusForbidden},
		}
		for _, c := range cases {
			if code, body := f.post(c.c, "/action/pause", c.form, c.headers); code != c.want {
				t.Errorf("%s: %d %s, want %d", c.name, code, body, c.want)
			}
		}
		if code, _, body := f.get(http.DefaultClient, "/api/fleet", f.viewer); code != 200 || strings.Contains(body, `"paused"`) {
			t.Errorf("a refused action paused the store:\n%s", body)
		}
	})

	t.Run("figures equal status and metrics", func(t *testing.T) {
		// A quiet fleet (every job answered): the figures hold still while they are compared.
		f.waitQuiet()
		fj, st := f.apiFleet(), f.status()
		metrics := f.metrics()
		_, _, page := f.get(viewer, "/", "")
		if len(fj.Stores) != 2 || len(st.Stores) != 2 {
			t.Fatalf("stores: console %d, status %d", len(fj.Stores), len(st.Stores))
		}
		for i, sv := range fj.Stores {
			ss := st.Stores[i]
			if sv.Store != ss.Store || len(sv.Workers) != len(ss.Workers) || sv.Queue.Pending != ss.Queue.Pending ||
				sv.Queue.InFlight != ss.Queue.InFlight || sv.Queue.DeadLetters != ss.Queue.DeadLetters || !sv.Queue.Oldest.Equal(ss.Queue.Oldest) ||
				len(sv.Running) != len(ss.Running) || (sv.Paused == nil) != (ss.Paused == nil) {
				t.Errorf("store %s: console %+v, status %+v", sv.Store, sv, ss)
			}
			for fig, want := range map[string]int{"workers": len(sv.Workers), "pending": int(sv.Queue.Pending), "in-flight": int(sv.Queue.InFlight),
				"dead-letters": int(sv.Queue.DeadLetters), "running": len(sv.Running)} {
				if got := pageFigure(t, page, sv.Store, fig); got != fmt.Sprint(want) {
					t.Errorf("store %s: the page says %s %q, the API %d", sv.Store, fig, got, want)
				}
			}
			for metric, want := range map[string]uint64{"compactor_queue_pending": sv.Queue.Pending, "compactor_queue_in_flight": sv.Queue.InFlight,
				"compactor_queue_dead_letters": sv.Queue.DeadLetters} {
				if !strings.Contains(metrics, fmt.Sprintf(`%s{store="%s"} %d`, metric, sv.Store, want)) {
					t.Errorf("store %s: /metrics has no %s %d", sv.Store, metric, want)
				}
			}
		}
		if n := len(fj.Stores[1].Workers); n != 2 {
			t.Errorf("store b: %d workers, want 2", n)
		}
	})

	t.Run("pause stops the store's jobs and resume drains them", func(t *testing.T) {
		if code, body := f.post(operator, "/action/pause", withCSRF(url.Values{"store": {"a"}, "back": {"/store/a"}, "reason": {"test"}}, opCSRF),
			map[string]string{"Origin": f.console}); code != http.StatusSeeOther {
			t.Fatalf("pause: %d %s", code, body)
		}
		waitfor.Until(t, "the workers of store a say paused", func() bool {
			for _, s := range f.status().Stores {
				if s.Store == "a" {
					return s.Paused != nil && len(s.Workers) > 0 && s.Workers[0].Paused
				}
			}
			return false
		})
		before := f.done()
		_, file := f.addSession("a", true)
		code, out, errs := run(t, "enqueue", file, "--store-dir", f.stores["a"], "--store", "a", "--data-dir", f.dataDir)
		if code != 0 {
			t.Fatalf("enqueue: %d %s %s", code, out, errs)
		}
		waitfor.Until(t, "the job queued", func() bool { return f.apiFleet().Stores[0].Queue.Pending == 1 })
		// The paused worker goes round its loop without taking it.
		if !strings.Contains(f.metrics(), `compactor_store_paused{store="a"} 1`) {
			t.Error("/metrics does not say store a is paused")
		}
		if code, _, body := f.get(http.DefaultClient, "/readyz", ""); code != 200 || !strings.Contains(body, "store a: paused since") {
			t.Errorf("/readyz %d:\n%s", code, body)
		}
		if got := f.done(); got != before {
			t.Fatalf("%d compactions while paused, want %d", got, before)
		}
		if code, body := f.post(operator, "/action/resume", withCSRF(url.Values{"store": {"a"}, "back": {"/store/a"}}, opCSRF),
			map[string]string{"Origin": f.console}); code != http.StatusSeeOther {
			t.Fatalf("resume: %d %s", code, body)
		}
		waitfor.Until(t, "the queued job done after the resume", func() bool { return compactions(t, file) == 1 })
	})

	t.Run("retry a dead letter", func(t *testing.T) {
		f.llm.Enqueue(fakellm.Behavior{Status: 400, Message: "the request is bad"})
		_, file := f.addSession("b", true)
		if code, out, errs := run(t, "enqueue", file, "--store-dir", f.stores["b"], "--store", "b", "--data-dir", f.dataDir); code != 0 {
			t.Fatalf("enqueue: %d %s %s", code, out, errs)
		}
		var seq string
		waitfor.Until(t, "the dead letter on the store page", func() bool {
			_, _, body := f.get(operator, "/store/b", "")
			m := regexp.MustCompile(`<tr data-seq="(\d+)"`).FindStringSubmatch(body)
			if m != nil {
				seq = m[1]
			}
			return m != nil
		})
		if code, _, body := f.get(viewer, "/deadletter?store=b&seq="+seq, ""); code != 200 || !strings.Contains(body, "the request is bad") || !strings.Contains(body, "<th>Kind</th><td>compact</td>") {
			t.Errorf("the dead letter's page: %d\n%s", code, body)
		}
		if code, _ := f.post(viewer, "/action/retry", withCSRF(url.Values{"store": {"b"}, "seq": {seq}}, csrf(viewer)), nil); code != http.StatusForbidden {
			t.Errorf("a viewer's retry: %d, want 403", code)
		}
		if code, body := f.post(operator, "/action/retry", withCSRF(url.Values{"store": {"b"}, "seq": {seq}, "back": {"/store/b"}}, opCSRF), map[string]string{"Origin": f.console}); code != http.StatusSeeOther {
			t.Fatalf("retry: %d %s", code, body)
		}
		waitfor.Until(t, "the retried session compacted", func() bool { return compactions(t, file) == 1 })
	})

	t.Run("charts", func(t *testing.T) {
		for _, p := range []string{"/charts", "/charts?store=a"} {
			code, _, body := f.get(viewer, p, "")
			if code != 200 || strings.Count(body, "<svg") < 5 || !strings.Contains(body, "Tokens billed by fake-model") {
				t.Errorf("%s: %d, %d charts", p, code, strings.Count(body, "<svg"))
			}
		}
		// Every compaction in the files is counted (its event comes just after the file's line).
		var counted float64
		waitfor.Until(t, "the chart counting every compaction of the files", func() bool {
			var cp struct {
				Charts []struct {
					Series []struct {
						Values []float64
					}
				}
			}
			_, _, body := f.get(http.DefaultClient, "/api/charts", f.viewer)
			if err := json.Unmarshal([]byte(body), &cp); err != nil {
				t.Fatal(err)
			}
			counted = 0
			for _, v := range cp.Charts[0].Series[0].Values {
				counted += v
			}
			return int(counted) == f.done()
		})
		if code, _, _ := f.get(viewer, "/charts?store=nope", ""); code != http.StatusNotFound {
			t.Errorf("/charts of no store: %d", code)
		}
	})

	t.Run("summary text is the operator's", func(t *testing.T) {
		id := ""
		for _, ev := range f.events("a") {
			if ev["outcome"] == "done" {
				id, _ = ev["sessionId"].(string)
				break
			}
		}
		if id == "" {
			t.Fatal("no done event in store a")
		}
		p := "/session?store=a&id=" + url.QueryEscape(id)
		_, _, asOperator := f.get(operator, p, "")
		_, _, asViewer := f.get(viewer, p, "")
		summary := regexp.MustCompile(`(?s)<pre class="summary">(.*?)</pre>`).FindStringSubmatch(asOperator)
		if summary == nil || len(strings.TrimSpace(summary[1])) < 20 {
			t.Fatalf("the operator sees no summary on the session page")
		}
		if strings.Contains(asViewer, `<pre class="summary">`) || strings.Contains(asViewer, strings.TrimSpace(summary[1])[:20]) {
			t.Error("the viewer sees a summary's text")
		}
		if !strings.Contains(asViewer, "the text is the operator's") {
			t.Error("the viewer's session page does not say the text is the operator's")
		}
		_, _, apiViewer := f.get(http.DefaultClient, "/api/session?store=a&id="+url.QueryEscape(id), f.viewer)
		if strings.Contains(apiViewer, `"summary":`) {
			t.Error("/api/session gives the viewer a summary's text")
		}
	})
}

func withCSRF(v url.Values, token string) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = vs
	}
	out.Set("csrf", token)
	return out
}

// pageFigure is the text of a figure on the fleet page.
func pageFigure(t *testing.T, page, store, figure string) string {
	t.Helper()
	row := regexp.MustCompile(`(?s)<tr data-store="` + regexp.QuoteMeta(store) + `">(.*?)</tr>`).FindStringSubmatch(page)
	if row == nil {
		t.Fatalf("no row of store %s on the fleet page", store)
	}
	m := regexp.MustCompile(`<td data-figure="` + figure + `"[^>]*>([^<]*)</td>`).FindStringSubmatch(row[1])
	if m == nil {
		t.Fatalf("no figure %s in store %s's row", figure, store)
	}
	return strings.TrimSpace(m[1])
}

// events are a store's events as `compactor events --json` prints them.
func (f *fleet) events(store string) []map[string]any {
	f.t.Helper()
	code, out, errs := run(f.t, "events", "--store", store, "--json", "--data-dir", f.dataDir)
	if code != 0 {
		f.t.Fatalf("events: %d %s", code, errs)
	}
	var evs []map[string]any
	for l := range strings.Lines(out) {
		var ev map[string]any
		if err := json.Unmarshal([]byte(l), &ev); err == nil {
			evs = append(evs, ev)
		}
	}
	return evs
}
