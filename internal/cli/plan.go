package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"

	"github.com/compactor-dev/compactor/configs"
	"github.com/compactor-dev/compactor/cutpoint"
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
	// tail: the caller needs only the path (plan), not the whole session (inspect).
	tail bool
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

// planRun is everything a plan needs and produces.
type planRun struct {
	file    string
	session *sessionio.Session // nil after a tail read

	path     []*sessionio.Entry
	model    *sessionio.ModelRef
	catalog  configs.Model
	known    bool
	settings cutpoint.Settings
	counter  cutpoint.Counter
	plan     *cutpoint.Plan
}

func (f *planFlags) run(file string) (*planRun, error) {
	pol, err := cutpoint.ByName(f.policy)
	if err != nil {
		return nil, usageErrorf("--policy: %v", err)
	}
	if f.keep < 0 || f.reserve < 0 || f.window < 0 {
		return nil, usageErrorf("--keep-recent-tokens, --reserve-tokens and --context-window must not be negative")
	}
	tiktoken := strings.EqualFold(strings.TrimSpace(f.counter), tokenize.CounterTiktoken)
	if tiktoken {
		tokenize.Preload(tokenize.O200KBase) // most models' encoding: loads while the file is read
	}
	r := &planRun{file: file}
	wholePath := func() error { return nil }
	if f.tail && f.leaf == "" {
		// Only the path matters, and the content only from the last compaction's first kept
		// entry on: a tail read decodes no more, and keeps no message bytes (plan prints ids
		// and counts, not messages). The rest of the path (pathLength and the path indices
		// need it: validated and walked, not decoded) is read while the context is counted.
		t, err := sessionio.ReadTail(file, sessionio.NeedMessages|sessionio.NeedModel|sessionio.NeedContent|sessionio.LeaveMessagesOnDisk)
		if err != nil {
			return nil, &UsageError{Err: err}
		}
		r.path = t.Path
		done := make(chan error, 1)
		go func() { done <- t.Extend(sessionio.NeedRoot) }()
		wholePath = func() error {
			if err := <-done; err != nil {
				return &UsageError{Err: err}
			}
			r.path = t.Path
			return nil
		}
	} else {
		s, err := sessionio.ReadFile(file)
		if err != nil {
			return nil, &UsageError{Err: err}
		}
		path, err := s.Path(f.leaf)
		if err != nil {
			return nil, &UsageError{Err: fmt.Errorf("%s: --leaf %s: %w", file, f.leaf, err)}
		}
		r.session, r.path = s, path
	}
	path := r.path
	r.model = sessionio.BuildContext(path).Model
	r.catalog, r.known = configs.DefaultModel, false
	if r.model != nil {
		if m, ok := configs.LookupProvider(r.model.Provider, r.model.ModelID); ok {
			r.catalog, r.known = m, true
		} else {
			r.catalog, _ = configs.LookupOr(r.model.ModelID, configs.DefaultModel)
		}
	}
	counter, err := tokenize.New(f.counter, r.catalog.Encoding)
	if err != nil {
		_ = wholePath()
		return nil, usageErrorf("--counter: %v", err)
	}
	// Every message from the context's start on is weighed, most more than once: count each
	// once, on every core, before the policy asks.
	memo := tokenize.NewMemo(counter)
	var msgs []*sessionio.Message
	for _, e := range path[sessionio.ContextStart(path):] {
		if e.Message != nil {
			msgs = append(msgs, e.Message)
		}
	}
	memo.Warm(msgs, 0)
	r.counter = memo
	if err := wholePath(); err != nil {
		return nil, err
	}
	path = r.path
	r.settings = cutpoint.Settings{KeepRecentTokens: f.keep, ReserveTokens: f.reserve, ContextWindow: f.window}
	if r.settings.ContextWindow == 0 {
		r.settings.ContextWindow = r.catalog.ContextWindow
	}
	r.plan, err = pol.Plan(path, r.settings, r.counter)
	if err != nil {
		return nil, fmt.Errorf("plan %s: %w", file, err)
	}
	return r, nil
}

func (r *planRun) overBudget() bool { return cutpoint.OverBudget(r.plan.TokensBefore, r.settings) }

func (r *planRun) modelName() string {
	if r.model == nil {
		return "(none)"
	}
	if r.model.Provider != "" {
		return r.model.Provider + "/" + r.model.ModelID
	}
	return r.model.ModelID
}

func runPlan(ctx context.Context, env *Env) error {
	fs := newFlagSet(env, "plan", "compactor plan FILE [--json] [--policy pi|turn|nearest] [--counter tiktoken|estimate] [--keep-recent-tokens N] [--reserve-tokens N] [--context-window N] [--leaf ID]",
		`Print where a compaction of the session's current path would cut: the first kept entry, the
entries to summarize and the split turn's prefix, the context's tokens and whether it is over
budget. Nothing is written and no LLM is called. With --json the field names are those
pi-oracle cut prints; with --policy pi --counter estimate the result is Pi's own.`)
	asJSON := fs.Bool("json", false, "print the plan as JSON")
	f := addPlanFlags(fs)
	f.tail = true
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
	pb, err := json.Marshal(r.plan)
	if err != nil {
		return nil, fmt.Errorf("encode plan: %w", err)
	}
	var leaf *string
	if len(r.path) > 0 {
		id := r.path[len(r.path)-1].ID
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
	}{r.file, leaf, len(r.path), r.model, r.known, r.catalog.Encoding, r.settings.ContextWindow,
		r.settings.ReserveTokens, r.settings.KeepRecentTokens, r.overBudget(), r.overBudget()})
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
	p := r.plan
	known := ""
	if !r.known {
		known = ", not in the catalog: default"
	}
	fmt.Fprintf(&b, "file:     %s (%d entries on the current path)\n", r.file, len(r.path))
	fmt.Fprintf(&b, "model:    %s (window %d%s)\n", r.modelName(), r.settings.ContextWindow, known)
	state := "within budget"
	if r.overBudget() {
		state = "OVER BUDGET"
	}
	fmt.Fprintf(&b, "context:  %d tokens (%s); threshold %d - %d = %d: %s\n", p.TokensBefore, p.Counter,
		r.settings.ContextWindow, r.settings.ReserveTokens, r.settings.ContextWindow-r.settings.ReserveTokens, state)
	fmt.Fprintf(&b, "policy:   %s, keep %d recent tokens\n", p.Policy, r.settings.KeepRecentTokens)
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
