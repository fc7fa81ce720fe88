//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/scriptllm"
)

// Compaction is Pi's compaction settings (settings.json "compaction").
type Compaction struct {
	Enabled          bool `json:"enabled"`
	ReserveTokens    int  `json:"reserveTokens,omitempty"`
	KeepRecentTokens int  `json:"keepRecentTokens,omitempty"`
}

// Config is one test's setup. The zero value is the standard one: seed 1, auto-compaction
// off, a 128k window, summaries answered after 5 s.
type Config struct {
	Seed  uint64
	Lines int // notes file lines per prompt (scriptllm.Workload)
	// ContextWindow and MaxTokens of the scripted model in models.json (defaults 128000, 16384).
	ContextWindow, MaxTokens int
	Compaction               Compaction
	// SummaryDelay of the scripted model (nil: scriptllm.DefaultSummaryDelay).
	SummaryDelay *time.Duration
	// AgentDelay is how long every agent turn of the scripted model takes (default 0).
	AgentDelay time.Duration
	// Reads, when set, is the workload instead of scriptllm.Workload: prompts that read files
	// of given sizes, written into the workspace before Pi starts (Prompts of them).
	Reads   *scriptllm.Reads
	Prompts int
	// Extensions and extra arguments/environment for Pi.
	Extensions []string
	PiArgs     []string
	PiEnv      []string
	// piEnvFunc adds environment that depends on the env (its session dir); beforePi runs
	// once everything is set up, just before Pi starts (to start a compactor service).
	piEnvFunc func(*Env) []string
	beforePi  func(*Env)
}

// Env is one test's world: the scripted model on loopback, an agent dir, a workspace, a
// session dir, and one running Pi.
type Env struct {
	t          *testing.T
	Dir        string
	AgentDir   string
	Workspace  string
	SessionDir string
	LLM        *scriptllm.Server
	Plan       *scriptllm.Plan // per-prompt turns; other prompts follow Work
	Work       Workload
	Pi         *Pi
	cfg        Config
}

// Workload is the script of the agent's turns, and its prompts.
type Workload interface {
	scriptllm.Script
	Prompt(n int) string
}

// Model names in models.json.
const (
	providerName = "scripted"
	modelName    = "scripted-model"
)

