//go:build redteam

package redteam

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/internal/natstest"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/wire"
)

var compactorBin string // built from the checkout by TestMain

func TestMain(m *testing.M) {
	natstest.MaybeRunNode()
	dir, err := os.MkdirTemp("", "compactor-redteam-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	compactorBin = filepath.Join(dir, "compactor")
	build := exec.Command("go", "build", "-o", compactorBin, "../cmd/compactor")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "redteam: build compactor:", err)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// The session every flow copies (with a new id each time): over budget at the workers'
// settings, with enough before its last turns to prepare and bridge.
const (
	sourceSession = "--home-dev-acme-api--/2025-11-07T08-30-00-000Z_019a5d6f-cf40-70d8-8e58-66b28cf3290e.jsonl"
	sourceID      = "019a5d6f-cf40-70d8-8e58-66b28cf3290e"
)

// hostA's account is set up with small limits, so that a flood reaches them within
// seconds (its limits, not hostB's, are what a flood of hostA's can reach).
var hostALimits = []string{"--jobs-max-bytes", "1MiB", "--events-max-bytes", "1MiB", "--dlq-max-bytes", "1MiB", "--records-max-bytes", "1MiB"}

// fleet is the suite's world: the server, both stores' roots, workers and fake models.
type fleet struct {
	t      *testing.T
	dir    string
	url    string
	creds  string
	roots  map[string]string
	llm    map[string]*fakellm.Server
	worker map[string]*proc
	// metrics is each worker's /metrics address.
	metrics map[string]string
	adminB  *nats.Conn // hostB's admin: the snapshots
	agentB  *nats.Conn // hostB's agent: its flows
	cut     string     // the source session's cut at keep-recent 2000 (a bridge's target)
	leaf    string     // the source session's leaf
	next    *session   // the session hostB's next flows work on (written before the attack)
	// template is the source session as the examples hold it (before any sweep of ours).
	template []byte
	// flowTimeout bounds each of hostB's flows (2 minutes; shorter in the control run,
	// where they are expected to fail).
	flowTimeout time.Duration
}

// session is a copy of the source session in a store, under a new id.
type session struct{ rel, id string }

func startFleet(t *testing.T) *fleet { return startFleetIn(t, false) }

// startFleetIn starts the fleet; with oneAccount, both stores' users (with the same
// permissions) are in one NATS account, as in a fleet of layout 2 (the control run: what
// the accounts stop).
func startFleetIn(t *testing.T, oneAccount bool) *fleet {
	t.Helper()
	dir := t.TempDir()
	f := &fleet{t: t, dir: dir, creds: filepath.Join(dir, "creds"), roots: map[string]string{}, llm: map[string]*fakellm.Server{},
		worker: map[string]*proc{}, metrics: map[string]string{}, flowTimeout: 2 * time.Minute}
	conf, errOut, err := run(context.Background(), "auth", "--store", "hostA", "--store", "hostB", "--credentials", f.creds)
	if err != nil {
		t.Fatalf("compactor auth: %v\n%s", err, errOut)
	}
	if oneAccount {
		conf = oneAccountConfig(t, f.creds)
	}
	if err := os.WriteFile(filepath.Join(dir, "auth.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	serverConf := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(serverConf, fmt.Appendf(nil, "host: 127.0.0.1\nport: -1\njetstream { store_dir: %q }\ninclude \"auth.conf\"\n", filepath.Join(dir, "js")), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(serverConf)
	if err != nil {
		t.Fatalf("the server does not take the generated configuration: %v", err)
	}
	f.url = natstest.StartServerWith(t, opts).ClientURL()
	if oneAccount {
		if out, errOut, err := run(context.Background(), "setup", "--nats-url", f.url, "--nkey", f.seed("admin-hostB"), "--store", "hostA", "--store", "hostB"); err != nil {
			t.Fatalf("setup: %v\n%s%s", err, out, errOut)
		}
	} else {
		if out, errOut, err := run(context.Background(), "setup", "--nats-url", f.url, "--credentials", f.creds, "--store", "hostB"); err != nil {
			t.Fatalf("setup hostB: %v\n%s%s", err, out, errOut)
		}
		if out, errOut, err := run(context.Background(), append([]string{"setup", "--nats-url", f.url, "--credentials", f.creds, "--store", "hostA"}, hostALimits...)...); err != nil {
			t.Fatalf("setup hostA: %v\n%s%s", err, out, errOut)
		}
	}
	repo, _ := filepath.Abs("..")
	for _, st := range []string{"hostA", "hostB"} {
		f.roots[st] = filepath.Join(dir, st)
		if err := os.CopyFS(f.roots[st], os.DirFS(filepath.Join(repo, "examples", "sessions"))); err != nil {
			t.Fatal(err)
		}
		f.llm[st] = fakellm.Start(t)
		f.llm[st].SetDefault(fakellm.Behavior{Latency: 150 * time.Millisecond})
		f.startWorker(st)
	}
	f.adminB = f.conn("admin-hostB", pipeline.RoleAdmin)
	f.agentB = f.conn("agent-hostB", pipeline.RoleAgent, "hostB")
	plan, errOut, err := run(context.Background(), "plan", filepath.Join(f.roots["hostB"], sourceSession), "--json", "--policy", "pi", "--counter", "estimate", "--keep-recent-tokens", "2000")
	var p struct {
		FirstKept string `json:"firstKeptEntryId"`
	}
	if err != nil || json.Unmarshal([]byte(plan), &p) != nil || p.FirstKept == "" {
		t.Fatalf("plan: %v %s", err, errOut)
	}
	f.cut, f.leaf = p.FirstKept, lastEntryID(t, filepath.Join(f.roots["hostB"], sourceSession))
	if f.template, err = os.ReadFile(filepath.Join(f.roots["hostB"], sourceSession)); err != nil {
		t.Fatal(err)
	}
	// Both stores' own sweeps first: every example session over budget is compacted.
	for _, st := range []string{"hostA", "hostB"} {
		if out, errOut, err := f.cli(context.Background(), "worker-"+st, "sweep", "--store", st+"="+f.roots[st], "--idle", "0", "--context-window", "40000",
			"--keep-recent-tokens", "8000"); err != nil {
			t.Fatalf("%s's first sweep: %v\n%s%s", st, err, out, errOut)
		}
	}
	f.quiet("hostA")
	f.quiet("hostB")
	return f
}

// oneAccountConfig is a server configuration with every user of the fleet's accounts (their
// keys and permissions as compactor auth made them) in one account.
func oneAccountConfig(t *testing.T, creds string) string {
	t.Helper()
	out, errOut, err := run(context.Background(), "auth", "--store", "hostA", "--store", "hostB", "--json")
	if err != nil {
		t.Fatalf("compactor auth --json: %v\n%s", err, errOut)
	}
	var accounts []struct {
		Users []struct {
			User        string `json:"user"`
			Permissions struct {
				Publish, Subscribe []string
			} `json:"permissions"`
		} `json:"users"`
	}
	if err := json.Unmarshal([]byte(out), &accounts); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("accounts {\n  shared: {\n    jetstream: enabled\n    users = [\n")
	for _, a := range accounts {
		for _, u := range a.Users {
			seed, err := os.ReadFile(filepath.Join(creds, u.User+".nk"))
			if err != nil {
				t.Fatal(err)
			}
			kp, err := nkeys.FromSeed(bytes.TrimSpace(seed))
			if err != nil {
				t.Fatal(err)
			}
			pub, _ := kp.PublicKey()
			quoted := func(list []string) string {
				var q []string
				for _, s := range list {
					q = append(q, strconv.Quote(s))
				}
				return "[" + strings.Join(q, ", ") + "]"
			}
			fmt.Fprintf(&b, "      { nkey: %q, permissions: { publish: { allow: %s }, subscribe: { allow: %s } } }\n", pub,
				quoted(u.Permissions.Publish), quoted(u.Permissions.Subscribe))
		}
	}
	b.WriteString("    ]\n  }\n}\n")
	return b.String()
}

// startWorker runs store's `compactor run` with its worker's key.
func (f *fleet) startWorker(st string) {
	t := f.t
	args := []string{"run", "--nats-url", f.url, "--nkey", f.seed("worker-" + st), "--store", st + "=" + f.roots[st], "--idle", "0", "--concurrency", "4",
		"--summarizer", "openai", "--base-url", f.llm[st].URL(), "--model", "fake-model", "--llm-timeout", "20s",
		"--context-window", "40000", "--keep-recent-tokens", "8000", "--drain-timeout", "2s", "--log-format", "json",
		"--data-dir", filepath.Join(f.dir, "data-"+st), "--metrics-addr", "127.0.0.1:0"}
	p := startProc(t, compactorBin, args...)
	f.worker[st] = p
	addr := regexp.MustCompile(`"msg":"metrics listening","addr":"([^"]+)"`)
	waitFor(t, time.Minute, st+"'s worker ready", func() bool {
		if p.exited() {
			t.Fatalf("%s's worker exited:\n%s", st, p.log.String())
		}
		m := addr.FindStringSubmatch(p.log.String())
		if m != nil {
			f.metrics[st] = m[1]
		}
		return m != nil && strings.Contains(p.log.String(), "compactor pipeline ready")
	})
}

func (f *fleet) seed(user string) string { return filepath.Join(f.creds, user+".nk") }

// conn connects as user, acting as role for stores (its inbox, its refusals said at once).
func (f *fleet) conn(user string, role pipeline.Role, stores ...string) *nats.Conn {
	f.t.Helper()
	n := pipeline.NATSConfig{URL: f.url, NKeySeedFile: f.seed(user), Role: role, Stores: stores, Name: "redteam " + user}
	nc, err := n.Connect()
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(nc.Close)
	return nc
}

// cli runs a compactor command with user's key.
func (f *fleet) cli(ctx context.Context, user string, args ...string) (stdout, stderr string, err error) {
	return run(ctx, append(args, "--nats-url", f.url, "--nkey", f.seed(user))...)
}

// run runs the compactor binary.
func run(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	cmd := exec.CommandContext(ctx, compactorBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// newSession writes a copy of the source session into store's root under a new id.
func (f *fleet) newSession(store string) *session {
	f.t.Helper()
	data := f.template
	id := uuid.Must(uuid.NewV7()).String()
	rel := filepath.Join("redteam", "2026-01-01T00-00-00-000Z_"+id+".jsonl")
	p := filepath.Join(f.roots[store], rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, bytes.ReplaceAll(data, []byte(sourceID), []byte(id)), 0o644); err != nil {
		f.t.Fatal(err)
	}
	return &session{rel: rel, id: id}
}

// prepareJob is hostB's preparation of s, as the Pi extension asks for one.
func (f *fleet) prepareJob(s *session) wire.Job {
	j := wire.Job{Kind: wire.KindPrepare, Store: "hostB", Path: s.rel, SessionID: s.id, ExpectLeafID: f.leaf, Reason: "extension",
		Policy: "pi", Counter: "estimate", KeepRecentTokens: 6000}
	j.Normalize(time.Now())
	return j
}

// ---------------------------------------------------------------- hostB's flows

// flows are hostB's own flows, in order, each timed.
var flows = []string{"prepare", "read prepared", "bridge", "hook", "enqueue --wait", "sweep"}

// hostBRound runs hostB's flows once on f.next (and writes the session of the next round).
func (f *fleet) hostBRound(ctx context.Context) (map[string]time.Duration, error) {
	s := f.next
	if s == nil {
		s = f.newSession("hostB")
	}
	f.next = nil
	out := map[string]time.Duration{}
	step := func(name string, do func() error) error {
		start := time.Now()
		err := do()
		out[name] = time.Since(start)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	key := "$KV." + wire.BucketPrepared + "." + wire.PreparedKey("hostB", s.id)
	steps := []struct {
		name string
		do   func() error
	}{
		{"prepare", func() error {
			r, err := pipeline.Enqueue(ctx, f.agentB, f.prepareJob(s), true, f.flowTimeout)
			if err == nil && r.Event.Outcome != pipeline.OutcomeDone {
				err = fmt.Errorf("outcome %s: %s %s", r.Event.Outcome, r.Event.Reason, r.Event.Error)
			}
			return err
		}},
		{"read prepared", func() error {
			v, err := directGet(ctx, f.agentB, "KV_"+wire.BucketPrepared, key)
			if err == nil && v == nil {
				err = errors.New("no prepared value")
			}
			return err
		}},
		{"bridge", func() error {
			req, _ := json.Marshal(wire.BridgeRequest{V: 1, Store: "hostB", Path: s.rel, SessionID: s.id, LeafID: f.leaf, FirstKeptEntryID: f.cut})
			m, err := f.agentB.RequestWithContext(ctx, wire.BridgeSubject("hostB", s.id), req)
			if err != nil {
				return err
			}
			var rep wire.BridgeReply
			if json.Unmarshal(m.Data, &rep) != nil || rep.Error != "" {
				return fmt.Errorf("reply %s", m.Data)
			}
			return nil
		}},
		{"hook", func() error {
			rep, _ := json.Marshal(wire.HookReport{V: 1, Store: "hostB", SessionID: s.id, Outcome: wire.HookHit, Bridged: true})
			if err := f.agentB.Publish(wire.HookSubject("hostB", s.id), rep); err != nil {
				return err
			}
			for {
				v, err := directGet(ctx, f.agentB, "KV_"+wire.BucketPrepared, key)
				if err != nil || v == nil {
					return err
				}
				select {
				case <-ctx.Done():
					return errors.New("the used summary was not deleted")
				case <-time.After(5 * time.Millisecond):
				}
			}
		}},
		{"enqueue --wait", func() error {
			out, errOut, err := f.cli(ctx, "agent-hostB", "enqueue", filepath.Join(f.roots["hostB"], s.rel), "--store-dir", f.roots["hostB"], "--store", "hostB",
				"--force", "--wait", "--timeout", f.flowTimeout.String())
			var ev wire.Event
			if err == nil && (json.Unmarshal([]byte(out), &ev) != nil || ev.Outcome != pipeline.OutcomeDone) {
				err = fmt.Errorf("%s", out)
			}
			if err != nil {
				return fmt.Errorf("%w: %s%s", err, out, errOut)
			}
			return nil
		}},
		{"sweep", func() error {
			out, errOut, err := f.cli(ctx, "worker-hostB", "sweep", "--store", "hostB="+f.roots["hostB"], "--idle", "0", "--context-window", "40000",
				"--keep-recent-tokens", "8000", "--json")
			if err != nil {
				return fmt.Errorf("%w: %s%s", err, out, errOut)
			}
			return nil
		}},
	}
	for _, st := range steps {
		if err := step(st.name, st.do); err != nil {
			return out, err
		}
	}
	return out, nil
}

// directGet reads the last message of subject (nil when none, or a KV delete marker).
func directGet(ctx context.Context, nc *nats.Conn, stream, subject string) ([]byte, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := nc.RequestWithContext(rctx, "$JS.API.DIRECT.GET."+stream+"."+subject, nil)
	if err != nil {
		return nil, err
	}
	if m.Header.Get("Status") == "404" || m.Header.Get("KV-Operation") != "" {
		return nil, nil
	}
	return m.Data, nil
}

// ---------------------------------------------------------------- hostB's state

// snapshot is everything of hostB's an attack must leave as it was.
type snapshot struct {
	items map[string]string // what → hash of its bytes
	// expires is when a message's stream drops it by its age (its stream's max age):
	// gone after that, it went by itself.
	expires map[string]time.Time
}

// snapshot reads hostB's state: every message of every stream of its account (subject,
// sequence, headers, data), but its workers' beats and owner record (rewritten every 10 s
// by its own worker: the owner's identity is compared instead); every stream's
// configuration and consumers; every session file; its worker's count of foreign records.
func (f *fleet) snapshot(ctx context.Context) snapshot {
	f.t.Helper()
	s := snapshot{items: map[string]string{}, expires: map[string]time.Time{}}
	put := func(what string, b []byte) {
		sum := sha256.Sum256(b)
		s.items[what] = hex.EncodeToString(sum[:])
	}
	js, _ := jetstream.New(f.adminB)
	names := js.StreamNames(ctx)
	var streams []string
	for n := range names.Name() {
		streams = append(streams, n)
	}
	if err := names.Err(); err != nil {
		f.t.Fatalf("snapshot: %v", err)
	}
	slices.Sort(streams)
	s.items["streams"] = strings.Join(streams, ",")
	for _, name := range streams {
		str, err := js.Stream(ctx, name)
		if err != nil {
			f.t.Fatalf("snapshot %s: %v", name, err)
		}
		cfg, _ := json.Marshal(str.CachedInfo().Config)
		put("config "+name, cfg)
		var cons []string
		cl := str.ListConsumers(ctx)
		for ci := range cl.Info() {
			if ci.Config.Durable == "" {
				continue // a watch of hostB's own (a sweep's), gone when it ends
			}
			c, _ := json.Marshal(ci.Config)
			cons = append(cons, ci.Name+" "+string(c))
		}
		slices.Sort(cons)
		put("consumers "+name, []byte(strings.Join(cons, "\n")))
		if name == "KV_"+pipeline.BucketWorkers {
			if m, err := str.GetLastMsgForSubject(ctx, "$KV."+pipeline.BucketWorkers+".hostB._owner"); err == nil {
				var id pipeline.StoreIdentity
				_ = json.Unmarshal(m.Data, &id)
				b, _ := json.Marshal([]any{id.Store, id.Marker, id.Host, id.Root, id.Dev, id.Ino, id.Shared})
				put("owner of hostB", b)
			}
			continue
		}
		info := str.CachedInfo().State
		for seq := max(info.FirstSeq, 1); seq <= info.LastSeq; {
			m, err := msgGet(ctx, f.adminB, name, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				f.t.Fatalf("snapshot %s %d: %v", name, seq, err)
			}
			what := fmt.Sprintf("%s %d %s", name, m.Seq, m.Subject)
			put(what, append(m.Header, m.Data...))
			if age := str.CachedInfo().Config.MaxAge; age > 0 {
				s.expires[what] = m.Time.Add(age)
			}
			seq = m.Seq + 1
		}
	}
	err := filepath.WalkDir(f.roots["hostB"], func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(f.roots["hostB"], p)
		put("file "+rel, b)
		return err
	})
	if err != nil {
		f.t.Fatal(err)
	}
	s.items["foreign records of hostB's worker"] = strconv.FormatFloat(f.metric("hostB", "compactor_foreign_records_total"), 'f', -1, 64)
	return s
}

// storedMsg is a stream's message as the JSON API gives it: its sequence is the server's
// field (a direct get's answer puts the server's headers after the message's own, which a
// relayed message carries too: the client library would read those).
type storedMsg struct {
	Subject string    `json:"subject"`
	Seq     uint64    `json:"seq"`
	Header  []byte    `json:"hdrs"`
	Data    []byte    `json:"data"`
	Time    time.Time `json:"time"`
}

// msgGet reads the first message of stream at seq or after (the admin's request).
func msgGet(ctx context.Context, nc *nats.Conn, stream string, seq uint64) (*storedMsg, error) {
	req, _ := json.Marshal(map[string]any{"seq": seq, "next_by_subj": ">"})
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r, err := nc.RequestWithContext(rctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Error *jetstream.APIError `json:"error"`
		Msg   *storedMsg          `json:"message"`
	}
	if err := json.Unmarshal(r.Data, &resp); err != nil {
		return nil, err
	}
	if resp.Error != nil || resp.Msg == nil {
		return nil, jetstream.ErrMsgNotFound
	}
	return resp.Msg, nil
}

// diff names what differs between two snapshots.
func (a snapshot) diff(b snapshot) []string {
	var out []string
	for k, v := range a.items {
		if w, ok := b.items[k]; !ok {
			if at, ok := a.expires[k]; ok && time.Now().After(at.Add(-time.Second)) {
				continue // its stream's age limit took it
			}
			out = append(out, "gone: "+k)
		} else if w != v {
			out = append(out, "changed: "+k)
		}
	}
	for k := range b.items {
		if _, ok := a.items[k]; !ok {
			out = append(out, "new: "+k)
		}
	}
	slices.Sort(out)
	return out
}

// metric sums a counter or gauge of store's worker over its labels.
func (f *fleet) metric(store, name string) float64 {
	resp, err := http.Get("http://" + f.metrics[store] + "/metrics")
	if err != nil {
		f.t.Fatalf("metrics of %s: %v", store, err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			fields := strings.Fields(line)
			v, _ := strconv.ParseFloat(fields[len(fields)-1], 64)
			sum += v
		}
	}
	return sum
}

// quiet waits until store has no job queued or running (its leases released).
func (f *fleet) quiet(store string) {
	f.t.Helper()
	admin := f.conn("admin-"+store, pipeline.RoleAdmin)
	js, _ := jetstream.New(admin)
	waitFor(f.t, 2*time.Minute, store+" quiet", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := js.Consumer(ctx, wire.StreamJobs, pipeline.ConsumerName(store))
		if err != nil {
			return false
		}
		ci := c.CachedInfo()
		return ci.NumPending == 0 && ci.NumAckPending == 0 && f.metric(store, "compactor_jobs_in_flight") == 0
	})
	admin.Close()
}

// ---------------------------------------------------------------- processes

type proc struct {
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan struct{}
}

func startProc(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), log: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor waits for cond, checking it every 20 ms, and fails the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func lastEntryID(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	var e struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &e); err != nil {
		t.Fatal(err)
	}
	return e.ID
}
