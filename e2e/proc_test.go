//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/compactor-dev/compactor/internal/natstest"
	"github.com/compactor-dev/compactor/internal/proctest"
	"github.com/compactor-dev/compactor/internal/waitfor"
)

// Result is one finished command.
type Result struct {
	Code           int
	Stdout, Stderr string
	Start, End     time.Time
}

// Duration is the command's wall time.
func (r Result) Duration() time.Duration { return r.End.Sub(r.Start) }

// Proc is a command started in its own process group (so that everything it starts can
// be stopped with it).
type Proc struct {
	proc           *proctest.Proc
	stdout, stderr proctest.Buffer
	start          time.Time
}

// stopGrace is how long a stopped command has between SIGTERM and SIGKILL.
const stopGrace = 10 * time.Second

// StartProc starts name args with env added to the test's environment; it is stopped
// (SIGTERM, then SIGKILL to its group) and reaped when the test ends.
func StartProc(t testing.TB, env []string, name string, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &Proc{start: time.Now()}
	cmd.Stdout, cmd.Stderr = &p.stdout, &p.stderr
	p.proc = proctest.Start(t, cmd)
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			r := p.Wait(context.Background())
			t.Logf("%s %s exited %d\n--- stderr ---\n%s", name, strings.Join(args, " "), r.Code, tail(r.Stderr, 6000))
		}
	})
	return p
}

// Wait waits for the process to exit (or ctx to end: then it is stopped).
func (p *Proc) Wait(ctx context.Context) Result {
	code := p.proc.Wait(ctx, stopGrace)
	return Result{Code: code, Stdout: p.stdout.String(), Stderr: p.stderr.String(), Start: p.start, End: p.proc.Ended()}
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool { return p.proc.Exited() }

// Stderr is what it wrote to stderr so far.
func (p *Proc) Stderr() string { return p.stderr.String() }

// Stop sends SIGTERM to the process group, then SIGKILL, and waits for the exit.
func (p *Proc) Stop() { p.proc.Stop(stopGrace) }

// RunProc runs a command to its end (bounded by timeout).
func RunProc(t testing.TB, timeout time.Duration, env []string, name string, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return StartProc(t, env, name, args...).Wait(ctx)
}

// llmEnv is the environment that points compactor's summarizer at nothing secret.
var llmEnv = []string{"OPENAI_API_KEY=scripted-key"}

// llmFlags point compactor's summarizer at the scripted model.
func (e *Env) llmFlags() []string {
	return []string{"--base-url", e.LLM.URL(), "--model", modelName}
}

// CompactResult is the JSON `compactor compact --json` prints (the fields the tests use).
type CompactResult struct {
	Outcome          string `json:"outcome"`
	Reason           string `json:"reason"`
	EntryID          string `json:"entryId"`
	ParentID         string `json:"parentId"`
	FirstKeptEntryID string `json:"firstKeptEntryId"`
	TokensBefore     int    `json:"tokensBefore"`
	TokensAfter      int    `json:"tokensAfter"`
	LLMCalls         int    `json:"llmCalls"`
}

// ParseCompact decodes compactor compact's output ("" outcome when it printed none).
func ParseCompact(t testing.TB, r Result) CompactResult {
	t.Helper()
	var c CompactResult
	if s := strings.TrimSpace(r.Stdout); s != "" {
		if err := json.Unmarshal([]byte(s), &c); err != nil {
			t.Errorf("compactor compact printed no JSON result: %v\n%s", err, s)
		}
	}
	return c
}

// JobEvent is the result event `enqueue --wait` prints (the fields the tests use).
type JobEvent struct {
	Outcome      string `json:"outcome"`
	Reason       string `json:"reason"`
	EntryID      string `json:"entryId"`
	Error        string `json:"error"`
	TokensBefore int    `json:"tokensBefore"`
	TokensAfter  int    `json:"tokensAfter"`
	DurationMs   int64  `json:"durationMs"`
}

// ParseJobEvent finds the event's JSON line in enqueue's output (its stdout, or a bash
// tool's output that mixes stdout and stderr).
func ParseJobEvent(out string) (JobEvent, bool) {
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var ev JobEvent
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Outcome != "" {
			return ev, true
		}
	}
	return JobEvent{}, false
}

