// Package engine is compactor's one code path from a session file to an appended entry:
// read, plan with a cut-point policy, summarize, check the guards, append conditionally.
// `compactor compact` / `branch-summary` and the pipeline's workers all call it, so a job
// does exactly what the command does.
package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/configs"
	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/tokenize"
)

// Settings choose how sessions are planned and counted. Zero values mean the defaults.
type Settings struct {
	Policy           string // nearest (default), pi, turn
	Counter          string // tiktoken (default) or estimate
	KeepRecentTokens int    // default 20000 (Pi)
	ReserveTokens    int    // default 16384 (Pi)
	// ContextWindow overrides the model catalog's window for the session's model.
	ContextWindow int
	// BranchReserveTokens is Pi's branchSummary.reserveTokens (default 16384).
	BranchReserveTokens int
}

func (s Settings) withDefaults() Settings {
	if s.Policy == "" {
		s.Policy = cutpoint.PolicyNearest // the service default: see docs/policies.md
	}
	if s.Counter == "" {
		s.Counter = tokenize.CounterTiktoken
	}
	if s.KeepRecentTokens <= 0 {
		s.KeepRecentTokens = cutpoint.DefaultKeepRecentTokens
	}
	if s.ReserveTokens <= 0 {
		s.ReserveTokens = cutpoint.DefaultReserveTokens
	}
	if s.BranchReserveTokens <= 0 {
		s.BranchReserveTokens = cutpoint.DefaultReserveTokens
	}
	return s
}

// Validate names the first bad field.
func (s Settings) Validate() error {
	if _, err := cutpoint.ByName(s.withDefaults().Policy); err != nil {
		return fmt.Errorf("settings: policy: %w", err)
	}
	switch s.withDefaults().Counter {
	case tokenize.CounterTiktoken, tokenize.CounterEstimate:
	default:
		return fmt.Errorf("settings: counter: unknown counter %q (want tiktoken or estimate)", s.Counter)
	}
	if s.KeepRecentTokens < 0 || s.ReserveTokens < 0 || s.ContextWindow < 0 {
		return errors.New("settings: token settings must not be negative")
	}
	return nil
}

// Engine compacts and summarizes sessions. It is safe for concurrent use.
type Engine struct {
	Summarizer summarize.Summarizer
	Settings   Settings
	// Cache remembers token counts per entry across calls (optional).
	Cache *tokenize.Cache
}

// New returns an engine with a fresh count cache.
func New(s summarize.Summarizer, settings Settings) (*Engine, error) {
	if s == nil {
		return nil, errors.New("engine: no summarizer")
	}
	if err := settings.Validate(); err != nil {
		return nil, err
	}
	return &Engine{Summarizer: s, Settings: settings.withDefaults(), Cache: tokenize.NewCache(0)}, nil
}

// Request is one compaction or branch summary.
type Request struct {
	File string
	// Overrides of the engine's settings for this request ("" / 0: keep).
	Policy           string
	KeepRecentTokens int
	Instructions     string
	// OnlyOverBudget skips a session that is not over its model's budget (jobs from
	// sweeps); a manual `compactor compact` compacts whatever the budget says.
	OnlyOverBudget bool
	// DryRun plans and reports but writes nothing and calls no summarizer.
	DryRun bool

	// Branch summaries: the entry navigated to and the leaf left ("" = current leaf).
	TargetID, FromID string
}

// Outcome of a request.
const (
	OutcomeCompacted  = "compacted"
	OutcomeSummarized = "branch-summarized"
	OutcomeDryRun     = "dry-run"
	OutcomeSkipped    = "skipped"
)

// Result reports what happened; it never contains the summary text.
type Result struct {
	Outcome          string         `json:"outcome"`
	Reason           string         `json:"reason,omitempty"`
	File             string         `json:"file"`
	SessionID        string         `json:"sessionId"`
	EntryID          string         `json:"entryId,omitempty"`
	ParentID         string         `json:"parentId,omitempty"`
	FirstKeptEntryID string         `json:"firstKeptEntryId,omitempty"`
	TokensBefore     int            `json:"tokensBefore"`
	TokensAfter      int            `json:"tokensAfter"`
	Model            string         `json:"model"`
	ModelKnown       bool           `json:"modelKnown"`
	ContextWindow    int            `json:"contextWindow"`
	OverBudget       bool           `json:"overBudget"`
	Policy           string         `json:"policy,omitempty"`
	Counter          string         `json:"counter,omitempty"`
	Summarized       int            `json:"messagesSummarized"`
	PromptChars      int            `json:"promptChars,omitempty"`
	LLMInputTokens   int            `json:"llmInputTokens"`
	LLMOutputTokens  int            `json:"llmOutputTokens"`
	LLMCalls         int            `json:"llmCalls"`
	DurationMS       int64          `json:"durationMs"`
	Plan             *cutpoint.Plan `json:"plan,omitempty"`
}

