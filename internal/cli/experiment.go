package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/internal/cli/command"
	"github.com/compactor-dev/compactor/internal/experiment"
	"github.com/compactor-dev/compactor/tokenize"
)

func init() {
	command.Register(&command.Command{Name: "experiment", Summary: "compare cut-point policies and summaries over a directory of sessions (no writes; an LLM only with --summarizer llm)", Run: runExperiment})
}

func runExperiment(ctx context.Context, env *Env) error {
	fs := command.NewFlagSet(env, "experiment", "--dir DIR [--policies pi,turn,nearest] [--counter tiktoken|estimate] [--keep-recent-tokens 5000,20000] [--context-window N] [--reserve-tokens N] [--replay [--eval] [--summarizer extractive,none,llm] [--summary-budget N] [--summary-tokens N] [--llm-spend-limit N]] [--format table|json|csv|html] [--out FILE] [--workers N]",
		`Plan every session (*.jsonl, recursively) under DIR with each policy and keepRecentTokens
setting and compare: tokens kept verbatim, summarized and in a split turn's prefix, distance
from the target, invariant violations, agreement with Pi. With --replay each session's current
path is also grown entry by entry and compacted in memory whenever it goes over budget (window
- reserve) at the end of an agent run, with each summarizer of --summarizer: the extractive
one, a fixed-size stand-in (none), or the model configured with --base-url/--model or the
COMPACTOR_LLM_* variables (llm): compactions, tokens sent to the summarizer, verbatim context
after each compaction, largest context. Nothing is written to the sessions, and no LLM is
called unless --summarizer names llm.

With --eval every compacted span gives probes (files read and modified, commands and their
failures with the first error line, the user's requests and constraints, numbers from the
user and from tool results), and each probe is looked up in the context right after the
compaction (summary and kept messages): recall per probe kind, summary sizes, and the recall
of each session's first span after its 1st, 2nd, 5th and 10th compaction (docs/quality.md).

Before an llm replay starts, its calls and input tokens are estimated (the same replay with
the extractive summarizer standing in) and printed; it refuses to start when the estimate is
over --llm-spend-limit. Afterwards the calls and the input, cached and output tokens the
endpoint reported are printed and in the result.

The window defaults to each session's model window from the catalog (what the service uses);
--context-window overrides it, e.g. 64000 to make ordinary sessions compact. A file that cannot
be read is listed under errors and skipped. CSV holds the replay rows with --replay, else the
snapshot rows; JSON and HTML hold everything. The format is --format, or the one --out's
extension names (.json, .csv, .html, .txt); any other extension is refused.`)
	dir := fs.String("dir", "", "directory of session files (searched recursively for *.jsonl)")
	policies := fs.String("policies", strings.Join(cutpoint.Names(), ","), "comma-separated policies to compare")
	counter := fs.String("counter", tokenize.CounterTiktoken, "token counter: tiktoken|estimate (estimate = Pi's chars/4)")
	var pi piFlags
	piVersionFlag(fs.FlagSet, &pi, env.Getenv)
	keeps := fs.String("keep-recent-tokens", strconv.Itoa(cutpoint.DefaultKeepRecentTokens), "comma-separated keepRecentTokens settings")
	window := fs.Int("context-window", 0, "context window for every session (default: the catalog window of each session's model)")
	reserve := fs.Int("reserve-tokens", cutpoint.DefaultReserveTokens, "tokens kept free in the context window")
	replay := fs.Bool("replay", false, "also replay each session and compact it in memory when over budget")
	eval := fs.Bool("eval", false, "with --replay: derive probes from every compacted span and report what the compacted context still holds")
	summarizers := fs.String("summarizer", experiment.SummarizerExtractive, "replay summarizers, comma-separated: extractive, none (a stand-in), llm (the configured model), recorded (the session's own compactions, the summaries its agent read)")
	summaryTokens := fs.Int("summary-tokens", experiment.DefaultSummaryTokens, "size of the stand-in summary with --summarizer none")
	spendLimit := fs.Int("llm-spend-limit", defaultSpendLimit, "with --summarizer llm: refuse to start when the estimated LLM input is over this many tokens (0 = no limit)")
	var sf summarizerFlags
	sf.registerBudget(fs.FlagSet)
	sf.registerEndpoint(fs.FlagSet)
	format := fs.String("format", "", "output: table|json|csv|html (default: from --out's extension, else table)")
	out := fs.String("out", "", "write the output to FILE instead of standard output")
	workers := fs.Int("workers", 0, "sessions processed at once (default: the number of CPUs)")
	args, err := fs.ParseArgs(env.Args)
	if err != nil {
		return err
	}
	if *dir == "" && len(args) == 1 {
		*dir, args = args[0], nil
	}
	if *dir == "" {
		return command.Usagef("--dir is required (see --help)")
	}
	if len(args) > 0 {
		return command.Usagef("unexpected arguments %q", args)
	}
	warning, err := pi.check()
	if err != nil {
		return err
	}
	warnTo(env.Stderr, warning)
	cfg := experiment.Config{
		Pi: pi.version, Counter: *counter, ContextWindow: *window, ReserveTokens: *reserve, Replay: *replay, Eval: *eval,
		Summarizers: splitList(*summarizers), SummaryTokens: *summaryTokens, Workers: *workers,
		Policies: splitList(*policies),
	}
	x, err := sf.extractive()
	if err != nil {
		return err
	}
	cfg.Extractive = x
	if *spendLimit < 0 {
		return command.Usagef("--llm-spend-limit %d: must not be negative", *spendLimit)
	}
	useLLM := *replay && slices.Contains(cfg.Summarizers, experiment.SummarizerLLM)
	if useLLM {
		sf.kind = "openai"
		logger := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		llm, err := sf.build(env.Getenv, logger, false)
		if err != nil {
			return err
		}
		cfg.LLM = llm
	}
	for _, k := range splitList(*keeps) {
		n, err := strconv.Atoi(k)
		if err != nil {
			return command.Usagef("--keep-recent-tokens: %q is not a number", k)
		}
		cfg.KeepRecentTokens = append(cfg.KeepRecentTokens, n)
	}
	if err := cfg.Validate(); err != nil {
		return experimentFlagError(err)
	}
	f, err := experiment.FormatFor(*format, *out)
	if err != nil {
		if *format != "" {
			return command.Usagef("--format: %v", err)
		}
		return command.Usagef("--out %v (or give --format)", err)
	}
	if st, err := os.Stat(*dir); err != nil || !st.IsDir() {
		if err == nil {
			err = fmt.Errorf("not a directory")
		}
		return command.Usagef("--dir %s: %v", *dir, err)
	}

	files, walkErrs, err := experiment.Files(*dir)
	if err != nil {
		return &command.UsageError{Err: err}
	}
	if len(files) == 0 {
		return command.Usagef("--dir %s: no *.jsonl session files", *dir)
	}
	if useLLM {
		est, err := experiment.EstimateLLM(ctx, *dir, files, cfg, sf.maxInput)
		if err != nil {
			return err
		}
		limit := "no limit"
		if *spendLimit > 0 {
			limit = fmt.Sprintf("limit %d", *spendLimit)
		}
		fmt.Fprintf(env.Stderr, "%s: --summarizer llm (%s at %s): about %d calls and %d input tokens, estimated by the same replay with the extractive summarizer standing in (--llm-spend-limit: %s)\n",
			env.ProgName(), sf.model, sf.baseURL, est.Calls, est.InputTokens, limit)
		if *spendLimit > 0 && est.InputTokens > *spendLimit {
			return command.Usagef("--llm-spend-limit %d: the replay would send about %d input tokens in about %d calls; raise the limit or replay less (--dir, --policies, --keep-recent-tokens)",
				*spendLimit, est.InputTokens, est.Calls)
		}
	}
	bar := newProgressBar(env.Stderr, "experiment")
	cfg.Progress = func(done, total int) { bar.update(done, total, "") }
	start := time.Now()
	res, err := experiment.RunFiles(ctx, *dir, files, cfg)
	bar.clear()
	if err != nil {
		return err
	}
	res.Errors = append(res.Errors, walkErrs...)
	if useLLM {
		var calls, in, cached, out int
		for _, t := range res.ReplayTotals {
			calls, in, cached, out = calls+t.LLMCalls, in+t.LLMInputTokens, cached+t.LLMCachedInputTokens, out+t.LLMOutputTokens
		}
		fmt.Fprintf(env.Stderr, "%s: llm: %d calls, %d input tokens (%d cached), %d output tokens\n", env.ProgName(), calls, in, cached, out)
	}

	var buf bytes.Buffer
	if err := experiment.Write(&buf, res, f); err != nil {
		return err
	}
	if *out == "" {
		_, err = env.Stdout.Write(buf.Bytes())
		return err
	}
	if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", *out, err)
	}
	fmt.Fprintf(env.Stderr, "%s: %d sessions (%d skipped) in %s; wrote %s (%s)\n",
		env.ProgName(), res.Sessions, len(res.Errors), time.Since(start).Round(time.Millisecond), *out, f)
	return nil
}

// experimentFlags names the flag of each experiment setting.
var experimentFlags = map[string]string{
	"policies": "--policies", "counter": "--counter", "keepRecentTokens": "--keep-recent-tokens",
	"reserveTokens": "--reserve-tokens", "contextWindow": "--context-window", "summarizers": "--summarizer",
	"summaryTokens": "--summary-tokens", "workers": "--workers", "eval": "--eval",
}

// defaultSpendLimit bounds what an llm replay may send unless told otherwise: about one
// corpus of large sessions at one policy and setting.
const defaultSpendLimit = 1_000_000

// experimentFlagError turns an experiment.SettingError into a usage error naming the flag.
func experimentFlagError(err error) error {
	var se *experiment.SettingError
	if errors.As(err, &se) {
		if flag, ok := experimentFlags[se.Setting]; ok {
			return command.Usagef("%s: %v", flag, se.Err)
		}
	}
	return &command.UsageError{Err: err}
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
