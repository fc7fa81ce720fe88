package experiment

import (
	"context"
	"fmt"
	"github.com/compactor-dev/compactor/sessionio/picontext"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/engine"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/tokenize"
)

// SnapshotRow is one plan: a session's current path, one policy, one keepRecentTokens.
type SnapshotRow struct {
	File          string `json:"file"`
	SessionID     string `json:"sessionId"`
	Version       int    `json:"version"`
	Model         string `json:"model"`
	ContextWindow int    `json:"contextWindow"`

	Policy           string `json:"policy"`
	KeepRecentTokens int    `json:"keepRecentTokens"`

	Prepared         bool   `json:"prepared"`
	Reason           string `json:"reason,omitempty"`
	FirstKeptEntryID string `json:"firstKeptEntryId"`
	// TokensBefore is Pi's context size (last valid usage + counted trailing messages).
	TokensBefore int  `json:"tokensBefore"`
	OverBudget   bool `json:"overBudget"`

	KeptTokens       int  `json:"keptTokens"`
	SummarizedTokens int  `json:"summarizedTokens"`
	TurnPrefixTokens int  `json:"turnPrefixTokens"`
	SplitTurn        bool `json:"isSplitTurn"`
	// MessagesToSummarize and TurnPrefix are entry counts.
	MessagesToSummarize int `json:"messagesToSummarize"`
	TurnPrefix          int `json:"turnPrefix"`
	// TargetDistance is keptTokens - keepRecentTokens (negative: kept less than asked).
	TargetDistance int `json:"targetDistance"`

	// Violations counts cutpoint.CheckInvariants breaches; Violation is the first.
	Violations int    `json:"violations"`
	Violation  string `json:"violation,omitempty"`
	// AgreesWithPi: the pi policy with the same settings keeps from the same entry (or
	// neither prepares a plan).
	AgreesWithPi bool `json:"agreesWithPi"`
}

// ReplayRow is one session replayed with one policy, one keepRecentTokens and one
// summarizer.
type ReplayRow struct {
	File             string `json:"file"`
	SessionID        string `json:"sessionId"`
	Policy           string `json:"policy"`
	KeepRecentTokens int    `json:"keepRecentTokens"`
	Summarizer       string `json:"summarizer"`
	ContextWindow    int    `json:"contextWindow"`
	// Budget is contextWindow - reserveTokens: a context above it is compacted.
	Budget int `json:"budget"`
	// Entries is the number of entries replayed (the current path without its own
	// compaction entries).
	Entries int `json:"entries"`

	Compactions int `json:"compactions"`
	// Stuck counts checks that found the context over budget but the plan had nothing to
	// summarize; Refused counts compactions dropped because the context would not have
	// shrunk (the engine's guard); StillOverBudget counts compactions that left the
	// context over budget.
	Stuck           int `json:"stuck"`
	Refused         int `json:"refused"`
	StillOverBudget int `json:"stillOverBudget"`
	// ShortenedLists counts compactions whose file lists were shortened so as not to leave
	// the context over budget (engine.FitFileLists, as the service does).
	ShortenedLists int `json:"shortenedLists"`
	// DroppedSummaries counts compactions of a split turn with nothing before it to
	// summarize: Pi's format then writes "No prior history." in place of the history and
	// the previous summary is lost (summarize.CompactionSummary does as Pi does).
	DroppedSummaries int `json:"droppedSummaries"`

	// SummarizerTokens is the cost: the tokens of every serialized span sent to the
	// summarizer plus the previous summaries sent with them (refused attempts included).
	SummarizerTokens int `json:"summarizerTokens"`
	// MeanKeptTokens and MinKeptTokens are the verbatim context (everything but the
	// summary) right after each compaction; 0 when there was none.
	MeanKeptTokens int `json:"meanKeptTokens"`
	MinKeptTokens  int `json:"minKeptTokens"`
	// KeptTokensSum is the sum the mean is taken from (for exact totals).
	KeptTokensSum int `json:"keptTokensSum"`
	// MaxContextTokens is the largest context the replay reached; FinalContextTokens the
	// context at the end.
	MaxContextTokens   int `json:"maxContextTokens"`
	FinalContextTokens int `json:"finalContextTokens"`

	Violations int    `json:"violations"`
	Violation  string `json:"violation,omitempty"`

	// LLM usage (summarizer llm) as the endpoint reported it: completed calls, input tokens
	// (and how many of them it served from its prompt cache), output tokens.
	LLMCalls             int `json:"llmCalls"`
	LLMInputTokens       int `json:"llmInputTokens"`
	LLMCachedInputTokens int `json:"llmCachedInputTokens"`
	LLMOutputTokens      int `json:"llmOutputTokens"`

	// Eval is the probe recall (Config.Eval); nil otherwise.
	Eval *ReplayEval `json:"eval,omitempty"`
}

