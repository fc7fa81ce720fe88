package cli

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/pisession"
	"github.com/compactor-dev/compactor/internal/waitfor"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/cli/status"
	"github.com/compactor-dev/compactor/internal/natstest"
	"github.com/compactor-dev/compactor/operator"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/wire"
)

// The fleet's permissions, end to end: a real nats-server started from the configuration `compactor
// auth` generates (once plain, once with TLS; one NATS account per host),
// two hosts A and B, each account's operator. With A's
// worker and agent credentials every attempt on B's part is refused at once with the
// "not permitted" message, and none is allowed; A's and B's own flows pass (a sweep
// compacts, enqueue --wait returns the result, a prepared summary is bridged and then
// deleted once Pi's hook ran), and the operator replays a dead letter of each.
func TestFleetPermissions(t *testing.T) {
	t.Parallel()
	for _, withTLS := range []bool{false, true} {
		name := "plain"
		if withTLS {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) { fleetPermissions(t, withTLS) })
	}
}

// fleet is the test's NATS and its users.
type fleet struct {
	t     *testing.T
	url   string
	creds string
	ca    string // with TLS
	dirs  map[string]string
}

// args are the connection flags of a user.
func (f *fleet) args(user string) []string {
	a := []string{"--nats-url", f.url, "--nkey", filepath.Join(f.creds, user+".nk")}
	if f.ca != "" {
		a = append(a, "--tls-ca", f.ca)
	}
	return a
}

// conn connects as user, acting as role for stores (its inbox and its refusals' words).
func (f *fleet) conn(user string, role access.Role, stores ...string) *nats.Conn {
	f.t.Helper()
	n := access.NATSConfig{URL: f.url, NKeySeedFile: filepath.Join(f.creds, user+".nk"), TLSCA: f.ca, Role: role, Stores: stores, Name: "test " + user}
	nc, err := n.Connect()
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(nc.Close)
	return nc
}

