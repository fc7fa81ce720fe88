package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/cli"
	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/internal/proctest"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/operator"
)

// A fleet for the console's tests, doing real work: `compactor run` with its embedded NATS
// serving stores a and b and the console on its HTTP listener, a second worker (another
// `compactor run`, through that NATS with its token) serving store b too, the real engine
// summarizing through a fake OpenAI-compatible endpoint over real HTTP, and session files
// over their budget in both stores.

// srcSession is a recorded Pi session, copied under new ids as the stores' sessions.
const srcSession = "../../testdata/corpus/12-tricky-custom-message-cut.jsonl"

// fleet is a running fleet.
type fleet struct {
	t        testing.TB
	dataDir  string
	stores   map[string]string
	llm      *fakellm.Server
	main     *proc  // serves a and b, the embedded NATS and the console
	second   *proc  // serves b
	console  string // http://ADDR
	natsURL  string
	viewer   string // the console's tokens
	operator string
	seed     uint64
}

// proc is a compactor command run in this process.
type proc struct {
	args   []string
	cancel context.CancelFunc
	done   chan struct{}
	code   int
	out    proctest.Buffer
	log    proctest.Buffer
}

// start runs `compactor ARGS` until the test ends.
func start(t testing.TB, args ...string) *proc {
	ctx, cancel := context.WithCancel(context.Background())
	p := &proc{args: args, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.code = cli.Run(ctx, &cli.Env{Args: args, Stdout: &p.out, Stderr: &p.log, Getenv: func(string) string { return "" }})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-p.done:
		case <-time.After(time.Minute):
			t.Errorf("%s did not stop", args[0])
		}
	})
	return p
}

// logged waits for a JSON log line with msg and returns it.
func (p *proc) logged(t testing.TB, msg string) map[string]any {
	t.Helper()
	var rec map[string]any
	waitfor.Until(t, "the log line "+msg, func() bool {
		select {
		case <-p.done:
			t.Fatalf("%s exited (%d):\n%s", p.args[0], p.code, p.log.String())
		default:
		}
		for l := range strings.Lines(p.log.String()) {
			var r map[string]any
			if json.Unmarshal([]byte(l), &r) == nil && r["msg"] == msg {
				rec = r
				return true
			}
		}
		return false
	})
	return rec
}

// run runs a compactor command to its end and returns its exit code, stdout and stderr.
func run(t testing.TB, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.HangGuard)
	defer cancel()
	code := cli.Run(ctx, &cli.Env{Args: args, Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
	return code, out.String(), errb.String()
}

// fleetOptions shape a fleet.
type fleetOptions struct {
	sessions int // per store, over their budget (default 2)
}

func startFleet(t testing.TB, o fleetOptions) *fleet {
	t.Helper()
	if o.sessions == 0 {
		o.sessions = 2
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	f := &fleet{t: t, dataDir: t.TempDir(), stores: map[string]string{"a": t.TempDir(), "b": t.TempDir()}, llm: fakellm.Start(t), seed: seed}
	for _, st := range []string{"a", "b"} {
		for range o.sessions {
			f.addSession(st, true)
		}
	}
	f.main = start(t, f.workerArgs("run", "--data-dir", f.dataDir, "--listen", "127.0.0.1:0", "--store", "a="+f.stores["a"], "--store", "b="+f.stores["b"],
		"--metrics-addr", "127.0.0.1:0", "--sweep-every", "1h")...)
	f.console = "http://" + f.main.logged(t, "metrics listening")["addr"].(string)
	f.natsURL = f.main.logged(t, "embedded NATS started")["url"].(string)
	f.second = start(t, f.workerArgs("run", "--nats-url", f.natsURL, "--nats-token-file", filepath.Join(f.dataDir, "nats.token"), "--data-dir", t.TempDir(),
		"--store", "b="+f.stores["b"])...)
	f.second.logged(t, "compactor pipeline ready")
	f.viewer, f.operator = readToken(t, filepath.Join(f.dataDir, "console-viewer.token")), readToken(t, filepath.Join(f.dataDir, "console-operator.token"))
	return f
}

// workerArgs are a worker's flags: the engine on the fake endpoint, budgets that the
// recorded session is over, no idle check.
func (f *fleet) workerArgs(args ...string) []string {
	return append(args, "--summarizer", "openai", "--base-url", f.llm.URL(), "--model", "fake-model", "--context-window", "20000",
		"--keep-recent-tokens", "2000", "--idle", "0", "--log-format", "json", "--concurrency", "2")
}

func readToken(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", path, fi.Mode().Perm())
	}
	return strings.TrimSpace(string(b))
}

// addSession writes a copy of the recorded session into store under a new id; old: its
// modification time an hour ago. It returns the session id and the file.
func (f *fleet) addSession(store string, old bool) (string, string) {
	f.t.Helper()
	src, err := os.ReadFile(srcSession)
	if err != nil {
		f.t.Fatal(err)
	}
	nl := bytes.IndexByte(src, '\n')
	var hdr map[string]any
	if err := json.Unmarshal(src[:nl], &hdr); err != nil {
		f.t.Fatal(err)
	}
	id := fmt.Sprintf("019d%04x-0000-7000-8000-%012x", rand.IntN(1<<16), rand.Int64N(1<<40))
	hdr["id"] = id
	h, _ := json.Marshal(hdr)
	p := filepath.Join(f.stores[store], "--home-dev-p--", "2026-01-01T00-00-00-000Z_"+id+".jsonl")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, append(h, src[nl:]...), 0o644); err != nil {
		f.t.Fatal(err)
	}
	if old {
		at := time.Now().Add(-time.Hour)
		_ = os.Chtimes(p, at, at)
	}
	return id, p
}

