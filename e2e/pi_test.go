//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/proctest"
)

// PiConfig is how one real Pi process is started.
type PiConfig struct {
	Provider, Model string // as in models.json (defaults scripted / scripted-model)
	AgentDir        string // PI_CODING_AGENT_DIR: models.json and settings.json
	SessionDir      string // --session-dir
	Workspace       string // the working directory (Pi's cwd)
	// Session opens this file instead of starting a new session (--session).
	Session string
	// Extensions are loaded with -e (e.g. extensions/pi/<file>.ts).
	Extensions []string
	// Args are added after the standard ones; Env entries after the standard environment.
	Args []string
	Env  []string
}

// Event is one JSON record Pi wrote on stdout (a response or an event), with the time the
// driver read it.
type Event struct {
	At      time.Time
	Type    string
	ID      string // responses: the command id
	Command string // responses
	Success bool   // responses
	Error   string // responses
	Raw     json.RawMessage
}

// Decode unmarshals the whole record into v.
func (e Event) Decode(v any) error { return json.Unmarshal(e.Raw, v) }

// Data returns a response's data field.
func (e Event) Data() json.RawMessage {
	var r struct {
		Data json.RawMessage `json:"data"`
	}
	_ = json.Unmarshal(e.Raw, &r)
	return r.Data
}

// Pi drives one real Pi process in RPC mode: JSON lines on stdin, responses and events
// on stdout (split on "\n" only, as Pi's RPC documentation requires: JSON strings may hold
// U+2028; https://github.com/earendil-works/pi/blob/main/packages/coding-agent/docs/rpc.md).
type Pi struct {
	t   testing.TB
	cmd *exec.Cmd

	wmu   sync.Mutex
	stdin io.WriteCloser

	mu      sync.Mutex
	events  []Event
	changed chan struct{}
	nextID  int
	readErr error

	stderr proctest.Buffer

	exited  chan struct{} // closed when the process has exited and been reaped
	waitErr error
	reader  sync.WaitGroup
}

// StartPi starts Pi and stops it when the test ends (stdin closed, then SIGTERM and
// SIGKILL to its process group). Its stderr goes to the test log if the test failed.
func StartPi(t testing.TB, cfg PiConfig) *Pi {
	t.Helper()
	if cfg.Provider == "" {
		cfg.Provider = "scripted"
	}
	if cfg.Model == "" {
		cfg.Model = "scripted-model"
	}
	args := []string{"cli", "--mode", "rpc", "--provider", cfg.Provider, "--model", cfg.Model, "--offline"}
	if cfg.SessionDir != "" {
		args = append(args, "--session-dir", cfg.SessionDir)
	}
	if cfg.Session != "" {
		args = append(args, "--session", cfg.Session)
	}
	for _, e := range cfg.Extensions {
		args = append(args, "-e", e)
	}
	args = append(args, cfg.Args...)
	cmd := exec.Command(piOracle, args...)
	cmd.Dir = cfg.Workspace
	cmd.Env = append(piEnv(), "PI_CODING_AGENT_DIR="+cfg.AgentDir, "PI_OFFLINE=1", "PI_TELEMETRY=0", "PI_SKIP_VERSION_CHECK=1")
	cmd.Env = append(cmd.Env, cfg.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &Pi{t: t, cmd: cmd, stdin: stdin, changed: make(chan struct{}), exited: make(chan struct{})}
	cmd.Stderr = &p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pi: %v", err)
	}
	p.reader.Add(1)
	go p.read(stdout)
	go func() {
		p.reader.Wait() // Wait closes the pipe: read everything first
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		p.notifyLocked()
		p.mu.Unlock()
		close(p.exited)
	}()
	t.Cleanup(p.Close)
	return p
}

// piEnv is the test's environment without variables that would change Pi's behaviour.
func piEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		// Pi's own settings stay out; the harness's (PI_VERSION, PI_HARNESS) choose the Pi.
		if strings.HasPrefix(kv, "PI_") && !strings.HasPrefix(kv, "PI_VERSION=") && !strings.HasPrefix(kv, "PI_HARNESS=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func (p *Pi) read(r io.Reader) {
	defer p.reader.Done()
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		line, err := br.ReadBytes('\n')
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if len(line) > 0 {
			p.record(line)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				p.mu.Lock()
				p.readErr = err
				p.mu.Unlock()
			}
			return
		}
	}
}

