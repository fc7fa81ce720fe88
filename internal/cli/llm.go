package cli

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/engine"
	"github.com/compactor-dev/compactor/internal/cli/command"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/tokenize"
)

// summarizerFlags are the flags that choose and configure the summarizer; every command
// that summarizes (compact, branch-summary, run) shares them. Environment variables fill
// what the flags leave empty, so a deployment can configure the LLM once.
type summarizerFlags struct {
	kind         string
	baseURL      string
	model        string
	apiKeyEnv    string
	apiKeyFile   string
	organization string
	headers      command.StringList
	headerFiles  command.StringList
	headerEnvs   command.StringList
	timeout      time.Duration
	maxTokensKey string
	maxInput     int
	concurrency  int
	rps          float64
	// summaryBudget is the extractive summarizer's budget in tokens.
	summaryBudget int
}

func (f *summarizerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.kind, "summarizer", "", "openai or extractive (default: openai when a base URL or model is configured, else extractive; env COMPACTOR_SUMMARIZER)")
	f.registerBudget(fs)
	f.registerEndpoint(fs)
}

// registerBudget registers --summary-budget, the extractive summarizer's size.
func (f *summarizerFlags) registerBudget(fs *flag.FlagSet) {
	fs.IntVar(&f.summaryBudget, "summary-budget", summarize.DefaultExtractiveBudget, "the extractive summarizer's summary size limit in tokens (o200k_base); Pi's file lists come on top")
}

// extractive returns the extractive summarizer with the configured budget, counted with
// tiktoken (the service's default counter).
func (f *summarizerFlags) extractive() (*summarize.Extractive, error) {
	if f.summaryBudget <= 0 {
		return nil, command.Usagef("--summary-budget %d: must be positive", f.summaryBudget)
	}
	tk, err := tokenize.NewTiktoken("o200k_base")
	if err != nil {
		return nil, fmt.Errorf("extractive summarizer: %w", err)
	}
	return &summarize.Extractive{Budget: f.summaryBudget, Counter: tk}, nil
}

// registerEndpoint registers the flags of the OpenAI-compatible endpoint alone (not
// --summarizer), for a command that chooses its summarizers otherwise (experiment).
func (f *summarizerFlags) registerEndpoint(fs *flag.FlagSet) {
	fs.StringVar(&f.baseURL, "base-url", "", "OpenAI-compatible API root, e.g. https://api.openai.com/v1 (env COMPACTOR_LLM_BASE_URL)")
	fs.StringVar(&f.model, "model", "", "model id sent to the endpoint (env COMPACTOR_LLM_MODEL)")
	fs.StringVar(&f.apiKeyEnv, "api-key-env", "", "environment variable holding the API key (default OPENAI_API_KEY; no key at all is fine for a keyless endpoint)")
	fs.StringVar(&f.apiKeyFile, "api-key-file", "", "file holding the API key (env COMPACTOR_LLM_API_KEY_FILE)")
	fs.StringVar(&f.organization, "organization", "", "OpenAI organization header (env COMPACTOR_LLM_ORGANIZATION)")
	fs.Var(&f.headers, "header", "extra request header 'Name: value' (repeatable; a secret value belongs in --header-file or --header-env: a command line is visible to every user)")
	fs.Var(&f.headerFiles, "header-file", "extra request header 'Name=FILE': the value is the file's content, trimmed (repeatable)")
	fs.Var(&f.headerEnvs, "header-env", "extra request header 'Name=VAR': the value is the environment variable's (repeatable)")
	fs.DurationVar(&f.timeout, "llm-timeout", 120*time.Second, "timeout of one LLM request")
	fs.StringVar(&f.maxTokensKey, "max-tokens-field", "max_tokens", "how the output limit is sent: max_tokens or max_completion_tokens")
	fs.IntVar(&f.maxInput, "llm-max-input-tokens", 0, "the summarizer model's input window; larger spans are summarized in chunks (0 = unknown)")
	fs.IntVar(&f.concurrency, "llm-concurrency", 8, "LLM requests in flight at most")
	fs.Float64Var(&f.rps, "llm-rps", 0, "LLM requests per second at most (0 = no limit)")
}

