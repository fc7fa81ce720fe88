package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/internal/engine"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/tokenize"
)

func init() {
	register(&Command{Name: "plan", Summary: "print where a compaction would cut a session (no LLM, no writes)", Run: runPlan})
}

// planFlags are the flags plan and inspect share.
type planFlags struct {
	policy, counter, leaf string
	keep, reserve, window int
}

func addPlanFlags(fs *flag.FlagSet) *planFlags {
	f := &planFlags{}
	fs.StringVar(&f.policy, "policy", cutpoint.PolicyNearest, "cut-point policy: "+strings.Join(cutpoint.Names(), "|")+" (pi = exactly what Pi would do)")
	fs.StringVar(&f.counter, "counter", tokenize.CounterTiktoken, "token counter: tiktoken|estimate (estimate = Pi's chars/4)")
	fs.IntVar(&f.keep, "keep-recent-tokens", cutpoint.DefaultKeepRecentTokens, "tokens to keep verbatim")
	fs.IntVar(&f.reserve, "reserve-tokens", cutpoint.DefaultReserveTokens, "tokens kept free in the context window")
	fs.IntVar(&f.window, "context-window", 0, "the model's context window (default: from the model catalog for the session's model)")
	fs.StringVar(&f.leaf, "leaf", "", "plan for this entry id instead of the current leaf (the last entry line)")
	return f
}

// planRun is a planned session as plan and inspect show it.
type planRun struct {
	*engine.Planned
}

func (f *planFlags) run(file string) (*planRun, error) {
	if _, err := cutpoint.ByName(f.policy); err != nil {
		return nil, usageErrorf("--policy: %v", err)
	}
	if _, err := tokenize.New(f.counter, ""); err != nil {
		return nil, usageErrorf("--counter: %v", err)
	}
	if f.keep < 0 || f.reserve < 0 || f.window < 0 {
		return nil, usageErrorf("--keep-recent-tokens, --reserve-tokens and --context-window must not be negative")
	}
	p, err := engine.Plan(file, engine.PlanRequest{Leaf: f.leaf, Policy: f.policy, Counter: f.counter,
		KeepRecentTokens: f.keep, ReserveTokens: f.reserve, ContextWindow: f.window})
	if err != nil {
		var ie *engine.InputError
		if errors.As(err, &ie) { // the only input Plan checks is the leaf
			return nil, usageErrorf("--leaf %s: %w", f.leaf, ie.Err)
		}
		var fe *sessionio.FileError
		if errors.As(err, &fe) {
			return nil, &UsageError{Err: err}
		}
		return nil, fmt.Errorf("plan %s: %w", file, err)
	}
	return &planRun{p}, nil
}

func (r *planRun) modelName() string {
	if r.ModelRef == nil {
		return "(none)"
	}
	if r.ModelRef.Provider != "" {
		return r.ModelRef.Provider + "/" + r.ModelRef.ModelID
	}
	return r.ModelRef.ModelID
}

func runPlan(ctx context.Context, env *Env) error {
	fs := newFlagSet(env, "plan", "compactor plan FILE [--json] [--policy pi|turn|nearest] [--counter tiktoken|estimate] [--keep-recent-tokens N] [--reserve-tokens N] [--context-window N] [--leaf ID]",
		`Print where a compaction of the session's current path would cut: the first kept entry, the
entries to summarize and the split turn's prefix, the context's tokens and whether it is over
budget. Nothing is written and no LLM is called. With --json the field names are those
pi-oracle cut prints; with --policy pi --counter estimate the result is Pi's own.`)
	asJSON := fs.Bool("json", false, "print the plan as JSON")
	f := addPlanFlags(fs)
	args, err := parseFlags(fs, env.Args)
	if err != nil {
		return err
	}
	if len(args) != 1 {
		return usageErrorf("expected one session FILE, got %d arguments (see --help)", len(args))
	}
	r, err := f.run(args[0])
	if err != nil {
		return err
	}
	if *asJSON {
		b, err := r.json()
		if err != nil {
			return err
		}
		_, err = env.Stdout.Write(append(b, '\n'))
		return err
	}
	fmt.Fprint(env.Stdout, r.summary())
	return nil
}

