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

const experimentHelp = `Plan every session (*.jsonl, recursively) under DIR with each policy and keepRecentTokens
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
extension names (.json, .csv, .html, .txt); any other extension is refused.`

// experimentOpts are the flags of compactor experiment.
type experimentOpts struct {
	fs                                         *command.FlagSet
	dir, policies, counter, keeps, summarizers *string
	window, reserve, summaryTokens, spendLimit *int
	replay, eval                               *bool
	format, out                                *string
	workers                                    *int
	pi                                         piFlags
	sf                                         summarizerFlags
}

func bindExperimentFlags(env *Env) *experimentOpts {
	fs := command.NewFlagSet(env, "experiment", "--dir DIR [--policies pi,turn,nearest] [--counter tiktoken|estimate] [--keep-recent-tokens 5000,20000] [--context-window N] [--reserve-tokens N] [--replay [--eval] [--summarizer extractive,none,llm] [--summary-budget N] [--summary-tokens N] [--llm-spend-limit N]] [--format table|json|csv|html] [--out FILE] [--workers N]", experimentHelp)
	o := &experimentOpts{fs: fs}
	o.dir = fs.String("dir", "", "directory of session files (searched recursively for *.jsonl)")
	o.policies = fs.String("policies", strings.Join(cutpoint.Names(), ","), "comma-separated policies to compare")
	o.counter = fs.String("counter", tokenize.CounterTiktoken, "token counter: tiktoken|estimate (estimate = Pi's chars/4)")
	piVersionFlag(fs.FlagSet, &o.pi, env.Getenv)
	o.keeps = fs.String("keep-recent-tokens", strconv.Itoa(cutpoint.DefaultKeepRecentTokens), "comma-separated keepRecentTokens settings")
	o.window = fs.Int("context-window", 0, "context window for every session (default: the catalog window of each session's model)")
	o.reserve = fs.Int("reserve-tokens", cutpoint.DefaultReserveTokens, "tokens kept free in the context window")
	o.replay = fs.Bool("replay", false, "also replay each session and compact it in memory when over budget")
	o.eval = fs.Bool("eval", false, "with --replay: derive probes from every compacted span and report what the compacted context still holds")
	o.summarizers = fs.String("summarizer", experiment.SummarizerExtractive, "replay summarizers, comma-separated: extractive, none (a stand-in), llm (the configured model), recorded (the session's own compactions, the summaries its agent read)")
	o.summaryTokens = fs.Int("summary-tokens", experiment.DefaultSummaryTokens, "size of the stand-in summary with --summarizer none")
	o.spendLimit = fs.Int("llm-spend-limit", defaultSpendLimit, "with --summarizer llm: refuse to start when the estimated LLM input is over this many tokens (0 = no limit)")
	o.sf.registerBudget(fs.FlagSet)
	o.sf.registerEndpoint(fs.FlagSet)
	o.format = fs.String("format", "", "output: table|json|csv|html (default: from --out's extension, else table)")
	o.out = fs.String("out", "", "write the output to FILE instead of standard output")
	o.workers = fs.Int("workers", 0, "sessions processed at once (default: the number of CPUs)")
	return o
}

func runExperiment(ctx context.Context, env *Env) error {
	o := bindExperimentFlags(env)
	args, err := o.fs.ParseArgs(env.Args)
	if err != nil {
		return err
	}
	cfg, useLLM, err := o.config(env, args)
	if err != nil {
		return err
	}
	f, err := experiment.FormatFor(*o.format, *o.out)
	if err != nil {
		if *o.format != "" {
			return command.Usagef("--format: %v", err)
		}
		return command.Usagef("--out %v (or give --format)", err)
	}
	if st, err := os.Stat(*o.dir); err != nil || !st.IsDir() {
		if err == nil {
			err = fmt.Errorf("not a directory")
		}
		return command.Usagef("--dir %s: %v", *o.dir, err)
	}
	files, walkErrs, err := experiment.Files(*o.dir)
	if err != nil {
		return &command.UsageError{Err: err}
	}
	if len(files) == 0 {
		return command.Usagef("--dir %s: no *.jsonl session files", *o.dir)
	}
	if useLLM {
		if err := o.checkSpend(ctx, env, files, cfg); err != nil {
			return err
		}
	}
	bar := newProgressBar(env.Stderr, "experiment")
	cfg.Progress = func(done, total int) { bar.update(done, total, "") }
	start := time.Now()
	res, err := experiment.RunFiles(ctx, *o.dir, files, cfg)
	bar.clear()
	if err != nil {
		return err
	}
	res.Errors = append(res.Errors, walkErrs...)
	if useLLM {
		printLLMUsage(env, res)
	}
	return o.write(env, res, f, start)
}

