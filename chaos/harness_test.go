//go:build chaos

package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/internal/natstest"
	"github.com/compactor-dev/compactor/internal/pigolden"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/wire"
)

var (
	compactorBin string // built from the checkout by TestMain
	piOracle     string // the Pi harness (PI_HARNESS, else interop/pi/pi; PI_VERSION picks the Pi)
	figures      = &report{}
)

func TestMain(m *testing.M) {
	natstest.MaybeRunNode()
	var err error
	if piOracle, err = pigolden.Harness(); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	// Install the selected Pi once, before tests call the harness side by side.
	if out, err := exec.Command(piOracle, "install").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %s install: %v\n%s", piOracle, err, out)
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "compactor-chaos-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	compactorBin = filepath.Join(dir, "compactor")
	build := exec.Command("go", "build", "-o", compactorBin, "../cmd/compactor")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "chaos: build compactor:", err)
		os.Exit(2)
	}
	code := m.Run()
	figures.print(os.Stdout)
	os.RemoveAll(dir)
	os.Exit(code)
}

// report collects the figures of every scenario, printed at the end (docs/reliability.md).
type report struct {
	mu    sync.Mutex
	lines []string
}

func (r *report) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprintf(format, args...))
}

func (r *report) print(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintln(w, "=== chaos figures")
	for _, l := range r.lines {
		fmt.Fprintln(w, l)
	}
}

// ---------------------------------------------------------------- sessions

// sources are corpus sessions of 45-100 KB; with --context-window 20000 each is over budget
// (and none ends in a compaction already), and each can be compacted under that budget.
// 11-tricky-trailing-toolresults is not one of them: its last turn alone (25,908 tokens of
// tool results) is over the 3,616-token budget, so compactor refuses it, naming the sizes
// (no compaction leaves a session over budget; engine TestCompactRefusesWhatCannotFit),
// and a refusal is not what this suite is about.
var sources = []string{"12-tricky-custom-message-cut", "10-tricky-parallel", "06-custom-bash-entries",
	"02-tools-parallel-errors-images", "03-branches-labels-name"}

// fleet is the files of a store and their bytes before the scenario.
type fleet struct {
	dir    string
	before map[string][]byte // by absolute path
	ids    map[string]string // session id by path
}

// newFleet writes n sessions in Pi's layout with distinct session ids, an hour old.
func newFleet(t *testing.T, n int) *fleet {
	t.Helper()
	f := &fleet{dir: t.TempDir(), before: map[string][]byte{}, ids: map[string]string{}}
	var srcs [][]byte
	for _, s := range sources {
		b, err := os.ReadFile(filepath.Join("..", "testdata", "corpus", s+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, b)
	}
	for i := range n {
		id := fmt.Sprintf("019c%04x-0000-7000-8000-%012x", i, rand.Int64N(1<<40))
		f.add(t, fmt.Sprintf("--home-dev-p%d--/2026-01-01T00-00-00-000Z_%s.jsonl", i%10, id), id, srcs[i%len(srcs)])
	}
	return f
}

// add writes src at rel with its header's id replaced by id.
func (f *fleet) add(t *testing.T, rel, id string, src []byte) string {
	t.Helper()
	nl := bytes.IndexByte(src, '\n')
	var hdr map[string]any
	if err := json.Unmarshal(src[:nl], &hdr); err != nil {
		t.Fatal(err)
	}
	hdr["id"] = id
	h, _ := json.Marshal(hdr)
	data := append(h, src[nl:]...)
	p := filepath.Join(f.dir, rel)
	f.write(t, p, data)
	f.ids[p] = id
	return p
}

func (f *fleet) write(t *testing.T, p string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	_ = os.Chtimes(p, old, old)
	f.before[p] = data
}

// verify checks every file of the fleet: the old bytes are a prefix of the new (only
// appends), the appended part is whole JSON lines, and no two compactions share a parent
// (one leaf compacted twice). It returns the compaction count per file.
func (f *fleet) verify(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	paths := make([]string, 0, len(f.before))
	for p := range f.before {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		old := f.before[p]
		now, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if !bytes.HasPrefix(now, old) {
			t.Errorf("%s: the old bytes are not a prefix of the new ones (%d → %d bytes): rewritten", p, len(old), len(now))
			continue
		}
		parents := map[string]int{}
		n := 0
		sc := bufio.NewScanner(bytes.NewReader(now))
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var e struct{ Type, ID, ParentID string }
			if json.Unmarshal(sc.Bytes(), &e) != nil || e.Type != "compaction" {
				continue
			}
			n++
			parents[e.ParentID]++
			if parents[e.ParentID] == 2 {
				t.Errorf("%s: two compactions of leaf %s", p, e.ParentID)
			}
		}
		if added := now[len(old):]; len(added) > 0 && added[len(added)-1] != '\n' {
			t.Errorf("%s: the appended bytes do not end a line", p)
		}
		out[p] = n
	}
	return out
}

