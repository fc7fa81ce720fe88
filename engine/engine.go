package engine

import (
	"errors"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/outcome"
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
	// Roots are the stores' roots (real paths) when the engine serves stores: a file under
	// one of them is read and appended to only beneath it (sessionio.Beneath: no symlink,
	// no escape, one hard link, the file of the first read), and a file under none is
	// refused. Without roots (the commands run on a file a person names) files are opened
	// by name (sessionio.Named).
	Roots []string
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
	// SessionID is the session the requester names (a job's): a file whose header names
	// another is refused (*InputError) before anything is paid for. The pipeline checks it
	// at admission too; this check is on the read the request works, so a file put in the
	// place of the one admitted is not worked under the admitted id. "" checks nothing (a
	// person naming a file).
	SessionID string
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

	// Base is the session's base (base.go) for a preparation or an extract: used in place of
	// the previous compaction's text when it stands for it; nil: none.
	Base *Base
}

// Request kinds, as jobs name them: Result.Kind says what was asked.
const (
	KindCompact       = "compact"
	KindBranchSummary = "branch_summary"
	KindPrepare       = "prepare"
	// KindBase makes the model's summary of the span an extract answered (base.go).
	KindBase = "base"
)

// ReloadNote is told with every compaction and branch summary: a running Pi never re-reads
// its file, so it must reload the session to use the new entry.
const ReloadNote = "a running Pi keeps its leaf in memory: reload the session (RPC switch_session, /resume) before its next prompt, or its next entry leaves this one on a side branch"

// Result reports what happened; it never contains the summary text.
type Result struct {
	Kind string `json:"kind"`
	// Outcome is how the request ended: done, skipped, superseded or dry-run (package
	// outcome; a failure is an error).
	Outcome          outcome.Outcome `json:"outcome"`
	Reason           string          `json:"reason,omitempty"`
	File             string          `json:"file"`
	SessionID        string          `json:"sessionId"`
	EntryID          string          `json:"entryId,omitempty"`
	ParentID         string          `json:"parentId,omitempty"`
	FirstKeptEntryID string          `json:"firstKeptEntryId,omitempty"`
	TokensBefore     int             `json:"tokensBefore"`
	TokensAfter      int             `json:"tokensAfter"`
	Model            string          `json:"model"`
	ModelKnown       bool            `json:"modelKnown"`
	ContextWindow    int             `json:"contextWindow"`
	OverBudget       bool            `json:"overBudget"`
	Policy           string          `json:"policy,omitempty"`
	Counter          string          `json:"counter,omitempty"`
	Summarized       int             `json:"messagesSummarized"`
	PromptChars      int             `json:"promptChars,omitempty"`
	LLMInputTokens   int             `json:"llmInputTokens"`
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
	// Intruders and Restores: see liveappend.Appended (superseded outcomes).
	Intruders []string       `json:"intruders,omitempty"`
	Restores  []string       `json:"restores,omitempty"`
	Note      string         `json:"note,omitempty"`
	Warnings  []string       `json:"warnings,omitempty"`
	Plan      *cutpoint.Plan `json:"plan,omitempty"`

	// Trimmed says what was left out to end under the budget (fit.go); nil when nothing.
	Trimmed *Trimmed `json:"trimmed,omitempty"`

	// Busy is set on a skip for a session that is busy now, with the cause. Callers decide
	// on it (the worker: sweeps try the session again after a backoff), never on Reason,
	// whose words are for people. Not in the result document.
	Busy BusyCause `json:"-"`
}

// BusyCause is why a request was skipped for a session that is busy now: a state that
// passes without the file changing (it is compactable once abandoned, after
// Settings.AbandonedAfter) or a session that kept changing while its summary was written.
type BusyCause string

// Busy causes.
const (
	// BusyTurn: a turn is in progress (the newest message waits for the model, its tool
	// calls have no results yet, or Pi is retrying an errored answer).
	BusyTurn BusyCause = "turn in progress"
	// BusyWrite: the file's last line is incomplete: a line is being written.
	BusyWrite BusyCause = "write in progress"
	// BusyChanged: the session changed while its summary was written, and the summary no
	// longer applies (or it changed too often).
	BusyChanged BusyCause = "changed while summarizing"
)

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