// config checks the flags and the positional DIR and builds the experiment's settings;
// useLLM says a replay calls the configured model.
func (o *experimentOpts) config(env *Env, args []string) (cfg experiment.Config, useLLM bool, err error) {
	if *o.dir == "" && len(args) == 1 {
		*o.dir, args = args[0], nil
	}
	if *o.dir == "" {
		return cfg, false, command.Usagef("--dir is required (see --help)")
	}
	if len(args) > 0 {
		return cfg, false, command.Usagef("unexpected arguments %q", args)
	}
	warning, err := o.pi.check()
	if err != nil {
		return cfg, false, err
	}
	warnTo(env.Stderr, warning)
	cfg = experiment.Config{
		Pi: o.pi.version, Counter: *o.counter, ContextWindow: *o.window, ReserveTokens: *o.reserve, Replay: *o.replay, Eval: *o.eval,
		Summarizers: splitList(*o.summarizers), SummaryTokens: *o.summaryTokens, Workers: *o.workers,
		Policies: splitList(*o.policies),
	}
	if cfg.Extractive, err = o.sf.extractive(); err != nil {
		return cfg, false, err
	}
	if *o.spendLimit < 0 {
		return cfg, false, command.Usagef("--llm-spend-limit %d: must not be negative", *o.spendLimit)
	}
	useLLM = *o.replay && slices.Contains(cfg.Summarizers, experiment.SummarizerLLM)
	if useLLM {
		o.sf.kind = "openai"
		logger := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		if cfg.LLM, err = o.sf.build(env.Getenv, logger, false); err != nil {
			return cfg, false, err
		}
	}
	for _, k := range splitList(*o.keeps) {
		n, err := strconv.Atoi(k)
		if err != nil {
			return cfg, false, command.Usagef("--keep-recent-tokens: %q is not a number", k)
		}
		cfg.KeepRecentTokens = append(cfg.KeepRecentTokens, n)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, false, experimentFlagError(err)
	}
	return cfg, useLLM, nil
}

// checkSpend prints the estimated calls and input tokens of an llm replay and refuses to
// start one over --llm-spend-limit.
func (o *experimentOpts) checkSpend(ctx context.Context, env *Env, files []string, cfg experiment.Config) error {
	est, err := experiment.EstimateLLM(ctx, *o.dir, files, cfg, o.sf.maxInput)
	if err != nil {
		return err
	}
	limit := "no limit"
	if *o.spendLimit > 0 {
		limit = fmt.Sprintf("limit %d", *o.spendLimit)
	}
	fmt.Fprintf(env.Stderr, "%s: --summarizer llm (%s at %s): about %d calls and %d input tokens, estimated by the same replay with the extractive summarizer standing in (--llm-spend-limit: %s)\n",
		env.ProgName(), o.sf.model, o.sf.baseURL, est.Calls, est.InputTokens, limit)
	if *o.spendLimit > 0 && est.InputTokens > *o.spendLimit {
		return command.Usagef("--llm-spend-limit %d: the replay would send about %d input tokens in about %d calls; raise the limit or replay less (--dir, --policies, --keep-recent-tokens)",
			*o.spendLimit, est.InputTokens, est.Calls)
	}
	return nil
}

// printLLMUsage prints the calls and tokens the endpoint reported over the whole replay.
func printLLMUsage(env *Env, res *experiment.Result) {
	var calls, in, cached, out int
	for _, t := range res.ReplayTotals {
		calls, in, cached, out = calls+t.LLMCalls, in+t.LLMInputTokens, cached+t.LLMCachedInputTokens, out+t.LLMOutputTokens
	}
	fmt.Fprintf(env.Stderr, "%s: llm: %d calls, %d input tokens (%d cached), %d output tokens\n", env.ProgName(), calls, in, cached, out)
}

// write prints the result in format f, on stdout or into --out.
func (o *experimentOpts) write(env *Env, res *experiment.Result, f string, start time.Time) error {
	var buf bytes.Buffer
	if err := experiment.Write(&buf, res, f); err != nil {
		return err
	}
	if *o.out == "" {
		_, err := env.Stdout.Write(buf.Bytes())
		return err
	}
	if err := os.WriteFile(*o.out, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", *o.out, err)
	}
	fmt.Fprintf(env.Stderr, "%s: %d sessions (%d skipped) in %s; wrote %s (%s)\n",
		env.ProgName(), res.Sessions, len(res.Errors), time.Since(start).Round(time.Millisecond), *o.out, f)
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
