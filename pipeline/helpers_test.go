package pipeline

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/natstest"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/sweep"
	"github.com/compactor-dev/compactor/wire"
)

// bundle is one test's world: a real embedded nats-server on a random port with its store
// in t.TempDir(), a store directory, and a client connection.
type bundle struct {
	t   testing.TB
	url string
	dir string
	ns  *server.Server
	nc  *nats.Conn
	js  jetstream.JetStream
}

func newBundle(t testing.TB) *bundle {
	t.Helper()
	ns := natstest.StartServer(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	dir := t.TempDir()
	return &bundle{t: t, url: ns.ClientURL(), dir: dir, ns: ns, nc: nc, js: js}
}

// config is a fast configuration for tests: short AckWait, leases and backoff.
func (b *bundle) config(h Handler) Config {
	return Config{
		Stores:          []Store{{Name: "default", Dir: b.dir}},
		NATS:            access.NATSConfig{URL: b.url},
		Setup:           true,
		Concurrency:     4,
		Idle:            -1,
		AckWait:         time.Second,
		LeaseTTL:        2 * time.Second,
		LeaseBusyDelay:  200 * time.Millisecond,
		BackoffBase:     50 * time.Millisecond,
		BackoffMax:      time.Second,
		ShutdownTimeout: 5 * time.Second,
		Handler:         h,
	}
}

func (b *bundle) service(cfg Config) *Service { return startService(b.t, cfg) }

// startService creates and starts a Service, closed when the test ends.
func startService(t testing.TB, cfg Config) *Service {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func (b *bundle) run(s *Service) (stop func()) { return runService(b.t, s) }

// runService starts s.Run, waits until its workers are up (listeners registered, every
// fetch loop running) or Run has returned, and returns a stop function that cancels it and
// waits for it; it is called when the test ends at the latest. Without the wait, a hook
// report a test publishes at once could reach NATS before the service listens for it,
// and be lost (core NATS keeps nothing): TestPreparedDeletedOnceUsed failed so once.
func runService(t testing.TB, s *Service) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	up := func() bool {
		for _, st := range s.cfg.Stores {
			s.loops.mu.Lock()
			running := s.loops.state(st.Name).running
			s.loops.mu.Unlock()
			if !running {
				return false
			}
		}
		return true
	}
	waitfor.Until(t, "the service's workers started", func() bool {
		select {
		case err := <-done:
			done <- err // stop reports it
			return true
		default:
			return up()
		}
	})
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func randHex(n int) string {
	buf := make([]byte, (n+1)/2)
	_, _ = rand.Read(buf)
	return hex.EncodeToString(buf)[:n]
}

// writeSession writes a small v3 session (header + one user message) at rel under dir
// and returns its session id and leaf.
func writeSession(t testing.TB, dir, rel string) (sid, leaf string) {
	t.Helper()
	sid = fmt.Sprintf("%s-%s-7%s-8%s-%s", randHex(8), randHex(4), randHex(3), randHex(3), randHex(12))
	leaf = randHex(8)
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	content := fmt.Sprintf(`{"type":"session","version":3,"id":%q,"timestamp":"2026-01-01T00:00:00.000Z","cwd":"/tmp"}`+"\n"+
		`{"type":"message","id":%q,"parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}`+"\n", sid, leaf)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return sid, leaf
}

type line struct {
	Type     string `json:"type"`
	ID       string `json:"id"`
	ParentID string `json:"parentId"`
}

func readLines(t testing.TB, file string) []line {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []line
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s: bad line %q: %v", file, sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

func countType(t testing.TB, file, typ string) int {
	n := 0
	for _, l := range readLines(t, file) {
		if l.Type == typ {
			n++
		}
	}
	return n
}

// appendLine appends one entry line with O_APPEND and fsync, as the real handler must.
func appendLine(file, typ, parent string) (string, error) {
	id := randHex(8)
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, `{"type":%q,"id":%q,"parentId":%q,"timestamp":"2026-01-01T00:00:02.000Z"}`+"\n", typ, id, parent); err != nil {
		return "", err
	}
	return id, f.Sync()
}

// fakeHandler is an idempotent handler over real files: it appends a compaction (or a
// branch_summary) line after checking that the leaf is still the one the job expects and
// that the path does not already end in a compaction.
type fakeHandler struct {
	delay time.Duration
	// before runs first; a non-nil error is returned as the handler's.
	before func(ctx context.Context, job wire.Job, file string) error
	// ignoreCtx makes the delay uninterruptible (a worker that does not notice anything).
	ignoreCtx bool

	mu        sync.Mutex
	calls     int
	active    map[string]int
	maxActive int
}

func (h *fakeHandler) Handle(ctx context.Context, job wire.Job, file string) (wire.Result, error) {
	h.mu.Lock()
	h.calls++
	if h.active == nil {
		h.active = map[string]int{}
	}
	h.active[job.SessionID]++
	h.maxActive = max(h.maxActive, h.active[job.SessionID])
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.active[job.SessionID]--
		h.mu.Unlock()
	}()
	if h.before != nil {
		if err := h.before(ctx, job, file); err != nil {
			return wire.Result{}, err
		}
	}
	if h.delay > 0 {
		if h.ignoreCtx {
			time.Sleep(h.delay)
		} else {
			select {
			case <-ctx.Done():
				return wire.Result{}, ctx.Err()
			case <-time.After(h.delay):
			}
		}
	}
	return applyFake(job, file)
}

func applyFake(job wire.Job, file string) (wire.Result, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return wire.Result{}, Permanent(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var last line
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		return wire.Result{}, Permanent(err)
	}
	if job.ExpectLeafID != "" && last.ID != job.ExpectLeafID {
		return wire.Result{}, Skip("leaf moved: expected " + job.ExpectLeafID + ", found " + last.ID)
	}
	typ := "compaction"
	if job.Kind == wire.KindBranchSummary {
		typ = "branch_summary"
	} else if last.Type == "compaction" {
		return wire.Result{}, Skip("already compacted")
	}
	id, err := appendLine(file, typ, last.ID)
	if err != nil {
		return wire.Result{}, err
	}
	return wire.Result{Tally: wire.Tally{Outcome: OutcomeDone, EntryID: id, TokensBefore: 1000, TokensAfter: 100, LLMTokens: 50}, LeafID: id}, nil
}

func (h *fakeHandler) stats() (calls, maxActive int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls, h.maxActive
}

// leafAssessor says a session is over budget unless its last line is a compaction.
var leafAssessor = sweep.AssessorFunc(func(ctx context.Context, file string) (sweep.Assessment, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return sweep.Assessment{}, err
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var hdr struct {
		ID      string `json:"id"`
		Version int    `json:"version"`
	}
	_ = json.Unmarshal([]byte(lines[0]), &hdr)
	var last line
	_ = json.Unmarshal([]byte(lines[len(lines)-1]), &last)
	return sweep.Assessment{SessionID: hdr.ID, LeafID: last.ID, Tokens: 100 * len(lines), ContextWindow: 1000,
		OverBudget: last.Type != "compaction", Version: hdr.Version, HasAssistant: true, Compacted: last.Type == "compaction"}, nil
})

// deadLetters reads every record in COMPACTOR_DLQ.
func (b *bundle) deadLetters() []wire.DeadLetter {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := b.js.Stream(ctx, wire.StreamDLQ)
	if err != nil {
		return nil
	}
	info, err := st.Info(ctx)
	if err != nil {
		b.t.Fatal(err)
	}
	var out []wire.DeadLetter
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		var dl wire.DeadLetter
		if err := json.Unmarshal(m.Data, &dl); err != nil {
			b.t.Fatal(err)
		}
		out = append(out, dl)
	}
	return out
}

// events reads every event in COMPACTOR_EVENTS.
func (b *bundle) events() []wire.Event {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := b.js.Stream(ctx, wire.StreamEvents)
	if err != nil {
		return nil
	}
	info, err := st.Info(ctx)
	if err != nil {
		b.t.Fatal(err)
	}
	var out []wire.Event
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		var ev wire.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			b.t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

func (b *bundle) pending() uint64 {
	b.t.Helper()
	st, err := b.js.Stream(context.Background(), wire.StreamJobs)
	if err != nil {
		b.t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		b.t.Fatal(err)
	}
	return info.State.Msgs
}

func (b *bundle) enqueue(job wire.Job) fleetops.EnqueueResult {
	b.t.Helper()
	r, err := fleetops.Enqueue(context.Background(), b.nc, job, false, 10*time.Second)
	if err != nil {
		b.t.Fatal(err)
	}
	return r
}

// get asks the metrics server of s for path.
func get(t testing.TB, s *Service, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.MetricsAddr().String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
