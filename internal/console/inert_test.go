package console_test

import (
	"encoding/json"
	"fmt"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/wire"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor-dev/compactor/internal/console/consoletest"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/pipeline"
)

// xss is what a store's key writes into the records the console shows, in every field it
// can: markup that would run a script if a page took it for markup (a tag with an
// onerror handler, a script element, a javascript: link, an SVG onload, an iframe), quotes
// that would leave an attribute, and a terminal's escape and a right-to-left override.
const xss = `"'><img src=x onerror=alert(1)><script>alert(2)</script><a href="javascript:alert(3)">j</a><svg onload=alert(4)><iframe srcdoc="<script>alert(6)</script>"></iframe>` +
	"\x1b[31m\u202eRTL"

// xssEscaped is how xss shows in a page: as text.
const xssEscaped = `&#34;&#39;&gt;&lt;img src=x onerror=alert(1)&gt;&lt;script&gt;alert(2)&lt;/script&gt;`

// forged are the records forgeRecords wrote into store b.
type forged struct {
	session string // the session of the forged event, lease and hook report
	dlSeq   uint64 // the forged dead letter
}

// forgeRecords writes, where store b's keys may write them, a dead letter (its reason,
// error, worker, path and instructions), an event (its reason, error, worker, model), a
// hook report, a worker's beat (its host and version), a running job's lease and, with
// pause, a pause record (its reason and author), each carrying xss.
func forgeRecords(t testing.TB, f *fleet, pause bool) forged {
	t.Helper()
	nc, err := nats.Connect(f.natsURL, nats.Token(readToken(t, filepath.Join(f.dataDir, "nats.token"))))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	fg := forged{session: `javascript:alert(7)//"><img src=x onerror=alert(8)>`}
	put := func(subject string, v any) uint64 {
		t.Helper()
		b, _ := json.Marshal(v)
		ack, err := js.Publish(subject, b)
		if err != nil {
			t.Fatalf("publish %s: %v", subject, err)
		}
		return ack.Sequence
	}
	now := time.Now().UTC()
	dlSession := "019dffff-0000-7000-8000-00000000dead"
	job, _ := json.Marshal(wire.Job{V: 1, Kind: wire.KindCompact, Store: "b", Path: xss + ".jsonl", SessionID: dlSession, Reason: xss, Instructions: "keep " + xss})
	fg.dlSeq = put(wire.DLQSubject("b", dlSession), wire.DeadLetter{V: 1, Subject: wire.JobSubject("b", dlSession, wire.KindCompact), JobSeq: 1,
		Job: job, Reason: xss, Error: xss, Deliveries: 1, Worker: xss, At: now})
	put(wire.JobEventSubject("b", fg.session, 999999), wire.Event{V: 1, JobID: xss, JobSeq: 999999, JobRef: wire.JobRef{Store: "b", SessionID: fg.session, Path: xss, Kind: wire.KindCompact}, Tally: wire.Tally{Outcome: pipeline.OutcomeFailed, Reason: xss, LLMTokens: 3, LLMInputTokens: 2, LLMOutputTokens: 1}, Error: xss, Worker: xss, LLMModel: xss, PiUnknown: xss, Attempt: 1, At: now})
	put("$KV."+wire.BucketWorkers+".b.w-forged", fleetops.WorkerBeat{V: 1, Worker: "w-forged", Store: "b", Host: xss, Version: xss,
		Concurrency: 1, Started: now, At: now})
	put("$KV."+wire.BucketLeases+"."+wire.PreparedKey("b", fg.session), map[string]any{"v": 1, "worker": xss, "jobId": xss, "since": now,
		"sessionId": fg.session, "path": xss, "kind": xss, "delivery": 1})
	rep, _ := json.Marshal(wire.HookReport{V: 1, Store: "b", SessionID: fg.session, Outcome: wire.HookMiss, Result: wire.HookResultPi,
		ReasonCode: xss, Reason: xss, PiReason: xss, LatencyMs: 1})
	if err := nc.Publish(wire.HookSubject("b", fg.session), rep); err != nil {
		t.Fatal(err)
	}
	if pause {
		if _, err := fleetops.SetPaused(t.Context(), nc, "b", true, xss, xss); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return fg
}

// Records that carry markup, quotes, javascript: URLs, terminal escapes and bidi
// overrides in every field, written where a store's key may write them, are rendered
// inert by every page and every live refresh of the console (html/template escaping, the
// hidden characters shown as escapes), while the text itself is shown; /api/... answers
// JSON that says so (Content-Type, nosniff) and carries the text as it is; the script
// builds no markup and the Content-Security-Policy requires Trusted Types.
func TestConsoleRendersRecordsInert(t *testing.T) {
	f := startFleet(t, fleetOptions{sessions: 1})
	waitfor.Until(t, "the two sessions compacted", func() bool { return f.done() == 2 })
	op := f.client()
	if code := f.login(op, f.operator); code != http.StatusSeeOther {
		t.Fatalf("login: %d", code)
	}
	f.get(op, "/zero-wait", "") // the console follows the hook reports from now on
	fg := forgeRecords(t, f, true)
	sess := "/session?store=b&id=" + url.QueryEscape(fg.session)
	dl := fmt.Sprintf("/deadletter?store=b&seq=%d", fg.dlSeq)
	// Each page, and what of the forged records it shows.
	pages := []struct{ path, shows string }{
		{"/", "the beat's host, version"}, {"/store/b", "the dead letter, the event, the lease, the pause"}, {sess, "the event"},
		{"/zero-wait", "the hook report"}, {"/charts?store=b", "the event's model"}, {dl, "the dead letter in full"},
	}
	var missing string
	defer func() { // what was missing when the wait gave up
		if missing != "" {
			t.Logf("not every forged record is in the console:%s", missing)
		}
	}()
	waitfor.Until(t, "every forged record in the console", func() bool {
		missing = ""
		for _, p := range pages {
			if _, _, body := f.get(op, p.path, ""); !strings.Contains(body, xssEscaped) {
				missing += fmt.Sprintf("\n%s (%s):\n%s", p.path, p.shows, body)
			}
		}
		if _, _, body := f.get(op, "/store/b", ""); !strings.Contains(body, "Paused") || strings.Count(body, xssEscaped) < 4 {
			missing += "\n/store/b: not every record:\n" + body
		}
		return missing == ""
	})
	for _, p := range pages {
		for _, partial := range []bool{false, true} {
			req, _ := http.NewRequest(http.MethodGet, f.console+p.path, nil)
			if partial {
				req.Header.Set("X-Console-Partial", "1")
			}
			resp, err := op.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			doc := string(body)
			if resp.StatusCode != 200 || !strings.Contains(doc, xssEscaped) {
				t.Errorf("%s (partial %v): %d; %s not shown as text", p.path, partial, resp.StatusCode, p.shows)
			}
			for _, bad := range consoletest.Inert(doc) {
				t.Errorf("%s (partial %v): %s", p.path, partial, bad)
			}
			if !strings.Contains(doc, `\x1b[31m\u202eRTL`) {
				t.Errorf("%s (partial %v): the escape and the override are not shown as escapes", p.path, partial)
			}
			for _, bad := range consoletest.Headers(p.path, resp.Header) {
				t.Error(bad)
			}
		}
	}
	// The session page says which unknown Pi release a job was served for, as text.
	if _, _, body := f.get(op, sess, ""); !strings.Contains(body, "served for unknown Pi "+xssEscaped) {
		t.Errorf("%s: the event's unknown Pi release is not shown", sess)
	}
	// The API: JSON, said to be JSON, with the text as it was written.
	for _, p := range []string{"/api/fleet", "/api/store?store=b", "/api/session?store=b&id=" + url.QueryEscape(fg.session), "/api/zero-wait",
		fmt.Sprintf("/api/deadletter?store=b&seq=%d", fg.dlSeq)} {
		code, hdr, body := f.get(http.DefaultClient, p, f.operator)
		if code != 200 {
			t.Errorf("%s: %d", p, code)
		}
		for _, bad := range consoletest.Headers(p, hdr) {
			t.Error(bad)
		}
		var v any
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Errorf("%s: not JSON: %v", p, err)
		}
		if !strings.Contains(fmt.Sprint(v), xss) {
			t.Errorf("%s: the record's text is not carried as it is", p)
		}
	}
	// The script builds no markup from data: no HTML sink in it.
	code, _, js := f.get(op, "/static/console.js", "")
	if code != 200 {
		t.Fatalf("console.js: %d", code)
	}
	for _, sink := range []string{".innerHTML", ".outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function("} {
		if strings.Contains(js, sink) {
			t.Errorf("console.js uses %s", sink)
		}
	}
	// The retry of the forged dead letter: its instructions are passed on only when asked.
	_, _, page := f.get(op, dl, "")
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil || !strings.Contains(page, `name="instructions" value="pass"`) {
		t.Fatalf("the dead letter's page has no retry with the instructions' choice:\n%s", page)
	}
	if code, body := f.post(http.DefaultClient, "/api/retry", url.Values{"store": {"b"}, "seq": {fmt.Sprint(fg.dlSeq)}},
		map[string]string{"Authorization": "Bearer " + f.operator}); code != http.StatusConflict || !strings.Contains(body, "summary instructions") {
		t.Errorf("a retry of a job with instructions, without passing them on: %d %s", code, body)
	}
}