func (p *Pi) record(line []byte) {
	ev := Event{At: time.Now(), Raw: json.RawMessage(bytes.Clone(line))}
	var head struct {
		Type    string `json:"type"`
		ID      string `json:"id"`
		Command string `json:"command"`
		Success bool   `json:"success"`
		Error   string `json:"error"`
	}
	if err := json.Unmarshal(line, &head); err != nil {
		ev.Type = "invalid"
		ev.Error = err.Error()
	} else {
		ev.Type, ev.ID, ev.Command, ev.Success, ev.Error = head.Type, head.ID, head.Command, head.Success, head.Error
	}
	p.mu.Lock()
	p.events = append(p.events, ev)
	p.notifyLocked()
	p.mu.Unlock()
}

func (p *Pi) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// Mark is the number of records read so far: events after a mark came later.
func (p *Pi) Mark() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.events)
}

// Events returns the records from index from on.
func (p *Pi) Events(from int) []Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Event(nil), p.events[min(from, len(p.events)):]...)
}

// WaitEvent returns the first record at index >= from that satisfies pred, and its
// index. It fails when ctx ends or Pi exits first.
func (p *Pi) WaitEvent(ctx context.Context, from int, pred func(Event) bool) (Event, int, error) {
	for {
		p.mu.Lock()
		for i := from; i < len(p.events); i++ {
			if pred(p.events[i]) {
				ev := p.events[i]
				p.mu.Unlock()
				return ev, i, nil
			}
		}
		from = len(p.events)
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-p.exited:
			// Read what is left, then give up.
			if _, _, err := p.scanOnce(from, pred); err == nil {
				continue
			}
			return Event{}, 0, fmt.Errorf("pi exited (%v) before the awaited event", p.waitErr)
		case <-ctx.Done():
			return Event{}, 0, fmt.Errorf("waiting for a pi event: %w", ctx.Err())
		}
	}
}

func (p *Pi) scanOnce(from int, pred func(Event) bool) (Event, int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := from; i < len(p.events); i++ {
		if pred(p.events[i]) {
			return p.events[i], i, nil
		}
	}
	return Event{}, 0, errors.New("not found")
}

// IsType is a predicate for WaitEvent.
func IsType(typ string) func(Event) bool { return func(e Event) bool { return e.Type == typ } }

// Send writes one command with a fresh id and returns the id.
func (p *Pi) Send(cmd map[string]any) (string, error) {
	p.mu.Lock()
	p.nextID++
	id := fmt.Sprintf("e2e-%d", p.nextID)
	p.mu.Unlock()
	cmd["id"] = id
	b, err := json.Marshal(cmd)
	if err != nil {
		return "", err
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		return "", fmt.Errorf("write to pi: %w", err)
	}
	return id, nil
}

// Call sends a command and waits for its response; a response with success false is an
// error.
func (p *Pi) Call(ctx context.Context, cmd map[string]any) (Event, error) {
	typ, _ := cmd["type"].(string)
	from := p.Mark()
	id, err := p.Send(cmd)
	if err != nil {
		return Event{}, err
	}
	ev, _, err := p.WaitEvent(ctx, from, func(e Event) bool { return e.Type == "response" && e.ID == id })
	if err != nil {
		return Event{}, fmt.Errorf("%s: %w", typ, err)
	}
	if !ev.Success {
		return ev, fmt.Errorf("%s failed: %s", typ, ev.Error)
	}
	return ev, nil
}

// Run is the record of one prompt: its records from the prompt to agent_end (and any
// automatic compaction that followed).
type Run struct {
	Start, End time.Time
	From, To   int // record indexes [From, To)
	Events     []Event
}

// Prompt sends a prompt and waits until the agent is done with it: agent_end, then any
// automatic compaction Pi starts right after it has ended too.
func (p *Pi) Prompt(ctx context.Context, text string) (*Run, error) {
	run := &Run{Start: time.Now(), From: p.Mark()}
	if _, err := p.Call(ctx, map[string]any{"type": "prompt", "message": text}); err != nil {
		return nil, err
	}
	if err := p.AwaitIdle(ctx, run.From); err != nil {
		return nil, err
	}
	run.End = time.Now()
	run.To = p.Mark()
	run.Events = p.Events(run.From)[:run.To-run.From]
	return run, nil
}

