// Package experiment replays Pi sessions to compare cut-point policies without spending
// anything on an LLM: how much each policy keeps verbatim, how much it sends to the
// summarizer, whether it splits turns, whether it breaks a cut invariant, and whether it
// agrees with Pi.
//
// Two modes run over every *.jsonl file under a directory:
//
//   - Snapshot: one plan per session, policy and keepRecentTokens setting, for the
//     session's current path as it is on disk (existing compactions included).
//   - Replay: the session's current path is grown entry by entry as it happened, its own
//     compaction entries dropped, and whenever the context goes over budget at a point
//     where Pi would check (the end of an agent run, or just before a new user prompt) it
//     is compacted in memory with the policy and each summarizer asked for (the extractive
//     one, a fixed-size stand-in, or a configured LLM). Each compaction becomes a
//     synthetic compaction entry in the replayed path, so the next plan starts where Pi's
//     would.
//   - Eval (with Replay): every compacted span gives probes, facts a continuing agent
//     needs (files, commands and their failures, the user's requests and constraints,
//     numbers), and each is checked against the context right after the compaction and,
//     for the session's first span, after later compactions (probe.go).
//
// Sessions are processed by a bounded pool of workers; one bad file is reported in
// Result.Errors and skipped. The result is deterministic (sorted rows, no timings), so
// reports generated from the same corpus are byte-identical.
package experiment

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/tokenize"
)

// Summarizer names for Config.Summarizers.
const (
	SummarizerExtractive = "extractive"
	SummarizerNone       = "none"
	// SummarizerLLM is Config.LLM: a model behind an OpenAI-compatible endpoint.
	SummarizerLLM = "llm"
	// SummarizerRecorded is no summarizer: the session's own compactions, where its file
	// holds them (their summaries, their cuts), the summaries an agent actually continued
	// from. The policy and the settings play no part.
	SummarizerRecorded = "recorded"
)

// SummarizerNames lists the summarizers a replay knows.
func SummarizerNames() []string {
	return []string{SummarizerExtractive, SummarizerNone, SummarizerLLM, SummarizerRecorded}
}

// DefaultSummaryTokens is the size of the stand-in summary of SummarizerNone.
const DefaultSummaryTokens = 1000

// Config selects what an experiment runs. Zero values mean the defaults.
type Config struct {
	// Policies to compare (default: every cutpoint policy).
	Policies []string
	// Pi is the Pi release whose rules the sessions are read and planned by (default: the
	// newest; engine.Settings.Pi).
	Pi string
	// Counter is "tiktoken" (default) or "estimate" (Pi's chars/4).
	Counter string
	// KeepRecentTokens settings to try (default: 20000, Pi's).
	KeepRecentTokens []int
	// ReserveTokens is Pi's reserveTokens (default 16384).
	ReserveTokens int
	// ContextWindow overrides the model catalog's window of each session's model
	// (0: the catalog's). Small windows make small sessions compact in a replay.
	ContextWindow int
	// Replay also replays every session (Result.Replay); otherwise only snapshots.
	Replay bool
	// Summarizers are the replay's summarizers, each replayed separately: "extractive"
	// (default), "none" (a fixed-size stand-in summary of SummaryTokens tokens), "llm"
	// (LLM).
	Summarizers   []string
	SummaryTokens int
	// LLM is the summarizer named "llm" (required when Summarizers names it).
	LLM summarize.Summarizer
	// Extractive is the summarizer named "extractive" (default summarize.NewExtractive()).
	Extractive summarize.Summarizer
	// Eval derives probes from every compacted span and reports their recall (needs
	// Replay).
	Eval bool
	// Workers is the number of sessions processed at once (default runtime.NumCPU()).
	Workers int
	// Progress, when set, is called after each file with the number of files done and
	// the total, from one goroutine at a time.
	Progress func(done, total int)
}

// WithDefaults returns c with every zero value replaced by its default.
func (c Config) WithDefaults() Config {
	if len(c.Policies) == 0 {
		c.Policies = cutpoint.Names()
	}
	if c.Counter == "" {
		c.Counter = tokenize.CounterTiktoken
	}
	if len(c.KeepRecentTokens) == 0 {
		c.KeepRecentTokens = []int{cutpoint.DefaultKeepRecentTokens}
	}
	if c.ReserveTokens <= 0 {
		c.ReserveTokens = cutpoint.DefaultReserveTokens
	}
	if len(c.Summarizers) == 0 {
		c.Summarizers = []string{SummarizerExtractive}
	}
	if c.Extractive == nil {
		c.Extractive = summarize.NewExtractive()
	}
	if c.SummaryTokens <= 0 {
		c.SummaryTokens = DefaultSummaryTokens
	}
	if c.Workers <= 0 {
		c.Workers = runtime.NumCPU()
	}
	return c
}

// SettingError is a bad Config setting; Setting is the field's name as the JSON of a
// Result spells it ("keepRecentTokens"), so a caller can name its own flag for it.
type SettingError struct {
	Setting string
	Err     error
}