// NewEnv sets up everything and starts Pi.
func NewEnv(t *testing.T, cfg Config) *Env {
	t.Helper()
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	if cfg.ContextWindow == 0 {
		cfg.ContextWindow = 128000
	}
	if cfg.MaxTokens == 0 {
		cfg.MaxTokens = 16384
	}
	dir := t.TempDir()
	e := &Env{
		t: t, Dir: dir, cfg: cfg,
		AgentDir:   filepath.Join(dir, "agent"),
		Workspace:  filepath.Join(dir, "workspace"),
		SessionDir: filepath.Join(dir, "sessions"),
	}
	e.Work = scriptllm.Workload{Seed: cfg.Seed, Lines: cfg.Lines}
	if cfg.Reads != nil {
		e.Work = *cfg.Reads
	}
	for _, d := range []string{e.AgentDir, e.Workspace, e.SessionDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if cfg.Reads != nil {
		for n := 1; n <= cfg.Prompts; n++ {
			for rel, text := range cfg.Reads.Files(n) {
				file := filepath.Join(e.Workspace, rel)
				if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	t.Cleanup(e.keepArtifacts)
	e.Plan = scriptllm.NewPlan(e.Work)
	delay := scriptllm.DefaultSummaryDelay
	if cfg.SummaryDelay != nil {
		delay = *cfg.SummaryDelay
	}
	opts := []scriptllm.Option{scriptllm.WithScript(e.Plan), scriptllm.WithSummaryDelay(delay), scriptllm.WithAgentDelay(cfg.AgentDelay)}
	if os.Getenv("E2E_ARTIFACTS") != "" {
		// The request log (tens of MB per test) is written only when it can be kept.
		logf, err := os.Create(filepath.Join(dir, "requests.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { logf.Close() })
		opts = append(opts, scriptllm.WithLog(logf))
	}
	e.LLM = scriptllm.StartTest(t, opts...)
	e.writeAgentDir()
	if cfg.beforePi != nil {
		cfg.beforePi(e)
	}
	e.Pi = e.StartPi("")
	return e
}

// keepArtifacts copies a failed test's sessions, agent dir and request log to
// $E2E_ARTIFACTS/<test> (the temp dir is removed when the test ends).
func (e *Env) keepArtifacts() {
	root := os.Getenv("E2E_ARTIFACTS")
	if root == "" || !e.t.Failed() {
		return
	}
	dst := filepath.Join(root, strings.NewReplacer("/", "_", " ", "_").Replace(e.t.Name()))
	if err := os.CopyFS(dst, os.DirFS(e.Dir)); err != nil {
		e.t.Logf("keeping artifacts: %v", err)
		return
	}
	e.t.Logf("artifacts (sessions, agent dir, requests.jsonl) kept in %s", dst)
}

// writeAgentDir writes models.json (the scripted provider on loopback) and settings.json.
func (e *Env) writeAgentDir() {
	models := map[string]any{"providers": map[string]any{providerName: map[string]any{
		"baseUrl": e.LLM.URL(),
		"api":     "openai-completions",
		"apiKey":  "scripted-key",
		"compat":  map[string]any{"supportsDeveloperRole": false, "supportsReasoningEffort": false, "supportsStore": false},
		"models": []any{map[string]any{
			"id": modelName, "name": "Scripted model", "reasoning": false, "input": []string{"text"},
			"contextWindow": e.cfg.ContextWindow, "maxTokens": e.cfg.MaxTokens,
			"cost": map[string]int{"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
		}},
	}}}
	settings := map[string]any{"compaction": e.cfg.Compaction}
	for name, v := range map[string]any{"models.json": models, "settings.json": settings} {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			e.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(e.AgentDir, name), b, 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
}

// StartPi starts another Pi on this env (session "" = a new one).
func (e *Env) StartPi(session string) *Pi {
	env := e.cfg.PiEnv
	if e.cfg.piEnvFunc != nil {
		env = append(slices.Clone(env), e.cfg.piEnvFunc(e)...)
	}
	return StartPi(e.t, PiConfig{
		Provider: providerName, Model: modelName, AgentDir: e.AgentDir, SessionDir: e.SessionDir,
		Workspace: e.Workspace, Session: session, Extensions: e.cfg.Extensions, Args: e.cfg.PiArgs, Env: env,
	})
}

// Ctx is a context for one step of a test.
func (e *Env) Ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	e.t.Cleanup(cancel)
	return ctx
}

// Workload runs prompts from..to of the workload through Pi, each to its end, and
// returns the runs.
func (e *Env) Workload(from, to int) []*Run {
	e.t.Helper()
	var runs []*Run
	for n := from; n <= to; n++ {
		run, err := e.Pi.Prompt(e.Ctx(2*time.Minute), e.Work.Prompt(n))
		if err != nil {
			e.t.Fatalf("prompt %d: %v", n, err)
		}
		runs = append(runs, run)
	}
	return runs
}

// SessionFile is the file Pi writes (get_state).
func (e *Env) SessionFile() string {
	e.t.Helper()
	st, err := e.Pi.State(e.Ctx(30 * time.Second))
	if err != nil {
		e.t.Fatal(err)
	}
	if st.SessionFile == "" {
		e.t.Fatal("pi reports no session file")
	}
	return st.SessionFile
}

// LastAgentRequest is the latest agent request the model received.
func (e *Env) LastAgentRequest() scriptllm.Request {
	e.t.Helper()
	reqs := e.LLM.Requests()
	for i := len(reqs) - 1; i >= 0; i-- {
		if reqs[i].Kind == scriptllm.KindAgent {
			return reqs[i]
		}
	}
	e.t.Fatal("no agent request yet")
	return scriptllm.Request{}
}

// NextAgentRequest waits for the first agent request after request number mark.
func (e *Env) NextAgentRequest(mark int) scriptllm.Request {
	e.t.Helper()
	r, err := e.LLM.Wait(e.Ctx(time.Minute), mark, scriptllm.Agent)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// figure logs a measured value in a form that is easy to find and quote.
func figure(t testing.TB, name string, value any) {
	t.Helper()
	t.Logf("FIGURE %s %s: %v", t.Name(), name, value)
}