// AwaitIdle waits for the agent_end after record from, then for the end of a compaction
// begun after it. Pi checks for automatic compaction right after agent_end and emits
// compaction_start before it reads its next command, so after the get_state round trip
// every compaction that was going to start has started.
func (p *Pi) AwaitIdle(ctx context.Context, from int) error {
	_, end, err := p.WaitEvent(ctx, from, IsType("agent_end"))
	if err != nil {
		return err
	}
	if _, err := p.Call(ctx, map[string]any{"type": "get_state"}); err != nil {
		return err
	}
	_, start, err := p.scanOnce(end, IsType("compaction_start"))
	if err != nil {
		return nil // no compaction
	}
	_, _, err = p.WaitEvent(ctx, start, IsType("compaction_end"))
	return err
}

// State is the part of get_state the tests use.
type State struct {
	SessionFile  string `json:"sessionFile"`
	SessionID    string `json:"sessionId"`
	IsStreaming  bool   `json:"isStreaming"`
	IsCompacting bool   `json:"isCompacting"`
	MessageCount int    `json:"messageCount"`
}

// State calls get_state.
func (p *Pi) State(ctx context.Context) (State, error) {
	ev, err := p.Call(ctx, map[string]any{"type": "get_state"})
	if err != nil {
		return State{}, err
	}
	var s State
	err = json.Unmarshal(ev.Data(), &s)
	return s, err
}

// ContextTokens is get_session_stats' contextUsage.tokens: Pi's own estimate of its
// current context (null right after a compaction: -1).
func (p *Pi) ContextTokens(ctx context.Context) (int, error) {
	ev, err := p.Call(ctx, map[string]any{"type": "get_session_stats"})
	if err != nil {
		return 0, err
	}
	var s struct {
		ContextUsage *struct {
			Tokens *int `json:"tokens"`
		} `json:"contextUsage"`
	}
	if err := json.Unmarshal(ev.Data(), &s); err != nil {
		return 0, err
	}
	if s.ContextUsage == nil || s.ContextUsage.Tokens == nil {
		return -1, nil
	}
	return *s.ContextUsage.Tokens, nil
}

// SwitchSession reloads a session file (RPC switch_session with sessionPath).
func (p *Pi) SwitchSession(ctx context.Context, file string) error {
	ev, err := p.Call(ctx, map[string]any{"type": "switch_session", "sessionPath": file})
	if err != nil {
		return err
	}
	var d struct {
		Cancelled bool `json:"cancelled"`
	}
	if err := json.Unmarshal(ev.Data(), &d); err != nil {
		return err
	}
	if d.Cancelled {
		return errors.New("switch_session was cancelled")
	}
	return nil
}

// Stderr is what Pi wrote on its stderr so far (extensions' debug lines go there).
func (p *Pi) Stderr() string { return p.stderr.String() }

// Close stops Pi: stdin closed (RPC mode exits on EOF), then SIGTERM, then SIGKILL to its
// process group, and reaps it. On a failed test it logs Pi's stderr and last records.
func (p *Pi) Close() {
	p.wmu.Lock()
	_ = p.stdin.Close()
	p.wmu.Unlock()
	pgid := p.cmd.Process.Pid
	for _, step := range []struct {
		sig  syscall.Signal
		wait time.Duration
	}{{0, 5 * time.Second}, {syscall.SIGTERM, 5 * time.Second}, {syscall.SIGKILL, 10 * time.Second}} {
		if step.sig != 0 {
			_ = syscall.Kill(-pgid, step.sig)
		}
		select {
		case <-p.exited:
			p.reportOnFailure()
			return
		case <-time.After(step.wait):
		}
	}
	p.t.Errorf("pi (pid %d) did not exit", pgid)
}

func (p *Pi) reportOnFailure() {
	if !p.t.Failed() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.t.Logf("pi exit: %v; read error: %v\n--- pi stderr ---\n%s", p.waitErr, p.readErr, tail(p.stderr.String(), 8000))
	from := max(0, len(p.events)-15)
	for _, e := range p.events[from:] {
		p.t.Logf("pi record %s %s", e.At.Format("15:04:05.000"), tail(string(e.Raw), 300))
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