// piLoad loads every given file with the real Pi (pi-load-many.mjs: Pi's SessionManager
// through the harness's library, one Node process per batch) and checks that a compacted
// file's context starts with Pi's compaction summary.
func piLoad(t *testing.T, files []string, compacted map[string]int) (loaded int) {
	t.Helper()
	for i := 0; i < len(files); i += 200 {
		batch := files[i:min(i+200, len(files))]
		cmd := exec.Command(piOracle, append([]string{"exec", "pi-load-many.mjs"}, batch...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("pi-load-many: %v\n%s", err, stderr.String())
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			var r struct {
				File, Error, FirstRole string
				OK                     bool
			}
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("pi-load-many output %q: %v", sc.Text(), err)
			}
			switch {
			case !r.OK:
				t.Errorf("Pi cannot load %s: %s", r.File, r.Error)
			case compacted[r.File] > 0 && r.FirstRole != "compactionSummary":
				t.Errorf("%s: compacted, but Pi's context starts with %q, not the compaction summary", r.File, r.FirstRole)
			default:
				loaded++
			}
		}
	}
	return loaded
}

// ---------------------------------------------------------------- the endpoint

// endpoint is the fake LLM behind a proxy that can also cut connections (close the TCP
// connection without an answer), which the fake server itself does not do.
type endpoint struct {
	llm  *fakellm.Server
	url  string
	cuts atomic.Int32
}

func newEndpoint(t *testing.T) *endpoint {
	e := &endpoint{llm: fakellm.Start(t)}
	target, _ := url.Parse(strings.TrimSuffix(e.llm.URL(), "/v1"))
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ErrorLog = log.New(io.Discard, "", 0) // requests of killed workers end as "context canceled"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for {
			n := e.cuts.Load()
			if n <= 0 {
				break
			}
			if e.cuts.CompareAndSwap(n, n-1) {
				if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
					_ = conn.(*net.TCPConn).SetLinger(0)
					conn.Close()
				}
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	e.url = srv.URL + "/v1"
	return e
}

// ---------------------------------------------------------------- NATS

// securedNATS is a scenario's NATS under compactor's permissions (docs/security.md): the
// users `compactor auth` makes for store default, and the admin's `compactor setup` done
// with the settings every scenario's workers share. The workers and the sweeps use the
// worker's key; the scenario's own checks connect as the admin.
type securedNATS struct {
	url   string
	creds string // the users' nkey seeds
}

func (s *securedNATS) key(user string) string { return filepath.Join(s.creds, user+".nk") }

func (s *securedNATS) admin(t *testing.T) nats.Option {
	t.Helper()
	o, err := nats.NkeyOptionFromSeed(s.key("admin-default"))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// authConfig writes the configuration `compactor auth` prints for store default into dir
// (its account holds streams of replicas replicas).
func authConfig(t *testing.T, dir string, replicas int) (conf, creds string) {
	t.Helper()
	creds, conf = filepath.Join(dir, "creds"), filepath.Join(dir, "auth.conf")
	out, err := exec.Command(compactorBin, "auth", "--store", "default", "--credentials", creds, "--replicas", strconv.Itoa(replicas)).Output()
	if err != nil {
		t.Fatalf("compactor auth: %v", err)
	}
	if err := os.WriteFile(conf, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return conf, creds
}

// setup is the admin's `compactor setup` of store default: short JetStream timings, so
// that a killed worker's jobs come back within seconds (the workers follow them).
func (s *securedNATS) setup(t *testing.T, extra ...string) {
	t.Helper()
	args := append([]string{"setup", "--nats-url", s.url, "--nkey", s.key("admin-default"), "--store", "default",
		"--ack-wait", "6s", "--lease-ttl", "3s", "--max-deliver", "8"}, extra...)
	if out, err := exec.Command(compactorBin, args...).CombinedOutput(); err != nil {
		t.Fatalf("compactor setup: %v\n%s", err, out)
	}
}

// startNATS runs one nats-server in this process on a free loopback port, from the
// configuration `compactor auth` prints, and sets it up.
func startNATS(t *testing.T) *securedNATS {
	t.Helper()
	dir := t.TempDir()
	_, creds := authConfig(t, dir, 1)
	conf := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "host: 127.0.0.1\nport: -1\njetstream { store_dir: %q }\ninclude \"auth.conf\"\n", filepath.Join(dir, "js")), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	s := &securedNATS{url: natstest.StartServerWith(t, opts).ClientURL(), creds: creds}
	s.setup(t)
	return s
}

// startCluster runs three routed nodes, each in its own process (internal/natstest) and
// with the configuration `compactor auth` prints, and returns them once JetStream has its
// meta leader and the cluster is set up with 3 replicas.
func startCluster(t *testing.T) ([]*natstest.Node, *securedNATS) {
	conf, creds := authConfig(t, t.TempDir(), 3)
	nodes := natstest.StartClusterWith(t, "compactor-chaos", conf)
	s := &securedNATS{url: natstest.URLs(nodes), creds: creds}
	natstest.WaitJetStream(t, s.url, 30*time.Second, s.admin(t))
	s.setup(t, "--replicas", "3")
	return nodes, s
}

// connect is the scenario's own connection, as the admin.
func connect(t *testing.T, s *securedNATS) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), s.admin(t))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	return nc, js
}

