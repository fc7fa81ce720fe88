// Package engine is compactor's one code path from a session file to an appended entry:
// read, plan with a cut-point policy, summarize, check the guards, append conditionally.
// `compactor compact` / `branch-summary` and the pipeline's workers all call it, so a job
// does exactly what the command does. Planning alone has the same entry points: Load
// (read, resolve the model with configs.Resolve, pick the counter) and Plan, used by
// `compactor plan`, `inspect` and the experiments.
package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/tokenize"
)

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

// Request is one compaction, branch summary or preparation.
type Request struct {
	File string
	// Settings override the engine's for this request: the fields set here win (see
	// Settings for the rule); jobs set Policy, Counter and KeepRecentTokens.
	Settings     Settings
	Instructions string
	// ExpectLeafID is the leaf the requester saw (jobs carry it). If the file has moved on
	// and already holds the entry this request asked for, made from that leaf (a job
	// redelivered after its append, or Pi compacting the same state), the request is done
	// with that entry. A branch summary leaves this leaf unless FromID says otherwise.
	ExpectLeafID string
	// OnlyOverBudget skips a session that is not over its model's budget (jobs from
	// sweeps); a manual `compactor compact` compacts whatever the budget says.
	OnlyOverBudget bool
	// DryRun plans and reports but writes nothing and calls no summarizer.
	DryRun bool

	// Branch summaries: the entry navigated to and the leaf left ("" = current leaf).
	TargetID, FromID string
}

// Outcomes: how a request ended. One vocabulary for the command line, the job events and
// the run report (docs/json-output.md): a job's event carries the same word as the
// command's result. Result.Kind says what was asked (compact or branch_summary).
const (
	// OutcomeDone: the entry was appended (or found, appended by an earlier delivery of
	// the same request).
	OutcomeDone = "done"
	// OutcomeSkipped: nothing was written, for a reason that is not a failure (under
	// budget, already compacted, a turn in progress, a v1/v2 file...). Reason says which.
	OutcomeSkipped = "skipped"
	// OutcomeSuperseded: the entry was written, but a live agent's lines landed around it,
	// so it is on a side branch and Pi does not load it (see sessionio's append). Nothing
	// was lost; the session will be compacted again when it is idle.
	OutcomeSuperseded = "superseded"
	// OutcomeDryRun: planned and reported, nothing written, no summarizer called.
	OutcomeDryRun = "dry-run"
	// OutcomeFailed is never in a Result the engine returns (a failure is an error); the
	// command line and the job events report a failed request with it.
	OutcomeFailed = "failed"
)

// Request kinds, as jobs name them.
const (
	KindCompact       = "compact"
	KindBranchSummary = "branch_summary"
	KindPrepare       = "prepare"
)

// ReloadNote is told with every compaction and branch summary: a running Pi never re-reads
// its file, so it must reload the session to use the new entry.
const ReloadNote = "a running Pi keeps its leaf in memory: reload the session (RPC switch_session, /resume) before its next prompt, or its next entry leaves this one on a side branch"

// Result reports what happened; it never contains the summary text.
type Result struct {
	Kind             string `json:"kind"`
	Outcome          string `json:"outcome"`
	Reason           string `json:"reason,omitempty"`
	File             string `json:"file"`
	SessionID        string `json:"sessionId"`
	EntryID          string `json:"entryId,omitempty"`
	ParentID         string `json:"parentId,omitempty"`
	FirstKeptEntryID string `json:"firstKeptEntryId,omitempty"`
	TokensBefore     int    `json:"tokensBefore"`
	TokensAfter      int    `json:"tokensAfter"`
	Model            string `json:"model"`
	ModelKnown       bool   `json:"modelKnown"`
	ContextWindow    int    `json:"contextWindow"`
	OverBudget       bool   `json:"overBudget"`
	Policy           string `json:"policy,omitempty"`
	Counter          string `json:"counter,omitempty"`
	Summarized       int    `json:"messagesSummarized"`
	PromptChars      int    `json:"promptChars,omitempty"`
	LLMInputTokens   int    `json:"llmInputTokens"`
	// LLMCachedInputTokens is the part of LLMInputTokens the endpoint served from its
	// prompt cache (where it reports it).
	LLMCachedInputTokens int   `json:"llmCachedInputTokens"`
	LLMOutputTokens      int   `json:"llmOutputTokens"`
	LLMCalls             int   `json:"llmCalls"`
	DurationMS           int64 `json:"durationMs"`
	// Salvaged: the file grew while the summary was being written, by entries after the
	// planned leaf only; the summary (which covers entries before the cut) was appended
	// against the new leaf, with tokensBefore counted again.
	Salvaged bool `json:"salvaged,omitempty"`
	// Found: the entry was already in the file (a redelivered job); nothing was written.
	Found bool `json:"found,omitempty"`
	// Intruders and Restores: see sessionio.Appended (superseded outcomes).
	Intruders []string       `json:"intruders,omitempty"`
	Restores  []string       `json:"restores,omitempty"`
	Note      string         `json:"note,omitempty"`
	Warnings  []string       `json:"warnings,omitempty"`
	Plan      *cutpoint.Plan `json:"plan,omitempty"`

	// Trimmed says what was left out to end under the budget (fit.go); nil when nothing.
	Trimmed *Trimmed `json:"trimmed,omitempty"`
}