func (f *fleet) cli(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Run(context.Background(), &Env{Args: args, Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
	return code, out.String(), errb.String()
}

const (
	acmeSession = "--home-dev-acme-api--/2025-11-07T08-30-00-000Z_019a5d6f-cf40-70d8-8e58-66b28cf3290e.jsonl"
	acmeID      = "019a5d6f-cf40-70d8-8e58-66b28cf3290e"
)

func fleetPermissions(t *testing.T, withTLS bool) {
	dir := t.TempDir()
	f := &fleet{t: t, creds: filepath.Join(dir, "creds"), dirs: map[string]string{}}
	authArgs := []string{"auth", "--store", "hostA", "--store", "hostB", "--credentials", f.creds}
	if withTLS {
		var cert, key string
		cert, key, f.ca = testCerts(t, dir)
		authArgs = append(authArgs, "--tls-cert", cert, "--tls-key", key)
	}
	code, conf, errOut := f.cli(authArgs...)
	if code != ExitOK {
		t.Fatalf("auth: exit %d\n%s", code, errOut)
	}
	if withTLS && !strings.Contains(conf, "tls {") {
		t.Fatalf("no tls block:\n%s", conf)
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
		t.Fatalf("the server does not take the generated configuration: %v\n%s", err, conf)
	}
	f.url = natstest.StartServerWith(t, opts).ClientURL()
	if withTLS != strings.HasPrefix(f.url, "tls://") {
		t.Fatalf("url %s", f.url)
	}

	// Anonymous: refused. Then the admin's own setup.
	var anon []nats.Option
	if withTLS {
		anon = append(anon, nats.RootCAs(f.ca))
	}
	if nc, err := nats.Connect(f.url, anon...); err == nil || !errors.Is(err, nats.ErrAuthorization) {
		if nc != nil {
			nc.Close()
		}
		t.Fatalf("an anonymous connection: %v", err)
	}
	// Every host's account, each with its own admin's seed (--credentials).
	setupArgs := []string{"setup", "--nats-url", f.url, "--credentials", f.creds}
	if f.ca != "" {
		setupArgs = append(setupArgs, "--tls-ca", f.ca)
	}
	if code, out, errOut := f.cli(setupArgs...); code != ExitOK || !strings.Contains(out, "account compactor-hostA:\n") ||
		!strings.Contains(out, "set up (layout 3): stores hostA;") || !strings.Contains(out, "set up (layout 3): stores hostB;") {
		t.Fatalf("setup: exit %d\n%s\n%s", code, out, errOut)
	}
	var workers []*cliProc
	for _, h := range []string{"hostA", "hostB"} {
		f.dirs[h] = filepath.Join(dir, h)
		if err := os.CopyFS(f.dirs[h], os.DirFS(filepath.Join(repoRoot(t), "examples", "sessions"))); err != nil {
			t.Fatal(err)
		}
		p := startCLI(append([]string{"run", "--store", h + "=" + f.dirs[h], "--idle", "0", "--context-window", "40000", "--keep-recent-tokens", "8000",
			"--log-format", "json", "--data-dir", t.TempDir(), "--shutdown-timeout", "2s"}, f.args("worker-"+h)...))
		if err := p.ready(); err != nil {
			t.Fatal(err)
		}
		workers = append(workers, p)
	}
	defer func() {
		for _, p := range workers {
			p.stop(t)
			if strings.Contains(p.log.String(), "not permitted") {
				t.Errorf("%s logged a refusal:\n%s", p.args[1], p.log.String())
			}
		}
	}()

	// A's attempts on B: none allowed, every one refused at once, named.
	wa, ga := f.conn("worker-hostA", access.RoleWorker, "hostA"), f.conn("agent-hostA", access.RoleAgent, "hostA")
	refused, allowed, slowest := 0, 0, time.Duration(0)
	for _, a := range attemptsOnB(f) {
		for _, who := range []struct {
			name string
			nc   *nats.Conn
		}{{"worker-hostA", wa}, {"agent-hostA", ga}} {
			took, err := try(a, who.name, who.nc, f)
			var pe *access.PermissionError
			switch {
			case err == nil:
				allowed++
				t.Errorf("ALLOWED with %s's credentials: %s", who.name, a.name)
			case errors.As(err, &pe) || strings.HasPrefix(err.Error(), "not permitted: "):
				refused++
				slowest = max(slowest, took)
				if !strings.HasPrefix(err.Error(), "not permitted: ") {
					t.Errorf("%s (%s): %v", a.name, who.name, err)
				}
			default:
				t.Errorf("%s (%s): neither refused nor allowed: %v", a.name, who.name, err)
			}
		}
	}
	t.Logf("attempts on store hostB with hostA's worker and agent credentials: %d refused with \"not permitted\", %d allowed; slowest refusal %s",
		refused, allowed, slowest.Round(time.Millisecond))
	if allowed != 0 || refused < 60 {
		t.Fatalf("%d refused, %d allowed", refused, allowed)
	}

	// Each host's own flows, with its own credentials.
	for _, h := range []string{"hostA", "hostB"} {
		ownFlows(t, f, h)
	}

	// compactor status with each role's key of hostA's account: its workers, at once (it
	// timed out after 10 s with a worker's, an agent's or an operator's key before issue
	// 32); hostB's workers are in no account hostA's keys reach.
	var statusTimes []string
	for _, user := range []string{"worker-hostA", "agent-hostA", "operator-hostA"} {
		for _, store := range []string{"hostA", "hostB", ""} {
			if store == "" && user != "operator-hostA" {
				continue // a store's user says which store (its inbox is the store's)
			}
			args := append([]string{"status", "--json"}, f.args(user)...)
			if store != "" {
				args = append(args, "--store", store)
			}
			start := time.Now()
			code, out, errOut := f.cli(args...)
			took := time.Since(start)
			var rep status.Report
			if store == "hostB" && user != "operator-hostA" {
				// Another store's workers with a store's key: not permitted, at once.
				if code != 1 || !strings.Contains(errOut, "not permitted") || took > 5*time.Second {
					t.Fatalf("status of hostB as %s: exit %d in %s\n%s%s", user, code, took, out, errOut)
				}
				statusTimes = append(statusTimes, fmt.Sprintf("%s --store %s: not permitted in %s", user, store, took.Round(time.Millisecond)))
				continue
			}
			if code != ExitOK || json.Unmarshal([]byte(out), &rep) != nil || took > 5*time.Second {
				t.Fatalf("status %v as %s: exit %d in %s\n%s%s", store, user, code, took, out, errOut)
			}
			want := 1
			if store == "hostB" {
				want = 0
			}
			if len(rep.Stores) != want || (want == 1 && rep.Stores[0].Store != "hostA") {
				t.Errorf("status %q as %s: %+v", store, user, rep.Stores)
			}
			statusTimes = append(statusTimes, fmt.Sprintf("%s --store %q: %s", user, store, took.Round(time.Millisecond)))
		}
	}
	t.Logf("compactor status: %s", strings.Join(statusTimes, "; "))

	operatorsWindow(t, f)
}

// operatorsWindow: with each account's operator key (--credentials: fleet.json), status
// reads every store's queue, events lists a store's history, the console's view opens on
// both accounts, and pause and resume work; a store's worker reads its own store's pause
// record (it logs no refusal) and no other's, neither it nor an agent may write one, and
// an account's operator may not pause a store of another account.
func operatorsWindow(t *testing.T, f *fleet) {
	t.Helper()
	creds := f.credArgs()
	code, out, errOut := f.cli(append([]string{"status", "--json"}, creds...)...)
	var st status.Report
	if code != ExitOK || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("operator's status: exit %d\n%s\n%s", code, out, errOut)
	}
	if len(st.Stores) != 2 || st.Stores[0].Queue == nil || st.Stores[1].Queue == nil ||
		st.Stores[0].Account != "compactor-hostA" || st.Stores[1].Account != "compactor-hostB" {
		t.Errorf("operators' status reads no queue, or not each store in its account: %s", out)
	}
	for _, w := range st.Warnings {
		if strings.Contains(w, "not read") || strings.Contains(w, "left out") {
			t.Errorf("operators' status: %s", w)
		}
	}
	for _, h := range []string{"hostA", "hostB"} {
		if code, out, errOut := f.cli(append([]string{"events", "--store", h}, creds...)...); code != ExitOK || !strings.Contains(out, acmeID) {
			t.Errorf("operator's events of %s: exit %d\n%s\n%s", h, code, out, errOut)
		}
	}
	// One account's operator key: that account's stores only.
	if code, out, errOut := f.cli(append([]string{"events", "--store", "hostB"}, f.args("operator-hostA")...)...); code != ExitOK || strings.Contains(out, acmeID) {
		t.Errorf("hostA's operator's events of hostB: exit %d\n%s\n%s", code, out, errOut)
	}
	ctx := context.Background()
	accounts := []operator.FleetAccount{
		{Name: "compactor-hostA", Conn: f.conn("operator-hostA", access.RoleOperator), Stores: []string{"hostA"}},
		{Name: "compactor-hostB", Conn: f.conn("operator-hostB", access.RoleOperator), Stores: []string{"hostB"}},
	}
	v, err := operator.OpenFleetView(ctx, accounts, operator.FleetViewOptions{Events: true, DeadLetters: true, Hooks: true})
	if err != nil {
		t.Fatalf("the console's view with the operators' credentials: %v", err)
	}
	defer v.Close()
	if snap := v.Snapshot(); len(snap.Stores) != 2 || len(snap.Stores[0].Workers) != 1 || len(snap.Stores[1].Workers) != 1 || v.Events().Len() == 0 || len(snap.Accounts) != 2 {
		t.Errorf("the operators' view: %+v, %d events", snap, v.Events().Len())
	}
	for _, h := range []string{"hostA", "hostB"} {
		if _, err := v.QueuedJobs(ctx, h, 10); err != nil {
			t.Errorf("the operator's queued jobs of %s: %v", h, err)
		}
		if len(v.Events().Session(h, acmeID)) == 0 {
			t.Errorf("no event of %s's session %s in the view", h, acmeID)
		}
	}
	if code, out, errOut := f.cli(append([]string{"pause", "hostA", "--reason", "test"}, creds...)...); code != ExitOK || !strings.Contains(out, "store hostA paused") {
		t.Fatalf("operator's pause: exit %d\n%s\n%s", code, out, errOut)
	}
	wa := f.conn("worker-hostA", access.RoleWorker, "hostA")
	if r, err := fleetops.ReadPaused(ctx, wa, "hostA"); err != nil || r == nil || !r.Paused {
		t.Errorf("worker of hostA reading its pause record: %+v, %v", r, err)
	}
	opA := accounts[0].Conn
	waitfor.Until(t, "hostA's worker says paused in its beat", func() bool {
		beats, _, err := fleetops.Workers(ctx, opA)
		for _, b := range beats {
			if b.Store == "hostA" {
				return err == nil && b.Paused
			}
		}
		return false
	})
	waitfor.Until(t, "the view sees hostA paused, hostB not", func() bool {
		snap := v.Snapshot()
		return snap.Stores[0].Paused != nil && snap.Stores[1].Paused == nil
	})
	if code, out, errOut := f.cli(append([]string{"resume", "hostA"}, creds...)...); code != ExitOK || !strings.Contains(out, "store hostA resumed") {
		t.Fatalf("operator's resume: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, who := range []struct {
		name string
		nc   *nats.Conn
	}{{"worker-hostA", wa}, {"agent-hostA", f.conn("agent-hostA", access.RoleAgent, "hostA")}} {
		// Its own store: the permission refuses the write. hostB: no store of its account.
		if _, err := fleetops.SetPaused(ctx, who.nc, "hostA", true, "", ""); err == nil || !strings.Contains(err.Error(), "not permitted") {
			t.Errorf("%s pausing hostA: %v, want a refusal", who.name, err)
		}
		if _, err := fleetops.SetPaused(ctx, who.nc, "hostB", true, "", ""); err == nil || !strings.Contains(err.Error(), "not set up in this account") {
			t.Errorf("%s pausing hostB: %v, want a refusal", who.name, err)
		}
	}
	if _, err := fleetops.ReadPaused(ctx, wa, "hostB"); err == nil {
		t.Error("hostA's worker read hostB's pause record")
	}
	// hostA's operator: hostB is in no store of its account; nothing is written.
	if code, out, errOut := f.cli(append([]string{"pause", "hostB"}, f.args("operator-hostA")...)...); code == ExitOK || !strings.Contains(errOut, "not set up in this account") {
		t.Errorf("hostA's operator pausing hostB: exit %d\n%s\n%s", code, out, errOut)
	}

	// compactor console with the operators' keys: its API and its metrics.
	tokens := t.TempDir()
	c := startCLI(append([]string{"console", "--listen", "127.0.0.1:0", "--token-dir", tokens, "--log-format", "json"}, creds...))
	defer c.stop(t)
	var addr string
	waitfor.Until(t, "the console listening", func() bool {
		if c.ended() {
			t.Fatalf("console exited %d:\n%s", c.code, c.log.String())
		}
		for l := range strings.Lines(c.log.String()) {
			var rec struct{ Msg, URL string }
			if json.Unmarshal([]byte(l), &rec) == nil && rec.Msg == "console listening" {
				addr = strings.TrimSuffix(rec.URL, "/")
			}
		}
		return addr != ""
	})
	tok, err := os.ReadFile(filepath.Join(tokens, "console-operator.token"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, addr+"/api/fleet", nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"store": "hostA"`) || !strings.Contains(string(body), `"store": "hostB"`) ||
		!strings.Contains(string(body), `"account": "compactor-hostB"`) {
		t.Errorf("compactor console's /api/fleet: %d\n%s", resp.StatusCode, body)
	}
	// Its fleet page: both stores, each in its account.
	req, _ = http.NewRequest(http.MethodGet, addr+"/", nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, h := range []string{"hostA", "hostB"} {
		if resp.StatusCode != 200 || !strings.Contains(string(page), `<tr data-store="`+h+`">`) || !strings.Contains(string(page), "account compactor-"+h) {
			t.Errorf("compactor console's fleet page does not show %s in its account: %d\n%s", h, resp.StatusCode, page)
		}
	}
	code, metrics := httpGet(t, addr+"/metrics")
	if code != 200 || !strings.Contains(metrics, `compactor_fleet_store_workers{store="hostA"} 1`) || !strings.Contains(metrics, `compactor_fleet_store_workers{store="hostB"} 1`) ||
		!strings.Contains(metrics, `compactor_queue_oldest_age_seconds{store="hostB"}`) {
		t.Errorf("compactor console's /metrics: %d\n%s", code, metrics)
	}
}

// credArgs are the connection flags of the operators of every account (fleet.json).
func (f *fleet) credArgs() []string {
	a := []string{"--nats-url", f.url, "--credentials", f.creds}
	if f.ca != "" {
		a = append(a, "--tls-ca", f.ca)
	}
	return a
}

// attempt is one thing hostA's credentials must not do on hostB's part.
type attempt struct {
	name string
	// do tries it: an error, or nil when the operation was sent and a refusal, if any,
	// comes asynchronously (try waits for it).
	do func(ctx context.Context, nc *nats.Conn) error
	// cli, instead: a command line (with the user's connection flags appended).
	cli []string
}

// try makes the attempt and returns how long its refusal took, and the refusal (or nil
// when it was allowed).
func try(a attempt, user string, nc *nats.Conn, f *fleet) (time.Duration, error) {
	start := time.Now()
	if a.cli != nil {
		code, out, errOut := f.cli(append(a.cli, f.args(user)...)...)
		switch {
		case code == ExitOK:
			return time.Since(start), nil
		case strings.Contains(errOut, "not permitted: "):
			return time.Since(start), errors.New(errOut[strings.Index(errOut, "not permitted: "):])
		}
		return time.Since(start), fmt.Errorf("exit %d: %s%s", code, out, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.HangGuard)
	defer cancel()
	wctx, stop := access.RefusalsOf(nc).Watch(ctx)
	defer stop()
	err := a.do(wctx, nc)
	if err == nil {
		<-wctx.Done() // the refusal, or the hang guard: then it was allowed
	}
	var pe *access.PermissionError
	if errors.As(context.Cause(wctx), &pe) {
		return time.Since(start), pe
	}
	if err == nil && errors.Is(wctx.Err(), context.DeadlineExceeded) {
		return time.Since(start), nil
	}
	return time.Since(start), err
}

func attemptsOnB(f *fleet) []attempt {
	tok := wire.SessionToken(acmeID)
	js := func(nc *nats.Conn) jetstream.JetStream { j, _ := jetstream.New(nc); return j }
	request := func(subject string, body []byte) func(context.Context, *nats.Conn) error {
		return func(ctx context.Context, nc *nats.Conn) error {
			_, err := nc.RequestWithContext(ctx, subject, body)
			return err
		}
	}
	subscribe := func(subject string) func(context.Context, *nats.Conn) error {
		return func(ctx context.Context, nc *nats.Conn) error {
			sub, err := nc.SubscribeSync(subject)
			if err != nil {
				return err
			}
			defer func() { _ = sub.Unsubscribe() }()
			if err := nc.FlushWithContext(ctx); err != nil {
				return err
			}
			<-ctx.Done() // the refusal comes asynchronously
			return nil
		}
	}
	publish := func(subject string) func(context.Context, *nats.Conn) error {
		return func(ctx context.Context, nc *nats.Conn) error {
			if err := nc.Publish(subject, []byte(`{"v":1}`)); err != nil {
				return err
			}
			return nc.FlushWithContext(ctx)
		}
	}
	var out []attempt
	add := func(name string, do func(context.Context, *nats.Conn) error) {
		out = append(out, attempt{name: name, do: do})
	}
	add("fetch B's jobs: bind its consumer", func(ctx context.Context, nc *nats.Conn) error {
		_, err := js(nc).Consumer(ctx, wire.StreamJobs, fleetops.ConsumerName("hostB"))
		return err
	})
	add("fetch B's jobs: pull from its consumer", request("$JS.API.CONSUMER.MSG.NEXT.COMPACTOR_JOBS.compactor-hostB", []byte(`{"batch":1,"expires":1000000000}`)))
	add("read B's events: subscribe", subscribe("compactor.events.hostB.>"))
	add("read B's events: direct get", request("$JS.API.DIRECT.GET.COMPACTOR_EVENTS.compactor.events.hostB."+tok+".1", nil))
	add("read B's events: a consumer of them", func(ctx context.Context, nc *nats.Conn) error {
		_, err := js(nc).CreateConsumer(ctx, wire.StreamEvents, jetstream.ConsumerConfig{FilterSubject: "compactor.events.hostB.>"})
		return err
	})
	for _, b := range []string{wire.BucketPrepared, wire.BucketLeases, wire.BucketSweep, wire.BucketWorkers, wire.BucketAttempts} {
		key := "$KV." + b + ".hostB." + tok
		add("get B's "+b, request("$JS.API.DIRECT.GET.KV_"+b+"."+key, nil))
		add("list B's "+b, func(ctx context.Context, nc *nats.Conn) error {
			s, err := js(nc).Stream(ctx, "KV_"+b)
			if err == nil {
				_, err = s.Info(ctx, jetstream.WithSubjectFilter("$KV."+b+".hostB.>"))
			}
			return err
		})
		add("watch B's "+b, func(ctx context.Context, nc *nats.Conn) error {
			legacy, err := nc.JetStream()
			if err != nil {
				return err
			}
			sub, err := legacy.Subscribe("$KV."+b+".hostB.>", func(*nats.Msg) {}, nats.BindStream("KV_"+b), nats.OrderedConsumer(), nats.Context(ctx))
			if err == nil {
				_ = sub.Unsubscribe()
			}
			return err
		})
	}
	for _, b := range []string{wire.BucketLeases, wire.BucketPrepared, wire.BucketSweep, wire.BucketAttempts} {
		key := "$KV." + b + ".hostB." + tok
		add("put B's "+b, func(ctx context.Context, nc *nats.Conn) error {
			_, err := js(nc).Publish(ctx, key, []byte(`{"worker":"hostA"}`))
			return err
		})
		add("delete B's "+b, func(ctx context.Context, nc *nats.Conn) error {
			m := nats.NewMsg(key)
			m.Header.Set("KV-Operation", "DEL")
			_, err := js(nc).PublishMsg(ctx, m)
			return err
		})
	}
	add("remove B's sweep record with an expiring marker", func(ctx context.Context, nc *nats.Conn) error {
		m := nats.NewMsg("$KV." + wire.BucketSweep + ".hostB." + tok)
		m.Header.Set("KV-Operation", "DEL")
		_, err := js(nc).PublishMsg(ctx, m, jetstream.WithMsgTTL(time.Hour))
		return err
	})
	add("request B's bridge", request(wire.BridgeSubject("hostB", acmeID), []byte(`{"v":1}`)))
	add("subscribe to B's bridge subject", subscribe("compactor.bridge.hostB.*"))
	add("subscribe to B's hook subject", subscribe("compactor.hooks.hostB.*"))
	add("report a hook run of B's", publish(wire.HookSubject("hostB", acmeID)))
	add("publish a job for B", func(ctx context.Context, nc *nats.Conn) error {
		_, err := fleetops.Enqueue(ctx, nc, wire.Job{Kind: wire.KindCompact, Store: "hostB", Path: acmeSession, SessionID: acmeID,
			Instructions: "steer hostB's agent", Force: true}, false, 0)
		return err
	})
	out = append(out,
		attempt{name: "enqueue a job for B (command line)", cli: []string{"enqueue", filepath.Join(f.dirs["hostB"], acmeSession), "--store-dir", f.dirs["hostB"], "--store", "hostB", "--inbox-prefix", "_INBOX_agent_hostA"}},
		attempt{name: "dlq list of B's", cli: []string{"dlq", "list", "--store", "hostB"}},
		attempt{name: "dlq show", cli: []string{"dlq", "show", "1"}},
		attempt{name: "dlq retry of B's", cli: []string{"dlq", "retry", "--store", "hostB"}},
		attempt{name: "dlq purge of B's", cli: []string{"dlq", "purge", "--store", "hostB"}},
		attempt{name: "compactor setup", cli: []string{"setup", "--store", "hostC"}},
	)
	add("create a stream", func(ctx context.Context, nc *nats.Conn) error {
		_, err := js(nc).CreateStream(ctx, jetstream.StreamConfig{Name: "STEAL", Subjects: []string{"compactor.jobs.hostB.>"}})
		return err
	})
	add("update COMPACTOR_JOBS", func(ctx context.Context, nc *nats.Conn) error {
		_, err := js(nc).UpdateStream(ctx, jetstream.StreamConfig{Name: wire.StreamJobs, Subjects: []string{"compactor.jobs.>"}, Retention: jetstream.WorkQueuePolicy})
		return err
	})
	add("delete COMPACTOR_JOBS", func(ctx context.Context, nc *nats.Conn) error { return js(nc).DeleteStream(ctx, wire.StreamJobs) })
	add("create a bucket", func(ctx context.Context, nc *nats.Conn) error {
		_, err := js(nc).CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "STEAL"})
		return err
	})
	add("delete a bucket", func(ctx context.Context, nc *nats.Conn) error {
		return js(nc).DeleteKeyValue(ctx, wire.BucketPrepared)
	})
	add("take over B's consumer", func(ctx context.Context, nc *nats.Conn) error {
		_, err := js(nc).UpdateConsumer(ctx, wire.StreamJobs, jetstream.ConsumerConfig{Durable: fleetops.ConsumerName("hostB"), FilterSubject: "compactor.jobs.hostA.>"})
		return err
	})
	add("create a consumer of B's jobs", func(ctx context.Context, nc *nats.Conn) error {
		_, err := js(nc).CreateConsumer(ctx, wire.StreamJobs, jetstream.ConsumerConfig{Durable: "steal", FilterSubject: "compactor.jobs.hostB.>"})
		return err
	})
	add("delete B's consumer", func(ctx context.Context, nc *nats.Conn) error {
		return js(nc).DeleteConsumer(ctx, wire.StreamJobs, fleetops.ConsumerName("hostB"))
	})
	add("a consumer of B's sweep records", request("$JS.API.CONSUMER.CREATE.KV_COMPACTOR_SWEEP.steal.$KV.COMPACTOR_SWEEP.hostB.>",
		[]byte(`{"stream_name":"KV_COMPACTOR_SWEEP","config":{"name":"steal","filter_subject":"$KV.COMPACTOR_SWEEP.hostB.>","ack_policy":"none"}}`)))
	for _, inbox := range []string{"_INBOX_worker_hostB.>", "_INBOX_agent_hostB.>", "_INBOX_operator.>", "_INBOX_admin.>", "_INBOX.>", ">"} {
		add("read another client's replies: "+inbox, subscribe(inbox))
	}
	return out
}

// ownFlows are a host's own flows with its own credentials.
func ownFlows(t *testing.T, f *fleet, h string) {
	t.Helper()
	root := f.dirs[h]
	agent := f.conn("agent-"+h, access.RoleAgent, h)
	ctx := context.Background()

	// A preparation (as the Pi extension asks for one), read back, bridged to a later cut,
	// then deleted once Pi's hook reported its run.
	leaf, err := pisession.LastEntryID(filepath.Join(root, acmeSession))
	if err != nil {
		t.Fatal(err)
	}
	prep := wire.Job{Kind: wire.KindPrepare, Store: h, Path: acmeSession, SessionID: acmeID, ExpectLeafID: leaf, Reason: "extension",
		Policy: "pi", Counter: "estimate", KeepRecentTokens: 6000}
	res, err := fleetops.Enqueue(ctx, agent, prep, true, time.Minute)
	if err != nil || res.Event.Outcome != pipeline.OutcomeDone {
		t.Fatalf("%s: prepare: %+v %v", h, res.Event, err)
	}
	preparedKey := "$KV." + wire.BucketPrepared + "." + wire.PreparedKey(h, acmeID)
	if prepared, err := natstest.DirectGet(ctx, agent, "KV_"+wire.BucketPrepared, preparedKey); err != nil || prepared == nil {
		t.Fatalf("%s: the agent cannot read its prepared summary: %v", h, err)
	}
	code, planOut, errOut := f.cli("plan", filepath.Join(root, acmeSession), "--json", "--policy", "pi", "--counter", "estimate", "--keep-recent-tokens", "2000")
	var plan struct {
		FirstKept string `json:"firstKeptEntryId"`
	}
	if code != ExitOK || json.Unmarshal([]byte(planOut), &plan) != nil {
		t.Fatalf("plan: exit %d %s", code, errOut)
	}
	req, _ := json.Marshal(wire.BridgeRequest{V: 1, Store: h, Path: acmeSession, SessionID: acmeID, LeafID: leaf, FirstKeptEntryID: plan.FirstKept})
	m, err := agent.Request(wire.BridgeSubject(h, acmeID), req, 30*time.Second)
	if err != nil {
		t.Fatalf("%s: bridge: %v", h, err)
	}
	var rep wire.BridgeReply
	var bridged struct {
		FirstKept string `json:"firstKeptEntryId"`
	}
	if json.Unmarshal(m.Data, &rep) != nil || rep.Error != "" || json.Unmarshal(rep.Prepared, &bridged) != nil || bridged.FirstKept != plan.FirstKept {
		t.Fatalf("%s: bridge reply %s", h, m.Data)
	}
	hook, _ := json.Marshal(wire.HookReport{V: 1, Store: h, SessionID: acmeID, Outcome: wire.HookHit, Bridged: true})
	if err := agent.Publish(wire.HookSubject(h, acmeID), hook); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, h+": the used summary deleted", func() bool {
		prepared, err := natstest.DirectGet(ctx, agent, "KV_"+wire.BucketPrepared, preparedKey)
		if err != nil {
			t.Fatalf("direct get %s: %v", preparedKey, err)
		}
		return prepared == nil
	})

	// A sweep (the worker's credentials) compacts what is over budget: 4 of the 7 example
	// sessions at these settings.
	before := compactionsUnder(t, root)
	code, out, errOut := f.cli(append([]string{"sweep", "--store", h + "=" + root, "--idle", "0", "--context-window", "40000", "--keep-recent-tokens", "8000"}, f.args("worker-"+h)...)...)
	if code != ExitOK || !strings.Contains(out, "4 enqueued") {
		t.Fatalf("%s: sweep: exit %d\n%s\n%s", h, code, out, errOut)
	}
	waitfor.Until(t, h+": the sweep's 4 jobs compacted", func() bool { return compactionsUnder(t, root) >= before+4 })
	swept := compactionsUnder(t, root) - before
	// A session deleted: the next sweep (the worker's credentials) removes its record, the
	// marker expiring (the bucket allows it since this setup).
	gone := filepath.Join(root, "--home-dev-notes--")
	entries, err := os.ReadDir(gone)
	if err != nil || len(entries) == 0 {
		t.Fatalf("%s: %v", gone, err)
	}
	if err := os.Remove(filepath.Join(gone, entries[0].Name())); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = f.cli(append([]string{"sweep", "--store", h + "=" + root, "--idle", "0", "--context-window", "40000", "--keep-recent-tokens", "8000", "--json"}, f.args("worker-"+h)...)...)
	var sw struct {
		Removed int `json:"removedRecords"`
	}
	if code != ExitOK || json.Unmarshal([]byte(out), &sw) != nil || sw.Removed != 1 || strings.Contains(errOut, "markers") {
		t.Fatalf("%s: the sweep after a deletion: exit %d\n%s\n%s", h, code, out, errOut)
	}
	// enqueue --wait (the agent's credentials) returns the result: the session prepared
	// above (under budget, so no sweep took it) compacted on demand.
	code, out, errOut = f.cli(append([]string{"enqueue", filepath.Join(root, acmeSession), "--store-dir", root, "--store", h, "--force", "--wait", "--timeout", "2m"}, f.args("agent-"+h)...)...)
	var ev wire.Event
	if code != ExitOK || json.Unmarshal([]byte(out), &ev) != nil || ev.Store != h || ev.Outcome != pipeline.OutcomeDone {
		t.Fatalf("%s: enqueue --wait: exit %d\n%s\n%s", h, code, out, errOut)
	}

	// A dead letter of the host's, replayed by the operator.
	late := "late/2026-01-01T00-00-00-000Z_" + h + "-late.jsonl"
	res, err = fleetops.Enqueue(ctx, agent, wire.Job{Kind: wire.KindCompact, Store: h, Path: late, SessionID: h + "-late"}, true, time.Minute)
	if err != nil || res.Event.Outcome != pipeline.OutcomeFailed {
		t.Fatalf("%s: a job for a missing file: %+v %v", h, res.Event, err)
	}
	if err := os.MkdirAll(filepath.Join(root, "late"), 0o755); err != nil {
		t.Fatal(err)
	}
	body := `{"type":"session","version":3,"id":"` + h + `-late","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}` + "\n" +
		`{"type":"message","id":"u1","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}` + "\n"
	if err := os.WriteFile(filepath.Join(root, late), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = f.cli(append([]string{"dlq", "retry", "--store", h, "--wait", "--json"}, f.args("operator-"+h)...)...)
	var retried []operator.RetryResult
	if code != ExitOK || json.Unmarshal([]byte(out), &retried) != nil || len(retried) != 1 || !retried[0].Queued || retried[0].Event == nil ||
		retried[0].Event.Outcome == pipeline.OutcomeFailed {
		t.Fatalf("%s: the operator's replay: exit %d\n%s\n%s", h, code, out, errOut)
	}
	t.Logf("%s: prepared and bridged to %s, deleted once used; sweep compacted %d sessions, then removed the record of a deleted one; enqueue --wait: %s; the operator replayed dead letter %d: %s",
		h, plan.FirstKept, swept, ev.Outcome, retried[0].Seq, retried[0].Event.Outcome)
}

// compactionsUnder counts the compaction entries compactor appended under root.
func compactionsUnder(t *testing.T, root string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".jsonl") {
			return err
		}
		data, err := os.ReadFile(p)
		n += bytes.Count(data, []byte(`"fromHook":false`)) // compactor writes fromHook false; none in the examples
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// testCerts writes a CA and a server certificate for 127.0.0.1 signed by it.
func testCerts(t *testing.T, dir string) (cert, key, ca string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "compactor test CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srvKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyDER, _ := x509.MarshalECPrivateKey(srvKey)
	return write("server.pem", "CERTIFICATE", srvDER), write("server-key.pem", "EC PRIVATE KEY", keyDER), write("ca.pem", "CERTIFICATE", caDER)
}