// StartNATS runs a real nats-server with JetStream in the test process, on a random
// loopback port with its store in a temp dir, under compactor's permissions: started from
// the configuration `compactor auth --store default` prints and set up by the admin's
// `compactor setup` (docs/security.md). It returns its client URL; natsKey names the users'
// keys (the service runs as worker-default, enqueue and the Pi extension as agent-default,
// the test's own checks as admin).
func StartNATS(t testing.TB) string {
	t.Helper()
	return startNATSServer(t).ClientURL()
}

// natsUsers maps a server's client URL to the directory of its users' nkey seeds.
var natsUsers sync.Map

// natsKey is the nkey seed file of a user of the server at url (started by StartNATS).
func natsKey(url, user string) string {
	dir, ok := natsUsers.Load(url)
	if !ok {
		panic("e2e: no NATS users for " + url + " (not started by StartNATS)")
	}
	return filepath.Join(dir.(string), user+".nk")
}

// natsAdmin connects as the admin of the server at url.
func natsAdmin(t testing.TB, url string) (*nats.Conn, error) {
	t.Helper()
	o, err := nats.NkeyOptionFromSeed(natsKey(url, "admin-default"))
	if err != nil {
		return nil, err
	}
	return nats.Connect(url, o)
}

// startNATSServer is StartNATS, returning the server so a test can stop it.
func startNATSServer(t testing.TB) *server.Server {
	t.Helper()
	dir := t.TempDir()
	creds := filepath.Join(dir, "creds")
	auth, err := exec.Command(compactorBin(), "auth", "--store", "default", "--credentials", creds).Output()
	if err != nil {
		t.Fatalf("compactor auth: %v", err)
	}
	authConf := filepath.Join(dir, "auth.conf")
	if err := os.WriteFile(authConf, auth, 0o600); err != nil {
		t.Fatal(err)
	}
	ns := natstest.StartServerFrom(t, authConf)
	natsUsers.Store(ns.ClientURL(), creds)
	out, err := exec.Command(compactorBin(), "setup", "--nats-url", ns.ClientURL(), "--nkey", filepath.Join(creds, "admin-default.nk"), "--store", "default").CombinedOutput()
	if err != nil {
		t.Fatalf("compactor setup: %v\n%s", err, out)
	}
	return ns
}

// StartService runs `compactor run` against the NATS at url with the env's session dir as
// store "default", the worker's key, and the scripted model as summarizer, and waits until
// it is ready (it has bound what setup made and claimed its store).
func (e *Env) StartService(url string, extra ...string) *Proc {
	e.t.Helper()
	args := append([]string{"run", "--nats-url", url, "--nkey", natsKey(url, "worker-default"), "--store", "default=" + e.SessionDir,
		"--data-dir", e.t.TempDir(), "--log-format", "json", "--log-level", "debug"}, e.llmFlags()...)
	p := StartProc(e.t, llmEnv, compactorBin(), append(args, extra...)...)
	waitfor.Until(e.t, "compactor run ready", func() bool {
		if p.Exited() {
			e.t.Fatalf("compactor run did not start:\n%s", tail(p.Stderr(), 4000))
		}
		return strings.Contains(p.Stderr(), "compactor pipeline ready")
	})
	return p
}

// enqueueArgs is the enqueue command for the env's session file against url, with the
// agent's key.
func (e *Env) enqueueArgs(file, url string, extra ...string) []string {
	return append([]string{file, "--store-dir", e.SessionDir, "--nats-url", url, "--nkey", natsKey(url, "agent-default")}, extra...)
}
