package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/compactor-dev/compactor/internal/engine"
	"github.com/compactor-dev/compactor/sessionio"
)

func init() {
	register(&Command{Name: "compact", Summary: "compact one session file now (plan, summarize, append)", Run: runCompact})
	register(&Command{Name: "branch-summary", Summary: "summarize the branch being left and append a branch_summary", Run: runBranchSummary})
}

func runCompact(ctx context.Context, env *Env) error {
	fs := newFlagSet(env, "compact", "compactor compact FILE [--dry-run] [--summarizer openai|extractive] [--model M] [--base-url U] [--policy P] [--keep-recent-tokens N] [--instructions TEXT]",
		`Compact one session now, by the same code path a job takes: plan the cut with the policy,
summarize the part that goes, check the guards (summary not empty, context smaller, cut
invariants, file unchanged since planning) and append one compaction entry that Pi loads.
Prints a JSON result. With --dry-run it prints the plan and the prompt size and writes nothing.

Without an LLM configured (--base-url/--model or COMPACTOR_LLM_* variables) the
extractive summarizer is used: deterministic, no network.`)
	var sf summarizerFlags
	var ef engineFlags
	sf.register(fs)
	ef.register(fs)
	dry := fs.Bool("dry-run", false, "plan only: print the plan and the prompt size, write nothing")
	instructions := fs.String("instructions", "", "custom instructions appended to the prompt as an additional focus")
	onlyOver := fs.Bool("only-over-budget", false, "skip the session unless it is over its model's budget")
	args, err := parseFlags(fs, env.Args)
	if err != nil {
		return err
	}
	if len(args) != 1 {
		return usageErrorf("expected one session FILE, got %d arguments (see --help)", len(args))
	}
	eng, err := newEngine(env, &sf, &ef)
	if err != nil {
		return err
	}
	res, err := eng.Compact(ctx, engine.Request{File: args[0], Instructions: *instructions, DryRun: *dry, OnlyOverBudget: *onlyOver})
	return printResult(env, res, err, *dry)
}

func runBranchSummary(ctx context.Context, env *Env) error {
	fs := newFlagSet(env, "branch-summary", "compactor branch-summary FILE --to ID [--from ID] [--summarizer openai|extractive] [--instructions TEXT] [--dry-run]",
		`Summarize the branch being left when moving from --from (default: the leaf) to --to, as
Pi's /tree navigation does, and append the branch_summary entry where Pi would: at the
target, or at its parent when the target is a user message or a custom message.`)
	var sf summarizerFlags
	var ef engineFlags
	sf.register(fs)
	ef.register(fs)
	to := fs.String("to", "", "the entry id navigated to (required)")
	from := fs.String("from", "", "the leaf being left (default: the file's leaf)")
	dry := fs.Bool("dry-run", false, "print what would be summarized and where, write nothing")
	instructions := fs.String("instructions", "", "custom instructions appended to the prompt as an additional focus")
	args, err := parseFlags(fs, env.Args)
	if err != nil {
		return err
	}
	if len(args) != 1 {
		return usageErrorf("expected one session FILE, got %d arguments (see --help)", len(args))
	}
	if *to == "" {
		return usageErrorf("--to ID is required")
	}
	eng, err := newEngine(env, &sf, &ef)
	if err != nil {
		return err
	}
	res, err := eng.BranchSummary(ctx, engine.Request{File: args[0], TargetID: *to, FromID: *from, Instructions: *instructions, DryRun: *dry})
	return printResult(env, res, err, *dry)
}

func newEngine(env *Env, sf *summarizerFlags, ef *engineFlags) (*engine.Engine, error) {
	logger := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := sf.build(env.Getenv, logger)
	if err != nil {
		return nil, err
	}
	eng, err := engine.New(s, ef.settings())
	if err != nil {
		return nil, &UsageError{Err: err}
	}
	return eng, nil
}

// printResult prints the JSON result; a skip is a successful outcome (exit 0) with its
// reason; bad input exits 2; anything else exits 1. Warnings go to stderr.
func printResult(env *Env, res *engine.Result, err error, keepPlan bool) error {
	if err != nil {
		var fe *sessionio.FileError
		var ie *engine.InputError
		switch {
		case errors.As(err, &ie):
			return &UsageError{Err: err}
		case errors.As(err, &fe) && !errors.Is(err, sessionio.ErrChanged) && !errors.Is(err, os.ErrPermission):
			return &UsageError{Err: err}
		}
		return err
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(env.Stderr, "warning: %s: %s\n", res.File, w)
	}
	if !keepPlan {
		res.Plan = nil
	}
	enc := json.NewEncoder(env.Stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}