// The check itself sees markup a record would bring, were a page to take it raw.
func TestInertPageSeesMarkup(t *testing.T) {
	raw := `<p>` + xss + `</p><td data-x='` + xss + `'>`
	bad := strings.Join(consoletest.Inert(raw), "\n")
	for _, want := range []string{"<img>", "a script", "onerror", "javascript:alert(3)", "an svg", "<iframe>", "srcdoc", "raw control"} {
		if !strings.Contains(strings.ReplaceAll(bad, "a <img> element", "<img>"), strings.TrimSuffix(want, ">")) {
			t.Errorf("inertPage misses %s in a raw record:\n%s", want, bad)
		}
	}
	if got := consoletest.Inert(`<p>` + xssEscaped + `</p><svg class="chart"></svg><a href="/store/b?x=1">b</a>`); len(got) != 0 {
		t.Errorf("inertPage finds fault with escaped text: %v", got)
	}
	// The console's own head passes; the same elements pointing elsewhere do not.
	head := `<meta charset="utf-8"><meta name="viewport" content="width=device-width"><link rel="stylesheet" href="/static/console.css"><link rel="icon" href="data:,"><script src="/static/console.js" defer></script>`
	if got := consoletest.Inert(head); len(got) != 0 {
		t.Errorf("the console's head: %v", got)
	}
	for _, doc := range []string{`<link rel="stylesheet" href="//evil.example/x.css">`, `<meta http-equiv="refresh" content="0;url=javascript:alert(1)">`,
		`<a href="//evil.example/">x</a>`, `<a href="/\evil.example/">x</a>`, `<script src="/static/console.js"></script><script>alert(1)</script>`,
		`<form action="https://evil.example/"></form>`} {
		if len(consoletest.Inert(doc)) == 0 {
			t.Errorf("Inert passes %s", doc)
		}
	}
}
