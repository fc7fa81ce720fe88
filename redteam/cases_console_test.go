//go:build redteam

package redteam

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/compactor-dev/compactor/console"
	"github.com/compactor-dev/compactor/console/consoletest"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/wire"
)

// The web console: `compactor console --credentials DIR` of the fleet (every account's
// operator key, fleet.json), and what hostA's keys can do to it or with it: records with
// markup in every field, shown by every page and every /api answer; and the console's
// data and actions with hostA's worker's or agent's key instead of an operator's.

// operatorConsole is the fleet's console: one `compactor console --credentials` of both
// accounts, started on first use and stopped with the suite.
type operatorConsole struct {
	url              string // http://ADDR
	viewer, operator string // its tokens
}

var (
	consoleOnce sync.Once
	theConsole  *operatorConsole
	consoleErr  error
)

// console starts (once) the operators' console of both accounts.
func (f *fleet) console() (*operatorConsole, error) {
	consoleOnce.Do(func() {
		tokens := filepath.Join(f.dir, "console-tokens")
		p := startProc(f.t, compactorBin, "console", "--nats-url", f.url, "--credentials", f.creds, "--listen", "127.0.0.1:0",
			"--token-dir", tokens, "--log-format", "json")
		addr := regexp.MustCompile(`"msg":"console listening","url":"(http://[^"]+)/"`)
		deadline := time.Now().Add(time.Minute)
		for {
			if m := addr.FindStringSubmatch(p.log.String()); m != nil {
				theConsole = &operatorConsole{url: m[1]}
				break
			}
			if p.exited() || time.Now().After(deadline) {
				consoleErr = fmt.Errorf("compactor console --credentials did not start:\n%s", p.log.String())
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		for _, t := range []struct {
			file string
			dst  *string
		}{{console.ViewerTokenFile, &theConsole.viewer}, {console.OperatorTokenFile, &theConsole.operator}} {
			b, err := os.ReadFile(filepath.Join(tokens, t.file))
			if err != nil {
				consoleErr = err
				return
			}
			*t.dst = strings.TrimSpace(string(b))
		}
	})
	return theConsole, consoleErr
}

// do sends a request to the console; bearer, when not empty, is its Authorization.
func (c *operatorConsole) do(ctx context.Context, method, path, bearer string, form url.Values, header map[string]string) (*http.Response, string, error) {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, body)
	if err != nil {
		return nil, "", err
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	client := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// showsBoth is nil when the console's fleet page and /api/fleet show both accounts and
// each store with its worker.
func (c *operatorConsole) showsBoth(ctx context.Context) error {
	_, page, err := c.do(ctx, http.MethodGet, "/", c.viewer, nil, nil)
	if err != nil {
		return err
	}
	_, api, err := c.do(ctx, http.MethodGet, "/api/fleet", c.viewer, nil, nil)
	if err != nil {
		return err
	}
	var fleet struct {
		Stores []pipeline.StoreView `json:"stores"`
	}
	_ = json.Unmarshal([]byte(api), &fleet)
	workers := map[string]int{}
	for _, sv := range fleet.Stores {
		workers[sv.Store+" "+sv.Account] = len(sv.Workers)
	}
	for _, h := range []string{"hostA", "hostB"} {
		if !strings.Contains(page, `<tr data-store="`+h+`">`) || !strings.Contains(page, "account compactor-"+h) || workers[h+" compactor-"+h] == 0 {
			return fmt.Errorf("the console of both accounts does not show %s in its account with its worker:\n%s\n%s", h, page, api)
		}
	}
	return nil
}

// forgeConsoleRecords writes, with hostA's worker's key, a dead letter, an event, a beat
// and a running job's lease, and with hostA's agent's key a hook report, each with text
// in every field; remove deletes the lease (a running job no one runs).
func forgeConsoleRecords(ctx context.Context, a *Attacker, text string) (seq uint64, sid string, remove func(), err error) {
	if seq, sid, err = forgeOperatorRecords(ctx, a, text); err != nil {
		return 0, "", nil, err
	}
	lease := "$KV." + pipeline.BucketLeases + "." + wire.PreparedKey("hostA", sid)
	lv, _ := json.Marshal(map[string]any{"v": 1, "worker": text, "jobId": text, "since": time.Now().UTC(), "sessionId": sid, "path": text, "kind": text, "delivery": 1})
	if _, err := a.Publish(ctx, lease, nil, lv); err != nil {
		return 0, "", nil, fmt.Errorf("the lease: %w", err)
	}
	remove = func() { _, _ = a.Publish(context.Background(), lease, Header{"KV-Operation": "DEL"}, nil) }
	agent := a.f.conn("agent-hostA", pipeline.RoleAgent, "hostA")
	defer agent.Close()
	rep, _ := json.Marshal(wire.HookReport{V: 1, Store: "hostA", SessionID: sid, Outcome: wire.HookMiss, Result: wire.HookResultPi,
		ReasonCode: text, Reason: text, PiReason: text, LatencyMs: 1})
	if err := agent.Publish(wire.HookSubject("hostA", sid), rep); err != nil {
		remove()
		return 0, "", nil, err
	}
	if err := agent.Flush(); err != nil {
		remove()
		return 0, "", nil, err
	}
	return seq, sid, remove, nil
}

func init() {
	// Records with markup, shown by the operators' console of both accounts: every page
	// (whole, and the live view's partial refresh) and every /api answer.
	register(Case{Name: "records carrying markup, shown by the operators' console of both accounts (compactor console --credentials)", Roles: []pipeline.Role{pipeline.RoleWorker},
		Attack: func(ctx context.Context, a *Attacker) (func(), error) {
			c, err := a.f.console()
			if err != nil {
				return nil, err
			}
			if err := c.showsBoth(ctx); err != nil {
				return nil, err
			}
			seq, sid, remove, err := forgeConsoleRecords(ctx, a, markup)
			if err != nil {
				return nil, err
			}
			defer remove()
			const shown = `&lt;img src=x onerror=alert(1)&gt;&lt;script&gt;alert(2)&lt;/script&gt;`
			pages := []struct{ path, shows string }{
				{"/", "the beat's host and version"}, {"/store/hostA", "the dead letter, the event, the lease"},
				{"/session?store=hostA&id=" + url.QueryEscape(sid), "the event"}, {fmt.Sprintf("/deadletter?store=hostA&seq=%d", seq), "the dead letter"},
				{"/zero-wait", "the hook report"}, {"/charts?store=hostA", "the event's model"},
			}
			deadline := time.Now().Add(30 * time.Second)
			for _, p := range pages {
				for _, partial := range []bool{false, true} {
					hdr := map[string]string{}
					if partial {
						hdr["X-Console-Partial"] = "1"
					}
					for {
						resp, body, err := c.do(ctx, http.MethodGet, p.path, c.operator, nil, hdr)
						if err != nil {
							return nil, err
						}
						if bad := consoleTaken(p.path, resp, body); bad != nil {
							return nil, bad
						}
						if resp.StatusCode == 200 && strings.Contains(body, shown) && strings.Contains(body, `\x1b[31m\u202eRTL`) {
							break
						}
						if time.Now().After(deadline) {
							return nil, fmt.Errorf("the console's %s (partial %v) does not show %s (escaped): %d\n%s", p.path, partial, p.shows, resp.StatusCode, body)
						}
						time.Sleep(50 * time.Millisecond)
					}
				}
			}
			apis := []string{"/api/fleet", "/api/store?store=hostA", "/api/session?store=hostA&id=" + url.QueryEscape(sid), "/api/zero-wait",
				"/api/charts?store=hostA", fmt.Sprintf("/api/deadletter?store=hostA&seq=%d", seq)}
			for _, p := range apis {
				resp, body, err := c.do(ctx, http.MethodGet, p, c.operator, nil, nil)
				if err != nil {
					return nil, err
				}
				if bad := consoleTaken(p, resp, body); bad != nil {
					return nil, bad
				}
				var v any
				if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &v) != nil {
					return nil, fmt.Errorf("%s: %d, not JSON:\n%s", p, resp.StatusCode, body)
				}
				// Carried as text (JSON strings: the API is data, the pages show it).
				if p != "/api/charts?store=hostA" && !strings.Contains(fmt.Sprint(v), markup) {
					return nil, fmt.Errorf("%s does not carry the record's text as it is:\n%s", p, body)
				}
			}
			return nil, nil
		}})

	// hostA's worker's and agent's keys, where the operator's are needed: a console run
	// with them, the operators' console asked with what they hold, the console's actions
	// as commands, and hostA's own worker's HTTP listener.
	register(Case{Name: "the console's data and actions with hostA's worker's or agent's key", Roles: []pipeline.Role{pipeline.RoleWorker, pipeline.RoleAgent},
		Attack: func(ctx context.Context, a *Attacker) (func(), error) {
			// A console of its own with the key: it reads nothing and serves nothing.
			cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			out, errOut, err := a.CLI(cctx, "console", "--listen", "127.0.0.1:0", "--token-dir", filepath.Join(a.f.dir, "console-"+string(a.Role)), "--log-format", "json")
			cancel()
			if err == nil || strings.Contains(errOut, "console listening") || !strings.Contains(errOut, "not permitted") {
				return nil, fmt.Errorf("taken: compactor console with hostA's %s's key (%v):\n%s%s", a.Role, err, out, errOut)
			}
			// The operators' console, asked with what the role holds: its seed, its public
			// key, its seed's file name; as a bearer token and as a login.
			c, err := a.f.console()
			if err != nil {
				return nil, err
			}
			seed, err := os.ReadFile(a.f.seed(a.user))
			if err != nil {
				return nil, err
			}
			pub := ""
			if kp, err := nkeys.FromSeed(bytes.TrimSpace(seed)); err == nil {
				pub, _ = kp.PublicKey()
			}
			held := []string{strings.TrimSpace(string(seed)), pub, a.user, filepath.Base(a.f.seed(a.user))}
			reads := []string{"/", "/store/hostA", "/store/hostB", "/session?store=hostA&id=" + sourceID, "/zero-wait", "/charts", "/deadletter?store=hostA&seq=1",
				"/api/fleet", "/api/store?store=hostA", "/api/store?store=hostB", "/api/session?store=hostA&id=" + sourceID, "/api/zero-wait", "/api/charts",
				"/api/deadletter?store=hostA&seq=1"}
			for _, tok := range held {
				if tok == "" {
					continue
				}
				for _, p := range reads {
					resp, body, err := c.do(ctx, http.MethodGet, p, tok, nil, nil)
					if err != nil {
						return nil, err
					}
					login := resp.StatusCode == http.StatusSeeOther && strings.HasPrefix(resp.Header.Get("Location"), "/login?")
					if resp.StatusCode != http.StatusUnauthorized && !login || strings.Contains(body, "data-store") || strings.Contains(body, "compactor-host") ||
						strings.Contains(body, `"store"`) {
						return nil, fmt.Errorf("leak: the console's %s with hostA's %s's %q: %d\n%s", p, a.Role, short(tok), resp.StatusCode, body)
					}
				}
				resp, _, err := c.do(ctx, http.MethodPost, "/login", "", url.Values{"token": {tok}, "next": {"/"}}, map[string]string{"Origin": c.url})
				if err != nil {
					return nil, err
				}
				if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) > 0 {
					return nil, fmt.Errorf("taken: the console's login took hostA's %s's %q: %d %v", a.Role, short(tok), resp.StatusCode, resp.Cookies())
				}
			}
			// A dead letter of hostA's (its admin's: the agent writes none) for the actions.
			dl, _ := json.Marshal(wire.DeadLetter{V: 1, Subject: wire.JobSubject("hostA", sourceID, wire.KindCompact), JobSeq: 1,
				Job: json.RawMessage(`{"v":1,"kind":"compact","store":"hostA","sessionId":"` + sourceID + `","path":"x.jsonl"}`), Reason: "redteam", Deliveries: 1, At: time.Now().UTC()})
			jsA, _ := jetstream.New(a.adminA)
			ack, err := jsA.Publish(ctx, wire.DLQSubject("hostA", sourceID), dl)
			if err != nil {
				return nil, err
			}
			settingsSeq := func() uint64 {
				s, err := jsA.Stream(ctx, "KV_"+pipeline.BucketSettings)
				if err != nil {
					return 0
				}
				return s.CachedInfo().State.LastSeq
			}
			before := settingsSeq()
			for _, p := range []struct {
				path string
				form url.Values
			}{
				{"/api/pause", url.Values{"store": {"hostA"}, "reason": {"redteam"}}}, {"/api/resume", url.Values{"store": {"hostA"}}},
				{"/api/retry", url.Values{"store": {"hostA"}, "seq": {strconv.FormatUint(ack.Sequence, 10)}}},
				{"/api/purge", url.Values{"store": {"hostA"}, "seq": {strconv.FormatUint(ack.Sequence, 10)}}},
				{"/action/pause", url.Values{"store": {"hostA"}}},
			} {
				resp, body, err := c.do(ctx, http.MethodPost, p.path, held[0], p.form, nil)
				if err != nil {
					return nil, err
				}
				if resp.StatusCode != http.StatusUnauthorized {
					return nil, fmt.Errorf("taken: the console's %s with hostA's %s's seed: %d %s", p.path, a.Role, resp.StatusCode, body)
				}
			}
			// The console's actions as commands with the role's key: refused, at once.
			seqArg := strconv.FormatUint(ack.Sequence, 10)
			for _, args := range [][]string{{"pause", "hostA", "--reason", "redteam"}, {"resume", "hostA"}, {"dlq", "list", "--store", "hostA"},
				{"dlq", "show", seqArg}, {"dlq", "retry", seqArg}, {"dlq", "purge", seqArg}} {
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				out, errOut, err := a.CLI(cctx, args...)
				cancel()
				if err == nil || !strings.Contains(errOut, "not permitted") {
					return nil, fmt.Errorf("taken: compactor %s with hostA's %s's key (%v):\n%s%s", strings.Join(args, " "), a.Role, err, out, errOut)
				}
			}
			if after := settingsSeq(); after != before {
				return nil, fmt.Errorf("taken: %d settings records written by hostA's %s's refused actions", after-before, a.Role)
			}
			str, err := jsA.Stream(ctx, wire.StreamDLQ)
			if err != nil {
				return nil, err
			}
			if _, err := str.GetMsg(ctx, ack.Sequence); err != nil {
				return nil, fmt.Errorf("taken: hostA's dead letter %d is gone after hostA's %s's refused retry and purge: %v", ack.Sequence, a.Role, err)
			}
			if err := str.DeleteMsg(ctx, ack.Sequence); err != nil {
				return nil, err
			}
			// hostA's own worker's listener (its worker's key): no console, no token.
			for _, p := range []string{"/", "/api/fleet", "/store/hostA", "/login"} {
				resp, err := http.Get("http://" + a.f.metrics["hostA"] + p)
				if err != nil {
					return nil, err
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "compactor console") {
					return nil, fmt.Errorf("taken: hostA's worker's listener serves %s: %d\n%s", p, resp.StatusCode, body)
				}
			}
			for _, name := range []string{console.ViewerTokenFile, console.OperatorTokenFile} {
				if _, err := os.Stat(filepath.Join(a.f.dir, "data-hostA", name)); !errors.Is(err, os.ErrNotExist) {
					return nil, fmt.Errorf("hostA's worker made a console token %s (%v)", name, err)
				}
			}
			return nil, nil
		}})
}

// consoleTaken is an error when a console answer could run or load what a record put in
// it, or lacks the headers that say what it is.
func consoleTaken(path string, resp *http.Response, body string) error {
	bad := consoletest.Headers(path, resp.Header)
	if !strings.HasPrefix(path, "/api/") {
		bad = append(bad, consoletest.Inert(body)...)
	} else if strings.ContainsAny(body, "<>") {
		bad = append(bad, "markup unescaped in JSON")
	}
	if len(bad) > 0 {
		return fmt.Errorf("taken: the console's %s: %s", path, strings.Join(bad, "; "))
	}
	return nil
}

// short is the start of a secret, for a message.
func short(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	return s
}