func (e *SettingError) Error() string { return "experiment: " + e.Setting + ": " + e.Err.Error() }
func (e *SettingError) Unwrap() error { return e.Err }

func bad(setting, format string, args ...any) error {
	return &SettingError{Setting: setting, Err: fmt.Errorf(format, args...)}
}

// Validate names the first bad setting (a *SettingError): unknown or repeated policies,
// an unknown counter or summarizer, negative numbers, and budgets that cannot work (a
// given context window not larger than the reserve, or a keepRecentTokens that does not
// fit under it: every compaction would leave the context over budget).
func (c Config) Validate() error {
	for setting, v := range map[string]int{"reserveTokens": c.ReserveTokens, "contextWindow": c.ContextWindow,
		"summaryTokens": c.SummaryTokens, "workers": c.Workers} {
		if v < 0 {
			return bad(setting, "%d is negative", v)
		}
	}
	c = c.WithDefaults()
	seen := map[string]bool{}
	for _, p := range c.Policies {
		if _, err := cutpoint.ByName(p); err != nil {
			return &SettingError{Setting: "policies", Err: err}
		}
		if seen[p] {
			return bad("policies", "%q given twice", p)
		}
		seen[p] = true
	}
	switch c.Counter {
	case tokenize.CounterTiktoken, tokenize.CounterEstimate:
	default:
		return bad("counter", "unknown counter %q (want tiktoken or estimate)", c.Counter)
	}
	for _, k := range c.KeepRecentTokens {
		if k < 0 {
			return bad("keepRecentTokens", "%d is negative", k)
		}
	}
	if w := c.ContextWindow; w > 0 {
		if c.ReserveTokens >= w {
			return bad("contextWindow", "%d is not larger than reserveTokens %d: no context would fit under the budget", w, c.ReserveTokens)
		}
		for _, k := range c.KeepRecentTokens {
			if k >= w-c.ReserveTokens {
				return bad("keepRecentTokens", "%d does not fit under the budget (contextWindow %d - reserveTokens %d = %d): every compaction would leave the context over it",
					k, w, c.ReserveTokens, w-c.ReserveTokens)
			}
		}
	}
	seenSum := map[string]bool{}
	for _, name := range c.Summarizers {
		if !slices.Contains(SummarizerNames(), name) {
			return bad("summarizers", "unknown summarizer %q (want %s)", name, strings.Join(SummarizerNames(), ", "))
		}
		if seenSum[name] {
			return bad("summarizers", "%q given twice", name)
		}
		seenSum[name] = true
		if name == SummarizerLLM && c.LLM == nil && c.Replay {
			return bad("summarizers", "%q needs a configured model (an OpenAI-compatible endpoint)", name)
		}
	}
	if c.Eval && !c.Replay {
		return bad("eval", "probes are checked on replayed compactions: it needs the replay")
	}
	return nil
}

// Result is everything an experiment measured. JSON, CSV, the table and the HTML report
// are all rendered from it.
type Result struct {
	Dir              string   `json:"dir"`
	Policies         []string `json:"policies"`
	Counter          string   `json:"counter"`
	KeepRecentTokens []int    `json:"keepRecentTokens"`
	ReserveTokens    int      `json:"reserveTokens"`
	// ContextWindow is the override; 0 means each session's catalog window (rows say
	// which window they used).
	ContextWindow int  `json:"contextWindow"`
	Replayed      bool `json:"replayed"`
	// Summarizers are the replay's summarizers (empty without a replay).
	Summarizers   []string `json:"summarizers"`
	SummaryTokens int      `json:"summaryTokens,omitempty"`
	// Evaluated: the replay rows carry probe recall (Config.Eval).
	Evaluated bool `json:"evaluated"`

	Files    int `json:"files"`    // *.jsonl files found
	Sessions int `json:"sessions"` // files read and planned

	Snapshot       []SnapshotRow   `json:"snapshot"`
	SnapshotTotals []SnapshotTotal `json:"snapshotTotals"`
	Replay         []ReplayRow     `json:"replay"`
	ReplayTotals   []ReplayTotal   `json:"replayTotals"`
	// RecallTotals and EarlyTotals (with Evaluated) are the probe recall per policy,
	// setting and summarizer: per probe kind over every compaction, and for each session's
	// first compacted span after its 1st, 2nd, 5th and 10th compaction.
	RecallTotals []RecallTotal `json:"recallTotals,omitempty"`
	EarlyTotals  []EarlyTotal  `json:"earlyTotals,omitempty"`
	Errors       []FileError   `json:"errors"`
}

// FileError is a file that was skipped, and why.
type FileError struct {
	File   string `json:"file"`
	Reason string `json:"reason"`
}

// Files returns every *.jsonl file under dir (recursively), sorted. Unreadable
// subdirectories are returned as FileErrors rather than failing the walk.
func Files(dir string) ([]string, []FileError, error) {
	var files []string
	var bad []FileError
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return err
			}
			bad = append(bad, FileError{File: p, Reason: err.Error()})
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".jsonl") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("experiment: walk %s: %w", dir, err)
	}
	sort.Strings(files)
	return files, bad, nil
}

