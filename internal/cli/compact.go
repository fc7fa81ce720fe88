package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/compactor-dev/compactor/engine"
	"github.com/compactor-dev/compactor/internal/cli/command"
	"github.com/compactor-dev/compactor/outcome"
)

func init() {
	command.Register(&command.Command{Name: "compact", Summary: "compact one session file now (plan, summarize, append)", Run: runCompact})
	command.Register(&command.Command{Name: "branch-summary", Summary: "summarize the branch being left and append a branch_summary", Run: runBranchSummary})
}

func runCompact(ctx context.Context, env *Env) error {
	fs := command.NewFlagSet(env, "compact", "FILE [--json] [--dry-run] [--summarizer openai|extractive] [--model M] [--base-url U] [--policy P] [--keep-recent-tokens N] [--instructions TEXT]",
		`Compact one session now, by the same code path a job takes: plan the cut with the policy,
summarize the part that goes, check the guards (summary not empty, context smaller, cut
invariants, file unchanged since planning) and append one compaction entry that Pi loads.
Prints a short summary; --json prints the result document (docs/json-output.md), also when
the compaction fails. With --dry-run it plans and sizes the prompt and writes nothing (no
API key is needed).

Without an LLM configured (--base-url/--model or COMPACTOR_LLM_* variables) the
extractive summarizer is used: deterministic, no network. An OpenAI-compatible endpoint
that needs no key (a local Ollama) works without one.`)
	var sf summarizerFlags
	var ef engineFlags
	sf.register(fs.FlagSet)
	ef.register(fs.FlagSet, env.Getenv)
	dry := fs.Bool("dry-run", false, "plan only: print the plan and the prompt size, write nothing")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	instructions := instructionsFlag(fs.FlagSet, "")
	onlyOver := fs.Bool("only-over-budget", false, "skip the session unless it is over its model's budget")
	args, err := fs.ParseArgs(env.Args)
	if err != nil {
		return err
	}
	if err := checkInstructionsFlag(*instructions); err != nil {
		return err
	}
	file, err := command.OneFile(args)
	if err != nil {
		return err
	}
	eng, err := newEngine(env, &sf, &ef, *dry)
	if err != nil {
		return err
	}
	res, err := eng.Compact(ctx, engine.Request{File: file, Instructions: *instructions, DryRun: *dry, OnlyOverBudget: *onlyOver})
	return printResult(env, engine.KindCompact, file, res, err, *dry, *asJSON)
}

func runBranchSummary(ctx context.Context, env *Env) error {
	fs := command.NewFlagSet(env, "branch-summary", "FILE --to ID [--from ID] [--json] [--summarizer openai|extractive] [--instructions TEXT] [--dry-run]",
		`Summarize the branch being left when moving from --from (default: the leaf) to --to, as
Pi's /tree navigation does, and append the branch_summary entry where Pi would: at the
target, or at its parent when the target is a user message or a custom message. Prints a
short summary; --json prints the result document (docs/json-output.md).`)
	var sf summarizerFlags
	var ef engineFlags
	sf.register(fs.FlagSet)
	ef.register(fs.FlagSet, env.Getenv)
	to := fs.String("to", "", "the entry id navigated to (required)")
	from := fs.String("from", "", "the leaf being left (default: the file's leaf)")
	dry := fs.Bool("dry-run", false, "print what would be summarized and where, write nothing")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	instructions := instructionsFlag(fs.FlagSet, "")
	args, err := fs.ParseArgs(env.Args)
	if err != nil {
		return err
	}
	if err := checkInstructionsFlag(*instructions); err != nil {
		return err
	}
	file, err := command.OneFile(args)
	if err != nil {
		return err
	}
	if *to == "" {
		return command.Usagef("--to ID is required (the entry navigated to; see --help)")
	}
	eng, err := newEngine(env, &sf, &ef, *dry)
	if err != nil {
		return err
	}
	res, err := eng.BranchSummary(ctx, engine.Request{File: file, TargetID: *to, FromID: *from, Instructions: *instructions, DryRun: *dry})
	return printResult(env, engine.KindBranchSummary, file, res, err, *dry, *asJSON)
}