// InputError is a request that names something the file does not have (an entry id):
// bad input, not a failure of compactor (exit code 2 on the command line).
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// Permanent: the same request can never succeed.
func (e *InputError) Permanent() bool { return true }

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

// settings are the engine's settings with the request's laid over them.
func (e *Engine) settings(req Request) Settings { return req.Settings.over(e.Settings).withDefaults() }

// load reads a request's file with its settings. The session's model (the latest
// model_change or assistant message on the path) sets the window and the encoding
// (configs.Resolve). An unknown model gets the catalog's default, and the result says so
// (modelKnown false); results name the model by the id the session uses.
func (e *Engine) load(file string, s Settings) (*Source, error) {
	return Load(file, s, LoadOptions{Cache: e.Cache})
}

// plan plans a loaded session with s's policy and token settings in its model's window.
func plan(src *Source, s Settings) (*cutpoint.Plan, cutpoint.Settings, error) {
	cs := src.Settings(s.KeepRecentTokens, s.ReserveTokens)
	p, err := planPath(src.Path, s.Policy, cs, src.Counter)
	return p, cs, err
}

// live checks what the file says about a running agent (design §9, docs/live-agents.md):
// while a turn is in progress, or a line is being written, Pi will append again from its
// in-memory leaf and anything appended now ends on a side branch, so the request is
// skipped. A file left like that for AbandonedAfter is taken as abandoned: it is compacted,
// and an incomplete last line is only warned about (Pi skips it; a newline is written
// before the new entry). --force does not override this.
func live(src *Source, s Settings) (skip string, warnings []string) {
	act := src.Session.ActivityOn(src.Path)
	age := time.Since(src.ModTime)
	recent := age < s.AbandonedAfter
	ago := age.Round(time.Second)
	if act.TornLine > 0 {
		if recent {
			return fmt.Sprintf("write in progress: line %d is incomplete (modified %s ago; a file left like this for %s is treated as abandoned)", act.TornLine, ago, s.AbandonedAfter), nil
		}
		warnings = append(warnings, fmt.Sprintf("line %d is incomplete and ignored, as Pi ignores it; a newline is written before the new entry", act.TornLine))
	}
	if act.TurnInProgress {
		if recent {
			return fmt.Sprintf("turn in progress: %s (modified %s ago; a session left mid-turn for %s is treated as abandoned)", act.Reason, ago, s.AbandonedAfter), nil
		}
		warnings = append(warnings, fmt.Sprintf("the session was left mid-turn %s ago (%s); compacting it as abandoned", ago, act.Reason))
	}
	if act.Retrying && age < piRetryWindow {
		return fmt.Sprintf("turn in progress: %s (modified %s ago; Pi's retries end within %s)", act.Reason, ago, piRetryWindow), nil
	}
	return "", warnings
}

// piRetryWindow bounds Pi's automatic retries of an errored answer: 3 attempts by default,
// 2 s doubling between them, each a model request.
const piRetryWindow = 2 * time.Minute