// Milestones are the compactions after which a session's first compacted span is checked
// again: how much of what the first summary kept survives the summaries that follow.
var Milestones = [4]int{1, 2, 5, 10}

// ReplayEval is what the compacted contexts of one replay still knew.
type ReplayEval struct {
	// Recall sums, over every compaction, the probes of the span it summarized and how
	// many of them the context right after it still held (summary and kept messages).
	Recall ProbeRecall `json:"recall"`
	// Summary sizes: the compaction summary as it enters the context (Pi's wrapping and
	// file lists included), summed, averaged and largest over the compactions.
	SummaryTokensSum  int `json:"summaryTokensSum"`
	SummaryTokensMean int `json:"summaryTokensMean"`
	SummaryTokensMax  int `json:"summaryTokensMax"`
	// FileListTokens* are the part of the summaries that is the <read-files> and
	// <modified-files> lists (counted as text).
	FileListTokensSum  int `json:"fileListTokensSum"`
	FileListTokensMean int `json:"fileListTokensMean"`
	// Milestones: after the 1st, 2nd, 5th and 10th compaction (Milestones), the summary's
	// size and the recall of the first compacted span's probes.
	Milestones [len(Milestones)]Milestone `json:"milestones"`
}

// Milestone is the state after the After-th compaction of a replay.
type Milestone struct {
	After int `json:"after"`
	// Reached: the replay made at least After compactions (otherwise the rest is zero).
	Reached       bool        `json:"reached"`
	SummaryTokens int         `json:"summaryTokens"`
	FirstSpan     ProbeRecall `json:"firstSpan"`
}

// sessionRunner processes one session file at a time per goroutine; what it holds is
// shared read-only (or guarded) between workers.
type sessionRunner struct {
	cfg Config

	mu      sync.Mutex
	standIn map[string]string // counter name -> stand-in summary text
}

func newSessionRunner(cfg Config) *sessionRunner {
	return &sessionRunner{cfg: cfg, standIn: map[string]string{}}
}

type sessionResult struct {
	snapshot []SnapshotRow
	replay   []ReplayRow
}

// session is one loaded session and its per-session count memos.
type session struct {
	file, name string
	src        *engine.Source
	s          *sessionio.Session
	path       []*sessionio.Entry
	model      string
	window     int
	counter    tokenize.Counter
	mc         memoCounter // message counts
	ser        *memo       // serialized-prompt counts
	text       func(string) int
	ctxTok     map[*sessionio.Entry]int
	numbers    map[*sessionio.Message][]string // number probe keys per message (eval)
	texts      map[*sessionio.Message]string   // normalized context text per message (eval)
}

func (r *sessionRunner) run(ctx context.Context, file, name string) (res *sessionResult, err error) {
	// A policy or the summarizer tripping over one strange file must not end a run over
	// thousands: report it as that file's error.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("internal error: %v\n%s", p, debug.Stack())
		}
	}()
	ss, err := r.load(file, name)
	if err != nil {
		return nil, err
	}
	res = &sessionResult{}
	for _, keep := range r.cfg.KeepRecentTokens {
		rows, err := r.snapshot(ss, keep)
		if err != nil {
			return nil, err
		}
		res.snapshot = append(res.snapshot, rows...)
		if !r.cfg.Replay {
			continue
		}
		for _, name := range r.cfg.Policies {
			for _, sum := range r.cfg.Summarizers {
				row, err := r.replay(ctx, ss, name, keep, sum)
				if err != nil {
					return nil, err
				}
				res.replay = append(res.replay, row)
			}
		}
	}
	return res, nil
}