// compactions counts the compaction lines of a file.
func compactions(t testing.TB, file string) int {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte(`"type":"compaction"`))
}

// status is `compactor status --json` against the fleet.
func (f *fleet) status() statusJSON {
	f.t.Helper()
	code, out, errs := run(f.t, "status", "--json", "--data-dir", f.dataDir)
	if code != 0 {
		f.t.Fatalf("status: exit %d\n%s", code, errs)
	}
	var s statusJSON
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		f.t.Fatalf("status --json: %v\n%s", err, out)
	}
	return s
}

type statusJSON struct {
	Stores []struct {
		Store   string                `json:"store"`
		Workers []fleetops.WorkerBeat `json:"workers"`
		Queue   *operator.StoreQueue  `json:"queue"`
		Running []operator.RunningJob `json:"running"`
		Paused  *fleetops.PauseRecord `json:"paused"`
	} `json:"stores"`
	Warnings []string `json:"warnings"`
}

// client is an HTTP client of the console with a cookie jar, that does not follow
// redirects (a test looks at them).
func (f *fleet) client() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// login logs c in with token; it returns the login's status.
func (f *fleet) login(c *http.Client, token string) int {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.console+"/login", strings.NewReader(url.Values{"token": {token}, "next": {"/"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", f.console)
	resp, err := c.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// get asks the console for path with c (and the bearer token, when given).
func (f *fleet) get(c *http.Client, path, bearer string) (int, http.Header, string) {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, f.console+path, nil)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// post sends a form to the console with c; headers are added to the request.
func (f *fleet) post(c *http.Client, path string, form url.Values, headers map[string]string) (int, string) {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.console+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// apiFleet is /api/fleet with the viewer's token.
func (f *fleet) apiFleet() fleetJSON {
	f.t.Helper()
	code, _, body := f.get(http.DefaultClient, "/api/fleet", f.viewer)
	if code != 200 {
		f.t.Fatalf("/api/fleet: %d %s", code, body)
	}
	var fj fleetJSON
	if err := json.Unmarshal([]byte(body), &fj); err != nil {
		f.t.Fatal(err)
	}
	return fj
}

type fleetJSON struct {
	Stores []operator.StoreView `json:"stores"`
}

// metrics is the main worker's /metrics.
func (f *fleet) metrics() string {
	f.t.Helper()
	code, _, body := f.get(http.DefaultClient, "/metrics", "")
	if code != 200 {
		f.t.Fatalf("/metrics: %d", code)
	}
	return body
}

// done counts the compactions in every file of the stores.
func (f *fleet) done() int {
	n := 0
	for _, dir := range f.stores {
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".jsonl") {
				n += compactions(f.t, p)
			}
			return nil
		})
	}
	return n
}

// waitQuiet waits until no job is queued, in flight or running in any store, as the
// console and status both see it.
func (f *fleet) waitQuiet() {
	f.t.Helper()
	waitfor.Until(f.t, "a quiet fleet", func() bool {
		for _, sv := range f.apiFleet().Stores {
			if sv.Queue.Pending+sv.Queue.InFlight > 0 || len(sv.Running) > 0 {
				return false
			}
		}
		for _, s := range f.status().Stores {
			if s.Queue == nil || s.Queue.Pending+s.Queue.InFlight > 0 || len(s.Running) > 0 {
				return false
			}
		}
		return true
	})
}