// findCompaction looks for the compaction a request asked for, already in the file: one
// whose parent is the leaf the requester saw, written after it. It returns nil when the
// request carries no leaf, the leaf is still current, or there is none.
func findCompaction(s *sessionio.Session, expectLeaf string) *sessionio.Entry {
	return findAfter(s, expectLeaf, func(e *sessionio.Entry) bool {
		return e.Type == sessionio.TypeCompaction && e.ParentID == expectLeaf
	})
}

// findAfter returns the last entry after expectLeaf's line (in file order) that matches.
func findAfter(s *sessionio.Session, expectLeaf string, match func(*sessionio.Entry) bool) *sessionio.Entry {
	if expectLeaf == "" || expectLeaf == s.LeafID() {
		return nil
	}
	from := s.Get(expectLeaf)
	if from == nil {
		return nil
	}
	var found *sessionio.Entry
	for _, e := range s.Entries {
		if e.Line > from.Line && match(e) {
			found = e
		}
	}
	return found
}

// onPath reports whether the entry with id is on path.
func onPath(path []*sessionio.Entry, id string) bool {
	for _, e := range path {
		if e.ID == id {
			return true
		}
	}
	return false
}

// extends reports whether newPath is oldPath followed by entries that are not compactions:
// the session only grew on the same branch, and nobody compacted it meanwhile. Ids never
// change in an append-only file, so comparing ids compares entries.
func extends(oldPath, newPath []*sessionio.Entry) (ok bool, why string) {
	if len(newPath) < len(oldPath) {
		return false, "the current path is shorter than the planned one (the branch changed)"
	}
	for i, e := range oldPath {
		if newPath[i].ID != e.ID {
			return false, fmt.Sprintf("the current path leaves the planned one at entry %s (the branch changed)", e.ID)
		}
	}
	for _, e := range newPath[len(oldPath):] {
		if e.Type == sessionio.TypeCompaction {
			return false, fmt.Sprintf("the session was compacted meanwhile (entry %s)", e.ID)
		}
	}
	return true, ""
}