func (r *sessionRunner) load(file, name string) (*session, error) {
	// The same read, model resolution and counter as the service's (engine.Load); the
	// counts are memoized here instead of cached, as every plan of a session reuses them.
	src, err := engine.Load(file, engine.Settings{Pi: r.cfg.Pi, Counter: r.cfg.Counter, ContextWindow: r.cfg.ContextWindow}, engine.LoadOptions{})
	if err != nil {
		return nil, err
	}
	ss := &session{file: file, name: name, src: src, s: src.Session, path: src.Path, model: src.Model.Name(),
		window: src.Model.ContextWindow, counter: src.Counter, ctxTok: make(map[*sessionio.Entry]int, len(src.Path)),
		numbers: map[*sessionio.Message][]string{}, texts: map[*sessionio.Message]string{}}
	ss.text = textCounter(ss.counter)
	ss.mc = memoCounter{name: ss.counter.Name(), m: newMemo(ss.path, ss.counter.Count)}
	ss.ser = newMemo(ss.path, serializedCounter(ss.text, src.Release))
	return ss, nil
}

func (ss *session) settings(cfg Config, keep int) cutpoint.Settings {
	return ss.src.Settings(keep, cfg.ReserveTokens)
}

func (r *sessionRunner) snapshot(ss *session, keep int) ([]SnapshotRow, error) {
	st := ss.settings(r.cfg, keep)
	piPlan, err := cutpoint.Pi{}.Plan(ss.path, st, ss.mc)
	if err != nil {
		return nil, fmt.Errorf("plan pi: %w", err)
	}
	rows := make([]SnapshotRow, 0, len(r.cfg.Policies))
	for _, name := range r.cfg.Policies {
		pol, err := cutpoint.ByName(name)
		if err != nil {
			return nil, err
		}
		p := piPlan
		if name != cutpoint.PolicyPi {
			if p, err = pol.Plan(ss.path, st, ss.mc); err != nil {
				return nil, fmt.Errorf("plan %s: %w", name, err)
			}
		}
		row := SnapshotRow{
			File: ss.name, SessionID: ss.s.Header.ID, Version: ss.s.Version(), Model: ss.model,
			ContextWindow: ss.window, Policy: name, KeepRecentTokens: keep,
			Prepared: p.Prepared, Reason: p.Reason, TokensBefore: p.TokensBefore,
			OverBudget:   cutpoint.OverBudget(p.TokensBefore, st),
			AgreesWithPi: p.Prepared == piPlan.Prepared && p.FirstKeptEntryID == piPlan.FirstKeptEntryID,
		}
		if p.Prepared {
			row.FirstKeptEntryID = p.FirstKeptEntryID
			row.KeptTokens, row.SummarizedTokens, row.TurnPrefixTokens = p.KeptTokens, p.SummarizedTokens, p.TurnPrefixTokens
			row.SplitTurn = p.IsSplitTurn
			row.MessagesToSummarize, row.TurnPrefix = len(p.MessagesToSummarize), len(p.TurnPrefix)
			row.TargetDistance = p.KeptTokens - keep
			if v := cutpoint.CheckInvariants(ss.path, p); len(v) > 0 {
				row.Violations, row.Violation = len(v), v[0].String()
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// entryTokens is what an entry puts into the context, counted once per session: a
// message, a custom_message, or a branch_summary with a non-empty summary (what
// picontext.Build emits). Compaction entries count as their summary only where a
// replay puts them, so they are 0 here.
func (ss *session) entryTokens(e *sessionio.Entry) int {
	if n, ok := ss.ctxTok[e]; ok {
		return n
	}
	n := 0
	switch e.Type {
	case sessionio.TypeMessage:
		n = ss.mc.Count(e.Message)
	case sessionio.TypeCustomMessage:
		n = ss.mc.Count(picontext.AsMessage(e))
	case sessionio.TypeBranchSummary:
		if e.Summary != "" {
			n = ss.mc.Count(picontext.AsMessage(e))
		}
	}
	ss.ctxTok[e] = n
	return n
}

// standInSummary returns a text of about n tokens for the counter (SummarizerNone).
func (r *sessionRunner) standInSummary(ss *session) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.standIn[ss.counter.Name()]; ok {
		return s
	}
	const unit = " summary"
	per := float64(ss.text(strings.Repeat(unit, 100))) / 100
	reps := max(1, int(float64(r.cfg.SummaryTokens)/per))
	s := "Stand-in summary." + strings.Repeat(unit, reps)
	r.standIn[ss.counter.Name()] = s
	return s
}