// ---------------------------------------------------------------- processes

// proc is one compactor process; its stderr (the logs) goes to a log file, its stdout to
// another.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  string
	out  string
}

// compactor starts the binary with args.
func compactor(t *testing.T, logDir string, args ...string) *proc {
	t.Helper()
	f, err := os.CreateTemp(logDir, args[0]+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	o, err := os.Create(strings.TrimSuffix(f.Name(), ".log") + ".out")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(compactorBin, args...)
	cmd.Stdout, cmd.Stderr = o, f
	cmd.Env = append(os.Environ(), "COMPACTOR_CONFIG=")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), log: f.Name(), out: o.Name()}
	go func() { _ = cmd.Wait(); f.Close(); o.Close(); close(p.done) }()
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *proc) kill() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
}

func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		p.kill()
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("%v did not exit in %s", p.cmd.Args, d)
	}
	return p.cmd.ProcessState.ExitCode()
}

// workerArgs are the settings every scenario's workers share: the worker's key (its
// JetStream timings are the fleet's, set up by startNATS), the real engine with the OpenAI
// summarizer on the fake endpoint, a small window (every session over budget).
func workerArgs(s *securedNATS, store, llmURL, keyFile string, extra ...string) []string {
	args := []string{"run", "--nats-url", s.url, "--nkey", s.key("worker-default"), "--store", "default=" + store, "--idle", "0", "--concurrency", "8",
		"--summarizer", "openai", "--base-url", llmURL, "--model", "fake-model", "--api-key-file", keyFile,
		"--context-window", "20000", "--keep-recent-tokens", "2000", "--llm-timeout", "3s",
		"--drain-timeout", "2s", "--log-format", "json"}
	return append(args, extra...)
}

// sweepArgs are a sweep's, with the worker's key.
func sweepArgs(s *securedNATS, store string, extra ...string) []string {
	args := []string{"sweep", "--nats-url", s.url, "--nkey", s.key("worker-default"), "--store", "default=" + store, "--idle", "0",
		"--context-window", "20000", "--keep-recent-tokens", "2000", "--json"}
	return append(args, extra...)
}

// waitServed waits until a worker serves store default: it has set up the streams and
// its key is in COMPACTOR_WORKERS, which a sweep checks before it queues anything.
func waitServed(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	waitFor(t, time.Minute, "a worker serving store default", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		kv, err := js.KeyValue(ctx, pipeline.BucketWorkers)
		if err != nil {
			return false
		}
		keys, err := kv.ListKeysFiltered(ctx, "default.*")
		if err != nil {
			return false
		}
		for range keys.Keys() {
			return true
		}
		return false
	})
}

// sweepStats runs `compactor sweep --json` to its end and returns its stats.
func sweepStats(t *testing.T, logs string, args ...string) pipeline.SweepStats {
	t.Helper()
	sw := compactor(t, logs, args...)
	if code := sw.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("sweep: exit %d\n%s", code, tail(sw.log, 20))
	}
	var st pipeline.SweepStats
	b, _ := os.ReadFile(sw.out)
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("sweep output %q: %v", b, err)
	}
	return st
}

func keyFile(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(p, []byte("sk-chaos\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// ---------------------------------------------------------------- JetStream state

// queued is how many jobs are still in COMPACTOR_JOBS (a work queue: until answered).
func queued(js jetstream.JetStream) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, wire.StreamJobs)
	if err != nil {
		return 0, err
	}
	return s.CachedInfo().State.Msgs, nil
}

// outcomes counts the events in COMPACTOR_EVENTS by outcome (retries included), reading
// the stream again from the start when a read fails (a cluster still settling after a
// node restart).
func outcomes(t *testing.T, js jetstream.JetStream) map[string]int {
	t.Helper()
	var err error
	for range 10 {
		var out map[string]int
		if out, err = readOutcomes(js); err == nil {
			return out
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("reading events (10 tries): %v", err)
	return nil
}

func readOutcomes(js jetstream.JetStream) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, wire.StreamEvents)
	if err != nil {
		return nil, err
	}
	last := s.CachedInfo().State.LastSeq
	out := map[string]int{}
	if last == 0 {
		return out, nil
	}
	// Message by message: an ordered consumer recreated while the cluster settles meets
	// "no responders" for a while.
	for seq := s.CachedInfo().State.FirstSeq; seq <= last; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", seq, err)
		}
		var ev wire.Event
		if json.Unmarshal(m.Data, &ev) == nil {
			out[string(ev.Outcome)]++
		}
	}
	return out, nil
}

func deadLetters(t *testing.T, js jetstream.JetStream) uint64 {
	var err error
	for range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var s jetstream.Stream
		s, err = js.Stream(ctx, wire.StreamDLQ)
		cancel()
		if err == nil {
			return s.CachedInfo().State.Msgs
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("dead letters: %v", err)
	return 0
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tail returns the last lines of a log file, for failure messages.
func tail(p string, n int) string {
	b, _ := os.ReadFile(p)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