func newEngine(env *Env, sf *summarizerFlags, ef *engineFlags, dryRun bool) (*engine.Engine, error) {
	if err := ef.check(); err != nil {
		return nil, err
	}
	warnTo(env.Stderr, ef.piWarning)
	logger := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := sf.build(env.Getenv, logger, dryRun)
	if err != nil {
		return nil, err
	}
	eng, err := engine.New(s, ef.settings())
	if err != nil {
		return nil, &command.UsageError{Err: err}
	}
	return eng, nil
}

// failedResult is the JSON of a request that failed: the result document with outcome
// "failed" and the error, so a script reads one shape whatever happened.
type failedResult struct {
	Kind    string          `json:"kind"`
	Outcome outcome.Outcome `json:"outcome"`
	File    string          `json:"file"`
	Error   string          `json:"error"`
}

// printResult prints the result: a short summary, or the JSON document. A skip is a
// successful outcome (exit 0) with its reason; warnings go to stderr. A failure prints its
// JSON document with --json and returns the error (exit 1, or 2 for bad input).
func printResult(env *Env, kind, file string, res *engine.Result, err error, dry, asJSON bool) error {
	if err != nil {
		err = inputError(err)
		if asJSON {
			_ = command.WriteJSON(env.Stdout, failedResult{Kind: kind, Outcome: outcome.Failed, File: file, Error: err.Error()})
		}
		return err
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(env.Stderr, "warning: %s: %s\n", res.File, w)
	}
	if !dry {
		res.Plan = nil
	}
	if asJSON {
		return command.WriteJSON(env.Stdout, res)
	}
	writeResultText(env.Stdout, res)
	return nil
}

// writeResultText is the summary of a result for a person: what happened, in a line or
// three.
func writeResultText(w io.Writer, r *engine.Result) {
	what := "compaction"
	if r.Kind == engine.KindBranchSummary {
		what = "branch summary"
	}
	switch r.Outcome {
	case outcome.Done:
		if r.Found {
			fmt.Fprintf(w, "done: %s\n", r.Reason)
			return
		}
		fmt.Fprintf(w, "done: %s %s appended to %s (parent %s)\n", what, r.EntryID, r.File, r.ParentID)
		if r.Kind == engine.KindCompact {
			salvaged := ""
			if r.Salvaged {
				salvaged = "; the session grew meanwhile, so the summary was appended against its new leaf"
			}
			fmt.Fprintf(w, "  context %d -> %d tokens (%s); %d messages summarized, kept from %s%s\n",
				r.TokensBefore, r.TokensAfter, r.Counter, r.Summarized, r.FirstKeptEntryID, salvaged)
			if r.Trimmed != nil {
				fmt.Fprintf(w, "  %s\n", r.Trimmed)
			}
		} else {
			fmt.Fprintf(w, "  %d messages summarized\n", r.Summarized)
		}
		fmt.Fprintf(w, "  summarizer: %d calls, %d input (%d cached) + %d output tokens; %.1fs\n", r.LLMCalls, r.LLMInputTokens, r.LLMCachedInputTokens, r.LLMOutputTokens, float64(r.DurationMS)/1000)
		fmt.Fprintf(w, "note: %s\n", r.Note)
	case outcome.DryRun:
		fmt.Fprintf(w, "dry run: nothing written to %s\n", r.File)
		if r.Kind == engine.KindCompact {
			fmt.Fprintf(w, "  would summarize %d messages (a %d-character prompt) and keep from %s\n", r.Summarized, r.PromptChars, r.FirstKeptEntryID)
			state := "within budget"
			if r.OverBudget {
				state = "over budget"
			}
			fmt.Fprintf(w, "  context %d tokens (%s, %s at window %d); kept part %d tokens, plus the summary\n", r.TokensBefore, r.Counter, state, r.ContextWindow, r.TokensAfter)
			fmt.Fprintf(w, "  (compactor plan %s shows the cut; --json prints the whole plan)\n", r.File)
		} else {
			fmt.Fprintf(w, "  would summarize %d messages (a %d-character prompt) and append at %s\n", r.Summarized, r.PromptChars, r.ParentID)
		}
	case outcome.Skipped:
		fmt.Fprintf(w, "skipped: %s: %s\n", r.File, r.Reason)
	case outcome.Superseded:
		fmt.Fprintf(w, "superseded: %s %s written to %s but not on Pi's path: %s\n", what, r.EntryID, r.File, r.Reason)
	default:
		fmt.Fprintf(w, "%s: %s %s\n", r.Outcome, r.File, strings.TrimSpace(r.Reason))
	}
}