// Compact plans, summarizes and appends one compaction entry, or says why not.
func (e *Engine) Compact(ctx context.Context, req Request) (*Result, error) {
	start := time.Now()
	cfg := e.settings(req)
	src, err := e.load(req.File, cfg)
	if err != nil {
		return nil, err
	}
	res := &Result{Kind: KindCompact, File: req.File, SessionID: src.Session.Header.ID, Model: src.Model.ModelID, ModelKnown: src.Model.Known, ContextWindow: src.Model.ContextWindow, Counter: src.Counter.Name()}
	finish := func(outcome string) (*Result, error) {
		res.Outcome = outcome
		res.DurationMS = time.Since(start).Milliseconds()
		return res, nil
	}
	skip := func(reason string) (*Result, error) {
		res.Reason = reason
		res.DurationMS = time.Since(start).Milliseconds()
		res.Outcome = OutcomeSkipped
		return res, nil // a skip is an outcome, not a failure
	}
	if src.Session.Version() != 3 {
		return skip(fmt.Sprintf("format v%d: compactor never appends to v1/v2 files (Pi would migrate and rewrite them)", src.Session.Version()))
	}
	if !src.Session.HasAssistant() {
		return skip("no assistant message yet (Pi would duplicate the file's content on its next write)")
	}
	if c := findCompaction(src.Session, req.ExpectLeafID); c != nil {
		res.EntryID, res.ParentID, res.FirstKeptEntryID, res.TokensBefore = c.ID, c.ParentID, c.FirstKeptEntryID, int(c.TokensBefore)
		res.Found = true
		res.Reason = fmt.Sprintf("compaction %s of leaf %s is already in the file (this request was done before)", c.ID, req.ExpectLeafID)
		if !onPath(src.Path, c.ID) {
			return finish(OutcomeSuperseded)
		}
		return finish(OutcomeDone)
	}
	reason, warnings := live(src, cfg)
	res.Warnings = warnings
	if reason != "" && !req.DryRun {
		return skip(reason)
	}
	if reason != "" {
		res.Warnings = append(res.Warnings, "not compactable now: "+reason)
	}
	p, cs, err := plan(src, cfg)
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
	if v := cutpoint.CheckInvariants(src.Path, p); len(v) > 0 {
		return nil, &GuardError{Reason: fmt.Sprintf("the %s plan breaks a cut invariant (%s); try --policy nearest", p.Policy, v[0])}
	}
	res.FirstKeptEntryID = p.FirstKeptEntryID
	res.Summarized = len(p.MessagesToSummarize) + len(p.TurnPrefix)
	res.PromptChars = len(summarize.SerializeConversation(p.Summarize)) + len(summarize.SerializeConversation(p.Prefix))
	if req.DryRun {
		res.TokensAfter = p.KeptTokens
		return finish(OutcomeDryRun)
	}
	// Pay for a summary only if it can be written.
	if err := sessionio.CheckWritable(req.File); err != nil {
		return nil, err
	}
	prev := ""
	if p.PreviousSummary != nil {
		prev = *p.PreviousSummary
	}
	in := summarize.CompactionInput{
		MessagesToSummarize: p.Summarize, TurnPrefix: p.Prefix, IsSplitTurn: p.IsSplitTurn,
		PreviousSummary: prev, CustomInstructions: req.Instructions, ReserveTokens: cs.ReserveTokens, FileOps: p.Ops(),
	}
	out, err := summarize.CompactionSummary(ctx, e.Summarizer, in)
	if err != nil {
		return nil, err
	}
	// Never leave the session over budget (fit.go): it would compact again on its next turn.
	if p, out, res.Trimmed, err = e.fit(ctx, src, cs, p, in, out); err != nil {
		return nil, err
	}
	res.Plan, res.FirstKeptEntryID, res.Summarized = p, p.FirstKeptEntryID, len(p.MessagesToSummarize)+len(p.TurnPrefix)
	res.LLMInputTokens, res.LLMCachedInputTokens, res.LLMOutputTokens, res.LLMCalls = out.InputTokens, out.CachedInputTokens, out.OutputTokens, out.Calls
	if strings.TrimSpace(out.Summary) == "" {
		return nil, &GuardError{Reason: "the summarizer returned an empty summary"}
	}
	summaryTokens := src.Counter.Count(&sessionio.Message{Role: sessionio.RoleCompactionSummary, Summary: out.Summary})
	nc := sessionio.NewCompaction{
		Summary: out.Summary, FirstKeptEntryID: p.FirstKeptEntryID, TokensBefore: p.TokensBefore,
		ReadFiles: out.ReadFiles, ModifiedFiles: out.ModifiedFiles,
	}
	for attempt := 1; ; attempt++ {
		res.TokensAfter = summaryTokens + p.KeptTokens
		if res.TokensAfter >= p.TokensBefore {
			return nil, &GuardError{Reason: fmt.Sprintf("the compacted context would not be smaller (%d tokens after, %d before)", res.TokensAfter, p.TokensBefore)}
		}
		ap, err := sessionio.AppendCompaction(ctx, req.File, sessionio.ExpectOf(src.Session), nc)
		if err == nil {
			res.EntryID, res.ParentID = ap.ID, ap.ParentID
			res.Intruders, res.Restores = ap.Intruders, ap.Restores
			if ap.Superseded() {
				res.Reason = supersededReason(ap)
				return finish(OutcomeSuperseded)
			}
			res.Note = ReloadNote
			return finish(OutcomeDone)
		}
		if !errors.Is(err, sessionio.ErrChanged) {
			return nil, err
		}
		// The agent wrote while the summary was being made. The summary covers entries
		// before the cut; if the session only grew after the planned leaf, it still holds.
		if attempt > maxSalvage {
			return skip(fmt.Sprintf("busy: the session changed %d times while its summary was written; it is compacted when idle", attempt))
		}
		src2, p2, why, err := e.salvage(src, cfg, p)
		if err != nil {
			return nil, err
		}
		if why != "" {
			return skip("busy: " + why)
		}
		src, p = src2, p2
		nc.TokensBefore = p.TokensBefore
		res.TokensBefore, res.Salvaged, res.Plan = p.TokensBefore, true, p
		res.OverBudget = cutpoint.OverBudget(p.TokensBefore, cs)
	}
}

// maxSalvage bounds how often one summary is carried over to a newer leaf.
const maxSalvage = 3