// Run runs the experiment over every *.jsonl file under dir.
func Run(ctx context.Context, dir string, cfg Config) (*Result, error) {
	files, bad, err := Files(dir)
	if err != nil {
		return nil, err
	}
	res, err := RunFiles(ctx, dir, files, cfg)
	if err != nil {
		return nil, err
	}
	res.Errors = append(res.Errors, bad...)
	sortErrors(res.Errors)
	return res, nil
}

// RunFiles runs the experiment over the given files; rows name each file relative to
// root (root may be "").
func RunFiles(ctx context.Context, root string, files []string, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	res := &Result{
		Dir: root, Policies: cfg.Policies, Counter: cfg.Counter, KeepRecentTokens: cfg.KeepRecentTokens,
		ReserveTokens: cfg.ReserveTokens, ContextWindow: cfg.ContextWindow, Replayed: cfg.Replay,
		Files: len(files), Snapshot: []SnapshotRow{}, Replay: []ReplayRow{}, Errors: []FileError{},
		SnapshotTotals: []SnapshotTotal{}, ReplayTotals: []ReplayTotal{},
	}
	if cfg.Replay {
		res.Summarizers = cfg.Summarizers
		if slices.Contains(cfg.Summarizers, SummarizerNone) {
			res.SummaryTokens = cfg.SummaryTokens
		}
		res.Evaluated = cfg.Eval
	}
	runSessions(ctx, root, files, cfg, res)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("experiment: %w", err)
	}
	totalUp(res, cfg)
	return res, nil
}

// runSessions runs the experiment over each file with cfg.Workers workers and collects
// their rows, and the files that could not be read, into res.
func runSessions(ctx context.Context, root string, files []string, cfg Config, res *Result) {
	// The stand-in summary is built once per counter name (encodings may differ).
	sr := newSessionRunner(cfg)

	type out struct {
		sr  *sessionResult
		err *FileError
	}
	jobs := make(chan int)
	results := make(chan out)
	var wg sync.WaitGroup
	workers := min(cfg.Workers, max(1, len(files)))
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				name := relName(root, files[i])
				r, err := sr.run(ctx, files[i], name)
				if err != nil {
					results <- out{err: &FileError{File: name, Reason: err.Error()}}
					continue
				}
				results <- out{sr: r}
			}
		}()
	}
	go func() {
		defer close(jobs)
		for i := range files {
			select {
			case jobs <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() { wg.Wait(); close(results) }()

	done := 0
	for o := range results {
		done++
		if o.err != nil {
			res.Errors = append(res.Errors, *o.err)
		} else {
			res.Sessions++
			res.Snapshot = append(res.Snapshot, o.sr.snapshot...)
			res.Replay = append(res.Replay, o.sr.replay...)
		}
		if cfg.Progress != nil {
			cfg.Progress(done, len(files))
		}
	}
}

// totalUp sorts the rows (by file, keepRecentTokens, then policy and summarizer in the
// order given) and the errors, and adds the totals.
func totalUp(res *Result, cfg Config) {
	order := policyOrder(cfg.Policies)
	sumOrder := policyOrder(cfg.Summarizers)
	slices.SortFunc(res.Snapshot, func(a, b SnapshotRow) int {
		return cmpRow(a.File, b.File, a.KeepRecentTokens, b.KeepRecentTokens, order[a.Policy], order[b.Policy])
	})
	slices.SortFunc(res.Replay, func(a, b ReplayRow) int {
		if c := cmpRow(a.File, b.File, a.KeepRecentTokens, b.KeepRecentTokens, order[a.Policy], order[b.Policy]); c != 0 {
			return c
		}
		return sumOrder[a.Summarizer] - sumOrder[b.Summarizer]
	})
	sortErrors(res.Errors)
	res.SnapshotTotals = snapshotTotals(res.Snapshot, cfg.Policies, cfg.KeepRecentTokens)
	if cfg.Replay {
		res.ReplayTotals = replayTotals(res.Replay, cfg.Policies, cfg.KeepRecentTokens, cfg.Summarizers)
		if cfg.Eval {
			res.RecallTotals, res.EarlyTotals = evalTotals(res.ReplayTotals)
		}
	}
}

func relName(root, file string) string {
	if root == "" {
		return filepath.ToSlash(file)
	}
	if r, err := filepath.Rel(root, file); err == nil {
		return filepath.ToSlash(r)
	}
	return filepath.ToSlash(file)
}

func policyOrder(policies []string) map[string]int {
	m := make(map[string]int, len(policies))
	for i, p := range policies {
		m[p] = i
	}
	return m
}

func cmpRow(fa, fb string, ka, kb, pa, pb int) int {
	if c := strings.Compare(fa, fb); c != 0 {
		return c
	}
	if ka != kb {
		return ka - kb
	}
	return pa - pb
}

func sortErrors(e []FileError) {
	slices.SortFunc(e, func(a, b FileError) int { return strings.Compare(a.File, b.File) })
}