// json is the plan's JSON with the run's context appended: file, leafId, model,
// contextWindow, reserveTokens, keepRecentTokens, shouldCompact (= overBudget).
func (r *planRun) json() ([]byte, error) {
	pb, err := json.Marshal(r.Plan)
	if err != nil {
		return nil, fmt.Errorf("encode plan: %w", err)
	}
	var leaf *string
	if len(r.Path) > 0 {
		id := r.Path[len(r.Path)-1].ID
		leaf = &id
	}
	extra, err := json.Marshal(struct {
		File             string              `json:"file"`
		LeafID           *string             `json:"leafId"`
		PathLength       int                 `json:"pathLength"`
		Model            *sessionio.ModelRef `json:"model"`
		ModelKnown       bool                `json:"modelKnown"`
		Encoding         string              `json:"encoding"`
		ContextWindow    int                 `json:"contextWindow"`
		ReserveTokens    int                 `json:"reserveTokens"`
		KeepRecentTokens int                 `json:"keepRecentTokens"`
		ShouldCompact    bool                `json:"shouldCompact"`
		OverBudget       bool                `json:"overBudget"`
	}{r.File, leaf, len(r.Path), r.ModelRef, r.Model.Known, r.Model.Encoding(), r.Settings.ContextWindow,
		r.Settings.ReserveTokens, r.Settings.KeepRecentTokens, r.OverBudget(), r.OverBudget()})
	if err != nil {
		return nil, fmt.Errorf("encode plan: %w", err)
	}
	// Both are JSON objects: splice the extra fields in after the plan's.
	out := bytes.TrimSuffix(pb, []byte("}"))
	out = append(out, ',')
	out = append(out, extra[1:]...)
	var buf bytes.Buffer
	if err := json.Indent(&buf, out, "", "  "); err != nil {
		return nil, fmt.Errorf("encode plan: %w", err)
	}
	return buf.Bytes(), nil
}

func (r *planRun) summary() string {
	var b strings.Builder
	p := r.Plan
	known := ""
	if !r.Model.Known {
		known = ", not in the catalog: default"
	}
	fmt.Fprintf(&b, "file:     %s (%d entries on the current path)\n", r.File, len(r.Path))
	fmt.Fprintf(&b, "model:    %s (window %d%s)\n", r.modelName(), r.Settings.ContextWindow, known)
	state := "within budget"
	if r.OverBudget() {
		state = "OVER BUDGET"
	}
	fmt.Fprintf(&b, "context:  %d tokens (%s); threshold %d - %d = %d: %s\n", p.TokensBefore, p.Counter,
		r.Settings.ContextWindow, r.Settings.ReserveTokens, r.Settings.ContextWindow-r.Settings.ReserveTokens, state)
	fmt.Fprintf(&b, "policy:   %s, keep %d recent tokens\n", p.Policy, r.Settings.KeepRecentTokens)
	if !p.Prepared {
		fmt.Fprintf(&b, "plan:     nothing to plan: %s\n", p.Reason)
		return b.String()
	}
	split := ""
	if p.IsSplitTurn {
		split = fmt.Sprintf(", splits the turn starting at %s", p.TurnStartEntryID)
	}
	fmt.Fprintf(&b, "cut:      first kept %s (index %d)%s\n", p.FirstKeptEntryID, p.FirstKeptEntryIndex, split)
	fmt.Fprintf(&b, "summary:  %d entries (%d tokens); turn prefix %d entries (%d tokens); kept %d tokens\n",
		len(p.MessagesToSummarize), p.SummarizedTokens, len(p.TurnPrefix), p.TurnPrefixTokens, p.KeptTokens)
	fmt.Fprintf(&b, "files:    %d read, %d modified\n", len(p.FileOps.ReadFiles), len(p.FileOps.ModifiedFiles))
	return b.String()
}