// salvage re-reads a session that changed after planning and, if the paid summary still
// applies (the path only grew, nobody compacted, no turn in progress now), returns the
// new state and the plan moved to it: same cut, tokensBefore and the kept part counted
// again on the new path. why says why not otherwise.
func (e *Engine) salvage(old *Source, cfg Settings, p *cutpoint.Plan) (*Source, *cutpoint.Plan, string, error) {
	src, err := e.load(old.File, cfg)
	if err != nil {
		return nil, nil, "", err
	}
	if ok, why := extends(old.Path, src.Path); !ok {
		return nil, nil, "the session changed while its summary was written: " + why, nil
	}
	act := src.Session.ActivityOn(src.Path)
	if act.TurnInProgress {
		return nil, nil, "turn in progress: " + act.Reason + " (the session changed while its summary was written)", nil
	}
	if act.TornLine > 0 {
		return nil, nil, fmt.Sprintf("write in progress: line %d is incomplete (the session changed while its summary was written)", act.TornLine), nil
	}
	np := *p
	np.TokensBefore = cutpoint.ContextTokens(src.Path, src.Counter)
	np.KeptTokens = keptTokens(src.Path, p.FirstKeptEntryIndex, src.Counter)
	if v := cutpoint.CheckInvariants(src.Path, &np); len(v) > 0 {
		return nil, nil, fmt.Sprintf("the cut no longer keeps its invariants on the new path (%s)", v[0]), nil
	}
	return src, &np, "", nil
}

func supersededReason(ap *sessionio.Appended) string {
	switch {
	case len(ap.Intruders) > 0:
		return fmt.Sprintf("the agent appended %d entries just before this one (%v): it is on a side branch, and restore entry %v gives the leaf back to the agent; nothing was lost", len(ap.Intruders), ap.Intruders, ap.Restores)
	default:
		return fmt.Sprintf("the agent appended %d entries right after this one without reloading (%v): it is on a side branch; nothing was lost", len(ap.Followers), ap.Followers)
	}
}

