package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/compactor-dev/compactor/sessionio/picontext"
	"io"
	"strings"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/engine"
	"github.com/compactor-dev/compactor/internal/cli/command"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/tokenize"
)

func init() {
	command.Register(&command.Command{Name: "plan", Summary: "print where a compaction would cut a session (no LLM, no writes)", Run: runPlan})
}

// planFlags are the flags plan and inspect share.
type planFlags struct {
	fs                    *flag.FlagSet
	pi                    piFlags
	policy, counter, leaf string
	piSettings            string
	keep, reserve, window int
	// pathOnly: the caller needs the path and the plan (plan), not the whole session
	// (inspect draws the tree): the session is read from its end (engine.ReadPath).
	pathOnly bool
	// checkpoints (with pathOnly): where checkpoints are kept ("": none).
	checkpoints string
}

func addPlanFlags(fs *flag.FlagSet, getenv func(string) string) *planFlags {
	f := &planFlags{fs: fs}
	piVersionFlag(fs, &f.pi, getenv)
	piSettingsFlag(fs, &f.piSettings, getenv)
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

func (f *planFlags) run(file string, stderr io.Writer) (*planRun, error) {
	warning, err := f.pi.check()
	if err != nil {
		return nil, err
	}
	warnTo(stderr, warning)
	overrides, err := applyPiSettings(f.fs, f.piSettings, &f.keep, &f.reserve)
	if err != nil {
		return nil, err
	}
	if _, err := cutpoint.ByName(f.policy); err != nil {
		return nil, command.Usagef("--policy: %v", err)
	}
	if err := tokenize.CheckCounter(f.counter); err != nil {
		return nil, command.Usagef("--counter: %v", err)
	}
	if err := checkBudget(f.keep, f.reserve, f.window); err != nil {
		return nil, err
	}
	read := engine.ReadAll
	if f.pathOnly {
		read = engine.ReadPath
	}
	p, err := engine.Plan(file, engine.Settings{Pi: f.pi.version, Policy: f.policy, Counter: f.counter, KeepRecentTokens: f.keep,
		ReserveTokens: f.reserve, ContextWindow: f.window, ModelOverrides: overrides}, engine.LoadOptions{Leaf: f.leaf, Read: read, Checkpoints: checkpointsAt(f.checkpoints)})
	if err != nil {
		var ie *engine.InputError
		if errors.As(err, &ie) { // the only input Plan checks is the leaf
			return nil, command.Usagef("--leaf %s: %w", f.leaf, ie.Err)
		}
		if err = inputError(err); errors.As(err, new(*command.UsageError)) {
			return nil, err
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
	fs := command.NewFlagSet(env, "plan", "FILE [--json] [--policy pi|turn|nearest] [--counter tiktoken|estimate] [--keep-recent-tokens N] [--reserve-tokens N] [--context-window N] [--leaf ID]",
		`Print where a compaction of the session's current path would cut: the first kept entry, the
entries to summarize and the split turn's prefix, the context's tokens and whether it is over
budget. Nothing is written and no LLM is called. With --json the field names are those
Pi's harness prints for its own cut (interop/pi/pi cut; docs/json-output.md); with --policy
pi --counter estimate the result is Pi's own, for the Pi --pi-version names.

The context's size is Pi's measure: the usage the last answer reported (its whole prompt
and reply) plus the counter's count of the messages after it. The summarized, prefix and
kept figures are counted entry by entry, so they need not add up to it; and right after a
compaction the last answer still predates it, so the context keeps its old size (over
budget) until the model answers again, exactly as Pi sees it.`)
	asJSON := fs.Bool("json", false, "print the plan as JSON")
	f := addPlanFlags(fs.FlagSet, env.Getenv)
	f.pathOnly = true
	checkpointFlag(fs.FlagSet, &f.checkpoints, env)
	args, err := fs.ParseArgs(env.Args)
	if err != nil {
		return err
	}
	file, err := command.OneFile(args)
	if err != nil {
		return err
	}
	r, err := f.run(file, env.Stderr)
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
	cp := splitContext(r.Path, r.Release, r.Counter)
	if cp.usageFrom != "" {
		after := "; no message after it"
		if cp.nCounted > 0 {
			after = fmt.Sprintf(" + %d counted for the %s after it", cp.counted, command.Plural(cp.nCounted, "message", "messages"))
		}
		fmt.Fprintf(&b, "          = %d reported by the last answer (%s: its whole prompt and reply)%s\n", cp.usage, cp.usageFrom, after)
	}
	if cp.before != "" {
		why := ""
		if r.OverBudget() {
			why = ": that is why a just-compacted session still shows OVER BUDGET"
		}
		fmt.Fprintf(&b, "note:     that answer predates compaction %s, so this is the size from before it; Pi measures\n"+
			"          it the same way until the model answers again%s\n", cp.before, why)
	}
	if cp.stale != "" {
		fmt.Fprintf(&b, "          = %d counted for every message: Pi %s does not take the usage of the last answer (%s),\n"+
			"          which predates %s\n", cp.counted, r.Release, cp.stale, cp.staleAfter)
	}
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
	fmt.Fprintf(&b, "          (counted entry by entry; the context starts from the reported usage, so they need not add up to it)\n")
	fmt.Fprintf(&b, "files:    %d read, %d modified\n", len(p.FileOps.ReadFiles), len(p.FileOps.ModifiedFiles))
	return b.String()
}

// contextParts is the context's size as Pi's formula makes it (cutpoint.ContextTokens): the
// usage the last valid answer reported, plus the counter's count of the messages after it.
// Under Pi 1.x a usage measured before the path's latest context edit or compaction is not
// taken: then everything is counted (usage 0).
type contextParts struct {
	usage     int    // reported by the last answer (0 when there is none)
	usageFrom string // that answer's entry id ("" when there is none)
	counted   int    // counted for the messages after it
	nCounted  int
	// before is the latest compaction on the path that comes after the answer: its usage
	// measures the context from before that compaction.
	before string
	// Pi 1.x: stale is the last answer whose usage Pi did not take, because entry
	// staleAfter (a context edit or a compaction) came after it; everything is counted.
	stale, staleAfter string
}

func splitContext(path []*sessionio.Entry, d pi.Release, c tokenize.Counter) contextParts {
	var cp contextParts
	ctx := picontext.Build(path, d)
	last := -1
	for i := len(ctx.Messages) - 1; i >= 0; i-- {
		if m := ctx.Messages[i]; m != nil && m.HasValidUsage() && (!d.Has(pi.ZeroUsageSkipped) || m.Usage.ContextTokens() > 0) {
			last = i
			break
		}
	}
	if d.Has(pi.ContextEdits) && last >= 0 {
		at, invalidated := -1, -1
		for i, e := range path {
			if e.ID == ctx.EntryIDs[last] {
				at = i
			}
			if e.Type == sessionio.TypeContextEdit || e.Type == sessionio.TypeCompaction {
				invalidated = i
			}
		}
		if at <= invalidated {
			cp.stale, cp.staleAfter = ctx.EntryIDs[last], path[invalidated].ID
			cp.counted = cutpoint.ContextTokens(path, d, c)
			cp.nCounted = len(ctx.Messages)
			return cp
		}
	}
	if last >= 0 {
		cp.usage = int(ctx.Messages[last].Usage.ContextTokens())
		cp.usageFrom = ctx.EntryIDs[last]
	}
	for _, m := range ctx.Messages[last+1:] {
		if m != nil {
			cp.counted += c.Count(m)
			cp.nCounted++
		}
	}
	if cp.usageFrom == "" {
		return cp
	}
	seen := false
	for _, e := range path {
		if e.ID == cp.usageFrom {
			seen = true
		} else if seen && e.Type == sessionio.TypeCompaction {
			cp.before = e.ID
		}
	}
	return cp
}