// fill completes the flags from the environment. It reports whether the key variable was
// named explicitly (--api-key-env or a config file): then it must be set.
func (f *summarizerFlags) fill(getenv func(string) string) (keyEnvNamed bool) {
	set := func(dst *string, env string) {
		if *dst == "" {
			*dst = getenv(env)
		}
	}
	set(&f.kind, "COMPACTOR_SUMMARIZER")
	set(&f.baseURL, "COMPACTOR_LLM_BASE_URL")
	set(&f.model, "COMPACTOR_LLM_MODEL")
	set(&f.apiKeyFile, "COMPACTOR_LLM_API_KEY_FILE")
	set(&f.organization, "COMPACTOR_LLM_ORGANIZATION")
	keyEnvNamed = f.apiKeyEnv != ""
	if f.apiKeyEnv == "" && f.apiKeyFile == "" {
		f.apiKeyEnv = "OPENAI_API_KEY" // a key file given alone is used alone
	}
	if f.kind == "" {
		if f.baseURL != "" || f.model != "" {
			f.kind = "openai"
		} else {
			f.kind = "extractive"
		}
	}
	return keyEnvNamed
}

// build returns the configured summarizer. The API key is optional: a keyless endpoint
// (a local Ollama, a gateway that authenticates otherwise) gets no Authorization header.
// A key source named explicitly (--api-key-env, --api-key-file) must yield a key. With
// dryRun the flags are checked but no key is read and nothing is built: a dry run never
// calls the summarizer.
func (f *summarizerFlags) build(getenv func(string) string, logger *slog.Logger, dryRun bool) (summarize.Summarizer, error) {
	keyEnvNamed := f.fill(getenv)
	switch f.kind {
	case "extractive":
		return f.extractive()
	case "openai":
	default:
		return nil, command.Usagef("--summarizer: unknown summarizer %q (want openai or extractive)", f.kind)
	}
	if f.baseURL == "" {
		f.baseURL = "https://api.openai.com/v1"
	}
	if f.model == "" {
		return nil, command.Usagef("--model: the openai summarizer needs a model id (or set COMPACTOR_LLM_MODEL)")
	}
	hdrs := map[string]string{}
	for _, h := range f.headers {
		k, v, ok := strings.Cut(h, ":")
		if !ok {
			return nil, command.Usagef("--header %q: want 'Name: value'", h)
		}
		hdrs[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	if err := secretHeaders(hdrs, f.headerFiles, f.headerEnvs, getenv); err != nil {
		return nil, err
	}
	var useMCT bool
	switch f.maxTokensKey {
	case "max_tokens":
	case "max_completion_tokens":
		useMCT = true
	default:
		return nil, command.Usagef("--max-tokens-field %q: want max_tokens or max_completion_tokens", f.maxTokensKey)
	}
	if dryRun {
		return summarize.NewExtractive(), nil // checked; never called
	}
	key := strings.TrimSpace(getenv(f.apiKeyEnv))
	if key == "" && keyEnvNamed {
		return nil, command.Usagef("--api-key-env %s: the variable is empty or unset", f.apiKeyEnv)
	}
	keyFile := f.apiKeyFile
	if key != "" {
		keyFile = "" // the variable wins over the file
	}
	s, err := summarize.NewOpenAI(summarize.OpenAIConfig{
		BaseURL: f.baseURL, Model: f.model, APIKey: key, APIKeyFile: keyFile,
		Organization: f.organization, Headers: hdrs, Timeout: f.timeout, UseMaxCompletionTokens: useMCT,
		MaxInputTokens: f.maxInput, MaxConcurrent: f.concurrency, RequestsPerSecond: f.rps, Logger: logger,
	})
	if err != nil {
		if keyFile != "" {
			return nil, inputError(fmt.Errorf("--api-key-file %s: %w", keyFile, err))
		}
		return nil, command.Usagef("summarizer: %v", err)
	}
	return s, nil
}

// buildLive builds the summarizer as build does, for the service's liveSummarizer: with
// the model it bills ("" for the extractive summarizer) and the settings it came from.
func (f *summarizerFlags) buildLive(getenv func(string) string, logger *slog.Logger) (*builtSummarizer, error) {
	s, err := f.build(getenv, logger, false)
	if err != nil {
		return nil, err
	}
	b := &builtSummarizer{Summarizer: s, flags: *f}
	if f.kind == "openai" {
		b.model = f.model
		// The key as build found it (the variable wins over the file), for the LLM probe.
		if b.key = strings.TrimSpace(getenv(f.apiKeyEnv)); b.key == "" && f.apiKeyFile != "" {
			k, err := os.ReadFile(f.apiKeyFile)
			if err != nil {
				return nil, inputError(fmt.Errorf("--api-key-file %s: %w", f.apiKeyFile, err))
			}
			b.key = strings.TrimSpace(string(k))
		}
	}
	return b, nil
}

// logAttrs describe the summarizer and the planning settings for the service's log,
// without secrets and without empty values.
func (f *summarizerFlags) logAttrs(ef engineFlags) []any {
	attrs := []any{"kind", f.kind}
	if f.kind == "openai" {
		attrs = append(attrs, "base_url", f.baseURL, "model", f.model)
	}
	return append(attrs, "policy", ef.policy, "counter", ef.counter)
}

// engineFlags are the planning settings shared by compact, branch-summary, sweep and run.
type engineFlags struct {
	fs             *flag.FlagSet
	pi             piFlags
	piWarning      string // check's warning for an unknown --pi-version
	piSettings     string
	overrides      map[string]engine.ModelOverride
	policy         string
	counter        string
	keepRecent     int
	reserve        int
	contextWindow  int
	abandonedAfter time.Duration
	// Preparations for live agents (run only: registerPreparation).
	prepareUpdate   string
	bridgeMaxTokens int
	rewriteExtracts bool
}

// registerPreparation adds the settings of preparations and bridges (run's workers make
// them for Pi's extension: docs/live-agents.md).
func (f *engineFlags) registerPreparation(fs *flag.FlagSet) {
	fs.StringVar(&f.prepareUpdate, "prepare-update", engine.PrepareFull,
		"how a preparation builds on the session's previous one: full (the whole span again, in the same order, so the endpoint's prompt cache serves the repeated part) or incremental (only what is new, merged into the previous summary)")
	fs.IntVar(&f.bridgeMaxTokens, "bridge-max-tokens", summarize.DefaultBridgeMaxTokens,
		"at most this many tokens of extract are added to a prepared summary to bring it to the cut Pi makes when it compacts")
	fs.BoolVar(&f.rewriteExtracts, "rewrite-extracts", true,
		"after the extract answered Pi's hook (no preparation could be ready), have the model summarize the same span in the background, so that the next summary builds on a model's summary instead of the extract's notes (one summary request per extract, or one for several when they come faster than a summary is made)")
}

func (f *engineFlags) register(fs *flag.FlagSet, getenv func(string) string) {
	f.fs = fs
	piVersionFlag(fs, &f.pi, getenv)
	piSettingsFlag(fs, &f.piSettings, getenv)
	fs.StringVar(&f.policy, "policy", cutpoint.PolicyNearest, "cut-point policy: nearest, pi (exactly what Pi would do) or turn; see docs/policies.md")
	fs.StringVar(&f.counter, "counter", "tiktoken", "token counter: tiktoken or estimate (Pi's chars/4)")
	fs.IntVar(&f.keepRecent, "keep-recent-tokens", 20000, "recent tokens kept verbatim (Pi's keepRecentTokens)")
	fs.IntVar(&f.reserve, "reserve-tokens", 16384, "tokens kept free in the context window (Pi's reserveTokens)")
	fs.IntVar(&f.contextWindow, "context-window", 0, "override the model catalog's context window (0 = from the catalog)")
	fs.DurationVar(&f.abandonedAfter, "abandoned-after", engine.DefaultAbandonedAfter, "a session whose file ends mid-turn is left alone (a live agent is working) unless untouched this long")
}

// check refuses settings that cannot work, naming the flags.
func (f *engineFlags) check() error {
	var err error
	if f.piWarning, err = f.pi.check(); err != nil {
		return err
	}
	if f.overrides, err = applyPiSettings(f.fs, f.piSettings, &f.keepRecent, &f.reserve); err != nil {
		return err
	}
	if _, err := cutpoint.ByName(f.policy); err != nil {
		return command.Usagef("--policy: %v", err)
	}
	if err := tokenize.CheckCounter(f.counter); err != nil {
		return command.Usagef("--counter: %v", err)
	}
	if f.abandonedAfter < 0 {
		return command.Usagef("--abandoned-after %s: must not be negative", f.abandonedAfter)
	}
	switch f.prepareUpdate {
	case "", engine.PrepareFull, engine.PrepareIncremental:
	default:
		return command.Usagef("--prepare-update %q: want %s or %s", f.prepareUpdate, engine.PrepareFull, engine.PrepareIncremental)
	}
	if f.bridgeMaxTokens < 0 {
		return command.Usagef("--bridge-max-tokens %d: must not be negative", f.bridgeMaxTokens)
	}
	return checkBudget(f.keepRecent, f.reserve, f.contextWindow)
}

// checkBudget refuses token settings that cannot work: negative ones, a reserve that
// leaves no room in the window, and a kept part that does not fit under the budget (a
// compacted session would still be over it). The window is checked only when given: a
// model's catalog window is known only per session.
func checkBudget(keep, reserve, window int) error {
	switch {
	case keep < 0:
		return command.Usagef("--keep-recent-tokens %d: must not be negative", keep)
	case reserve < 0:
		return command.Usagef("--reserve-tokens %d: must not be negative", reserve)
	case window < 0:
		return command.Usagef("--context-window %d: must not be negative", window)
	case window == 0:
		return nil
	case reserve >= window:
		return command.Usagef("--context-window %d is not larger than --reserve-tokens %d: no context would fit under the budget", window, reserve)
	case keep >= window-reserve:
		return command.Usagef("--keep-recent-tokens %d does not fit under the budget (--context-window %d - --reserve-tokens %d = %d): a compacted session would still be over it",
			keep, window, reserve, window-reserve)
	}
	return nil
}

func (f *engineFlags) settings() engine.Settings {
	return engine.Settings{Pi: f.pi.version, Policy: f.policy, Counter: f.counter, KeepRecentTokens: f.keepRecent,
		ReserveTokens: f.reserve, ContextWindow: f.contextWindow, AbandonedAfter: f.abandonedAfter,
		PrepareUpdate: f.prepareUpdate, BridgeMaxTokens: f.bridgeMaxTokens, ModelOverrides: f.overrides}
}

// secretHeaders adds the headers whose values come from files (--header-file Name=FILE)
// and from the environment (--header-env Name=VAR), so that no secret needs the command
// line. A file that cannot be read or a variable that is empty is an error naming it.
func secretHeaders(hdrs map[string]string, files, envs []string, getenv func(string) string) error {
	for _, spec := range files {
		name, file, ok := strings.Cut(spec, "=")
		if !ok || strings.TrimSpace(name) == "" || file == "" {
			return command.Usagef("--header-file %q: want 'Name=FILE'", spec)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return command.Usagef("--header-file %s: %v", name, err)
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return command.Usagef("--header-file %s: %s is empty", name, file)
		}
		hdrs[strings.TrimSpace(name)] = v
	}
	for _, spec := range envs {
		name, env, ok := strings.Cut(spec, "=")
		if !ok || strings.TrimSpace(name) == "" || env == "" {
			return command.Usagef("--header-env %q: want 'Name=VAR'", spec)
		}
		v := strings.TrimSpace(getenv(env))
		if v == "" {
			return command.Usagef("--header-env %s: the variable %s is empty or unset", name, env)
		}
		hdrs[strings.TrimSpace(name)] = v
	}
	return nil
}