// SkipError is a request that ends without writing for a reason that is not a failure
// (under budget, already compacted, not v3, no assistant message, nothing to summarize).
type SkipError struct{ Reason string }

func (e *SkipError) Error() string { return "skipped: " + e.Reason }

// Skipped reports whether err is a SkipError, and its reason.
func Skipped(err error) (string, bool) {
	var se *SkipError
	if errors.As(err, &se) {
		return se.Reason, true
	}
	return "", false
}

// GuardError is a compaction refused by a guard before anything was written.
type GuardError struct{ Reason string }

func (e *GuardError) Error() string { return "guard: " + e.Reason }

// Permanent marks guard failures as not worth retrying (the pipeline classifies on it).
func (e *GuardError) Permanent() bool { return true }

// cached counts through the engine's cache.
type cached struct {
	c     tokenize.Counter
	cache *tokenize.Cache
}

func (c cached) Name() string { return c.c.Name() }
func (c cached) Count(m *sessionio.Message) int {
	if c.cache == nil {
		return c.c.Count(m)
	}
	return c.cache.Message(c.c, m)
}

// sessionState is one read of a session with everything planning needs.
type sessionState struct {
	s       *sessionio.Session
	path    []*sessionio.Entry
	model   configs.Model
	known   bool
	counter cutpoint.Counter
	window  int
}

func (e *Engine) load(file string) (*sessionState, error) {
	s, err := sessionio.ReadFile(file)
	if err != nil {
		return nil, err
	}
	path, err := s.Path("")
	if err != nil {
		return nil, err
	}
	return e.state(s, path)
}

// state is load's planning state for a path (s may be nil: Assess reads only the tail).
func (e *Engine) state(s *sessionio.Session, path []*sessionio.Entry) (*sessionState, error) {
	st := &sessionState{s: s, path: path}
	// The session's model (the latest model_change or assistant message on the path) sets
	// the window and the encoding; the provider matters, as one id can have different
	// windows at different providers. An unknown model gets the catalog's default, and the
	// result says so (modelKnown false).
	st.model, st.known = configs.DefaultModel, false
	if c := sessionio.BuildContext(path); c.Model != nil {
		st.model.ID = c.Model.ModelID
		if m, ok := configs.LookupProvider(c.Model.Provider, c.Model.ModelID); ok {
			st.model, st.known = m, true
		}
	}
	st.window = st.model.ContextWindow
	if e.Settings.ContextWindow > 0 {
		st.window = e.Settings.ContextWindow
	}
	tc, err := tokenize.New(e.Settings.Counter, st.model.Encoding)
	if err != nil {
		return nil, err
	}
	st.counter = cached{c: tc, cache: e.Cache}
	return st, nil
}

func (e *Engine) plan(st *sessionState, req Request) (*cutpoint.Plan, cutpoint.Settings, error) {
	name := e.Settings.Policy
	if req.Policy != "" {
		name = req.Policy
	}
	pol, err := cutpoint.ByName(name)
	if err != nil {
		return nil, cutpoint.Settings{}, err
	}
	cs := cutpoint.Settings{KeepRecentTokens: e.Settings.KeepRecentTokens, ReserveTokens: e.Settings.ReserveTokens, ContextWindow: st.window}
	if req.KeepRecentTokens > 0 {
		cs.KeepRecentTokens = req.KeepRecentTokens
	}
	p, err := pol.Plan(st.path, cs, st.counter)
	if err != nil {
		return nil, cs, fmt.Errorf("plan: %w", err)
	}
	return p, cs, nil
}