// BranchSummary summarizes the branch being left for req.TargetID (from req.FromID, else
// the leaf the requester saw, else the current leaf) and appends the branch_summary entry
// where Pi's /tree navigation puts it: at the target, or at its parent when the target is
// a user message or a custom_message.
func (e *Engine) BranchSummary(ctx context.Context, req Request) (*Result, error) {
	start := time.Now()
	cfg := e.settings(req)
	cfg.Counter = tokenize.CounterEstimate // Pi sizes a branch summary with its estimate
	src, err := e.load(req.File, cfg)
	if err != nil {
		return nil, err
	}
	res := &Result{Kind: KindBranchSummary, File: req.File, SessionID: src.Session.Header.ID, Model: src.Model.ModelID, ModelKnown: src.Model.Known, ContextWindow: src.Model.ContextWindow, Counter: tokenize.CounterEstimate}
	finish := func(outcome string) (*Result, error) {
		res.Outcome = outcome
		res.DurationMS = time.Since(start).Milliseconds()
		return res, nil
	}
	skip := func(reason string) (*Result, error) {
		res.Outcome, res.Reason = OutcomeSkipped, reason
		res.DurationMS = time.Since(start).Milliseconds()
		return res, nil // a skip is an outcome, not a failure
	}
	if src.Session.Version() != 3 {
		return skip(fmt.Sprintf("format v%d: compactor never appends to v1/v2 files", src.Session.Version()))
	}
	if !src.Session.HasAssistant() {
		return skip("no assistant message yet")
	}
	target := src.Session.Get(req.TargetID)
	if req.TargetID == "" || target == nil {
		return nil, &InputError{Err: fmt.Errorf("%s: --to %q: no entry with this id in the file", req.File, req.TargetID)}
	}
	parent := target.ID
	if target.IsMessage(sessionio.RoleUser) || target.Type == sessionio.TypeCustomMessage {
		parent = target.ParentID
	}
	res.ParentID = parent
	if b := findAfter(src.Session, req.ExpectLeafID, func(e *sessionio.Entry) bool {
		return e.Type == sessionio.TypeBranchSummary && e.ParentID == parent
	}); b != nil {
		res.EntryID, res.Found = b.ID, true
		res.Reason = fmt.Sprintf("branch summary %s at %s is already in the file (this request was done before)", b.ID, parent)
		if !onPath(src.Path, b.ID) {
			return finish(OutcomeSuperseded)
		}
		return finish(OutcomeDone)
	}
	from := req.FromID
	if from == "" {
		from = req.ExpectLeafID
	}
	if from == "" {
		from = src.Session.LeafID()
	}
	if src.Session.Get(from) == nil {
		return nil, &InputError{Err: fmt.Errorf("%s: --from %q: no entry with this id in the file", req.File, from)}
	}
	if from == req.TargetID {
		return skip("the target is the leaf: nothing is left behind")
	}
	reason, warnings := live(src, cfg)
	res.Warnings = warnings
	if reason != "" && !req.DryRun {
		return skip(reason)
	}
	entries, _, err := summarize.CollectBranch(src.Session, from, req.TargetID)
	if err != nil {
		return nil, &GuardError{Reason: err.Error()}
	}
	if len(entries) == 0 {
		return skip("nothing to summarize: the target is on the branch being left")
	}
	window := src.Model.ContextWindow
	if window <= 0 {
		window = 128000
	}
	msgs, fo, _ := summarize.PrepareBranch(entries, window-cfg.BranchReserveTokens, tokenize.Estimate())
	res.Summarized = len(msgs)
	res.PromptChars = len(summarize.SerializeConversation(msgs))
	if req.DryRun {
		return finish(OutcomeDryRun)
	}
	if err := sessionio.CheckWritable(req.File); err != nil {
		return nil, err
	}
	out, err := summarize.BranchSummary(ctx, e.Summarizer, msgs, fo, summarize.BranchOptions{CustomInstructions: req.Instructions})
	if err != nil {
		return nil, err
	}
	res.LLMInputTokens, res.LLMCachedInputTokens, res.LLMOutputTokens, res.LLMCalls = out.InputTokens, out.CachedInputTokens, out.OutputTokens, out.Calls
	if strings.TrimSpace(out.Summary) == "" {
		return nil, &GuardError{Reason: "the summarizer returned an empty summary"}
	}
	ap, err := sessionio.AppendBranchSummary(ctx, req.File, sessionio.ExpectOf(src.Session), sessionio.NewBranchSummary{
		ParentID: parent, Summary: out.Summary, ReadFiles: out.ReadFiles, ModifiedFiles: out.ModifiedFiles,
	})
	if errors.Is(err, sessionio.ErrChanged) {
		// The branch summary hangs off a fixed entry, not the leaf; but an agent that wrote
		// meanwhile is still on the branch being left, and its next entry would leave the
		// summary behind. Try again when the session is idle.
		return skip("busy: the session changed while its branch summary was written: " + err.Error())
	}
	if err != nil {
		return nil, err
	}
	res.EntryID = ap.ID
	res.Intruders, res.Restores = ap.Intruders, ap.Restores
	if ap.Superseded() {
		res.Reason = supersededReason(ap)
		return finish(OutcomeSuperseded)
	}
	res.Note = ReloadNote
	return finish(OutcomeDone)
}

// Budget is a session's current context against its model's budget: what a sweep needs to
// decide whether to enqueue it.
type Budget struct {
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

// CheckBudget counts a session's current context and checks it against its model's budget.
//
// It reads the file from its end only as far as the context and the model go (a tail read,
// ReadBudget): a long-lived session costs what its live context costs, not its
// history.
func (e *Engine) CheckBudget(ctx context.Context, file string) (*Budget, error) {
	src, err := Load(file, e.Settings, LoadOptions{Cache: e.Cache, Read: ReadBudget})
	if err != nil {
		return nil, err
	}
	t := src.Tail
	a := &Budget{SessionID: t.Header.ID, LeafID: t.LeafID, Version: t.Version(),
		HasAssistant: t.HasAssistant, ContextWindow: src.Model.ContextWindow, Model: src.Model.ModelID, ModelKnown: src.Model.Known}
	if n := len(src.Path); n > 0 && src.Path[n-1].Type == sessionio.TypeCompaction {
		a.LeafIsCompaction = true
	}
	a.Tokens = cutpoint.ContextTokens(src.Path, src.Counter)
	cs := cutpoint.Settings{ReserveTokens: e.Settings.ReserveTokens, ContextWindow: src.Model.ContextWindow}
	a.Threshold = src.Model.ContextWindow - cs.ReserveTokens
	a.OverBudget = !a.LeafIsCompaction && cutpoint.OverBudget(a.Tokens, cs)
	return a, nil
}