// Compact plans, summarizes and appends one compaction entry, or says why not.
func (e *Engine) Compact(ctx context.Context, req Request) (*Result, error) {
	start := time.Now()
	st, err := e.load(req.File)
	if err != nil {
		return nil, err
	}
	res := &Result{File: req.File, SessionID: st.s.Header.ID, Model: st.model.ID, ModelKnown: st.known, ContextWindow: st.window, Counter: st.counter.Name()}
	finish := func(outcome string) (*Result, error) {
		res.Outcome = outcome
		res.DurationMS = time.Since(start).Milliseconds()
		return res, nil
	}
	skip := func(reason string) (*Result, error) {
		res.Reason = reason
		res.DurationMS = time.Since(start).Milliseconds()
		res.Outcome = OutcomeSkipped
		return res, &SkipError{Reason: reason}
	}
	if st.s.Version() != 3 {
		return skip(fmt.Sprintf("format v%d: compactor never appends to v1/v2 files (Pi would migrate and rewrite them)", st.s.Version()))
	}
	if !st.s.HasAssistant() {
		return skip("no assistant message yet (Pi would duplicate the file's content on its next write)")
	}
	p, cs, err := e.plan(st, req)
	if err != nil {
		return nil, err
	}
	res.Plan, res.Policy, res.TokensBefore = p, p.Policy, p.TokensBefore
	res.OverBudget = cutpoint.OverBudget(p.TokensBefore, cs)
	if !p.Prepared {
		return skip("already compacted: " + p.Reason)
	}
	if req.OnlyOverBudget && !res.OverBudget {
		return skip(fmt.Sprintf("under budget: %d tokens of %d (window %d - reserve %d)", p.TokensBefore, cs.ContextWindow-cs.ReserveTokens, cs.ContextWindow, cs.ReserveTokens))
	}
	if len(p.Summarize) == 0 && len(p.Prefix) == 0 {
		return skip(fmt.Sprintf("nothing to summarize: the whole context (%d tokens) fits in keepRecentTokens %d", p.TokensBefore, cs.KeepRecentTokens))
	}
	if v := cutpoint.CheckInvariants(st.path, p); len(v) > 0 {
		return nil, &GuardError{Reason: fmt.Sprintf("the %s plan breaks a cut invariant (%s); try --policy nearest", p.Policy, v[0])}
	}
	res.FirstKeptEntryID = p.FirstKeptEntryID
	res.Summarized = len(p.MessagesToSummarize) + len(p.TurnPrefix)
	res.PromptChars = len(summarize.SerializeConversation(p.Summarize)) + len(summarize.SerializeConversation(p.Prefix))
	if req.DryRun {
		res.TokensAfter = p.KeptTokens
		return finish(OutcomeDryRun)
	}
	prev := ""
	if p.PreviousSummary != nil {
		prev = *p.PreviousSummary
	}
	fo := sessionio.NewFileOps()
	for _, f := range p.FileOps.Read {
		fo.Read[f] = struct{}{}
	}
	for _, f := range p.FileOps.Written {
		fo.Written[f] = struct{}{}
	}
	for _, f := range p.FileOps.Edited {
		fo.Edited[f] = struct{}{}
	}
	out, err := summarize.CompactionSummary(ctx, e.Summarizer, summarize.CompactionInput{
		MessagesToSummarize: p.Summarize, TurnPrefix: p.Prefix, IsSplitTurn: p.IsSplitTurn,
		PreviousSummary: prev, CustomInstructions: req.Instructions, ReserveTokens: cs.ReserveTokens, FileOps: fo,
	})
	if err != nil {
		return nil, err
	}
	res.LLMInputTokens, res.LLMOutputTokens, res.LLMCalls = out.InputTokens, out.OutputTokens, out.Calls
	if strings.TrimSpace(out.Summary) == "" {
		return nil, &GuardError{Reason: "the summarizer returned an empty summary"}
	}
	summaryTokens := st.counter.Count(&sessionio.Message{Role: sessionio.RoleCompactionSummary, Summary: out.Summary})
	res.TokensAfter = summaryTokens + p.KeptTokens
	if res.TokensAfter >= p.TokensBefore {
		return nil, &GuardError{Reason: fmt.Sprintf("the compacted context would not be smaller (%d tokens after, %d before)", res.TokensAfter, p.TokensBefore)}
	}
	ap, err := sessionio.AppendCompaction(ctx, req.File, sessionio.ExpectOf(st.s), sessionio.NewCompaction{
		Summary: out.Summary, FirstKeptEntryID: p.FirstKeptEntryID, TokensBefore: p.TokensBefore,
		ReadFiles: out.ReadFiles, ModifiedFiles: out.ModifiedFiles,
	})
	if err != nil {
		return nil, err
	}
	res.EntryID, res.ParentID = ap.ID, ap.ParentID
	return finish(OutcomeCompacted)
}

// BranchSummary summarizes the branch being left for req.TargetID (from req.FromID or the
// current leaf) and appends the branch_summary entry where Pi's /tree navigation puts it:
// at the target, or at its parent when the target is a user message or a custom_message.
func (e *Engine) BranchSummary(ctx context.Context, req Request) (*Result, error) {
	start := time.Now()
	st, err := e.load(req.File)
	if err != nil {
		return nil, err
	}
	res := &Result{File: req.File, SessionID: st.s.Header.ID, Model: st.model.ID, ModelKnown: st.known, ContextWindow: st.window, Counter: tokenize.CounterEstimate}
	skip := func(reason string) (*Result, error) {
		res.Outcome, res.Reason = OutcomeSkipped, reason
		res.DurationMS = time.Since(start).Milliseconds()
		return res, &SkipError{Reason: reason}
	}
	if st.s.Version() != 3 {
		return skip(fmt.Sprintf("format v%d: compactor never appends to v1/v2 files", st.s.Version()))
	}
	if !st.s.HasAssistant() {
		return skip("no assistant message yet")
	}
	target := st.s.Get(req.TargetID)
	if req.TargetID == "" || target == nil {
		return nil, &GuardError{Reason: fmt.Sprintf("target entry %q is not in the file", req.TargetID)}
	}
	from := req.FromID
	if from == "" {
		from = st.s.LeafID()
	}
	if from == req.TargetID {
		return skip("the target is the leaf: nothing is left behind")
	}
	entries, _, err := summarize.CollectBranch(st.s, from, req.TargetID)
	if err != nil {
		return nil, &GuardError{Reason: err.Error()}
	}
	if len(entries) == 0 {
		return skip("nothing to summarize: the target is on the branch being left")
	}
	window := st.window
	if window <= 0 {
		window = 128000
	}
	msgs, fo, _ := summarize.PrepareBranch(entries, window-e.Settings.BranchReserveTokens, tokenize.Estimate())
	res.Summarized = len(msgs)
	res.PromptChars = len(summarize.SerializeConversation(msgs))
	parent := target.ID
	if target.IsMessage(sessionio.RoleUser) || target.Type == sessionio.TypeCustomMessage {
		parent = target.ParentID
	}
	res.ParentID = parent
	if req.DryRun {
		res.Outcome = OutcomeDryRun
		res.DurationMS = time.Since(start).Milliseconds()
		return res, nil
	}
	out, err := summarize.BranchSummary(ctx, e.Summarizer, msgs, fo, summarize.BranchOptions{CustomInstructions: req.Instructions})
	if err != nil {
		return nil, err
	}
	res.LLMInputTokens, res.LLMOutputTokens, res.LLMCalls = out.InputTokens, out.OutputTokens, out.Calls
	if strings.TrimSpace(out.Summary) == "" {
		return nil, &GuardError{Reason: "the summarizer returned an empty summary"}
	}
	ap, err := sessionio.AppendBranchSummary(ctx, req.File, sessionio.ExpectOf(st.s), sessionio.NewBranchSummary{
		ParentID: parent, Summary: out.Summary, ReadFiles: out.ReadFiles, ModifiedFiles: out.ModifiedFiles,
	})
	if err != nil {
		return nil, err
	}
	res.EntryID = ap.ID
	res.Outcome = OutcomeSummarized
	res.DurationMS = time.Since(start).Milliseconds()
	return res, nil
}

// Assessment is what a sweep needs to know about a session.
type Assessment struct {
	SessionID        string
	LeafID           string
	Version          int
	HasAssistant     bool
	LeafIsCompaction bool
	Tokens           int
	ContextWindow    int
	Threshold        int
	OverBudget       bool
	Model            string
	ModelKnown       bool
}

// Assess counts a session's current context and checks it against its model's budget.
//
// It reads the file from its end only as far as the context and the model go (a tail read):
// a long-lived session costs what its live context costs, not its history.
func (e *Engine) Assess(ctx context.Context, file string) (*Assessment, error) {
	t, err := sessionio.ReadTail(file, sessionio.NeedMessages|sessionio.NeedModel|sessionio.NeedContent)
	if err != nil {
		return nil, err
	}
	st, err := e.state(nil, t.Path)
	if err != nil {
		return nil, err
	}
	a := &Assessment{SessionID: t.Header.ID, LeafID: t.LeafID, Version: t.Version(),
		HasAssistant: t.HasAssistant, ContextWindow: st.window, Model: st.model.ID, ModelKnown: st.known}
	if n := len(st.path); n > 0 && st.path[n-1].Type == sessionio.TypeCompaction {
		a.LeafIsCompaction = true
	}
	a.Tokens = cutpoint.ContextTokens(st.path, st.counter)
	cs := cutpoint.Settings{ReserveTokens: e.Settings.ReserveTokens, ContextWindow: st.window}
	a.Threshold = st.window - cs.ReserveTokens
	a.OverBudget = !a.LeafIsCompaction && cutpoint.OverBudget(a.Tokens, cs)
	return a, nil
}
