// Package summarize turns a span of a Pi session into the text of a compaction or
// branch summary.
//
// It owns everything between "these messages must go" and "this is the summary":
// serializing the span exactly as Pi does (SerializeConversation), the prompts (our own
// wording with Pi's section structure), an LLM client for any OpenAI-compatible endpoint
// (OpenAI: retries, backoff, Retry-After, context-length detection, concurrency and rate
// limits, key redaction), a rolling chunked summary for spans larger than the model's
// input window, a deterministic extractive summarizer that needs no network
// (Extractive), and the assembly of Pi's final summary formats (CompactionSummary,
// BranchSummary, with file lists). Branch collection and preparation (CollectBranch,
// PrepareBranch) reproduce Pi's /tree summarization input.
package summarize

import (
	"context"
	"fmt"
	"math"

	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
)

// Task is what a summarization request asks for; it selects the prompt. (A failed call's
// class is an ErrorKind, with the Kind* constants.)
type Task int

const (
	// TaskHistory summarizes the older part of a session (fresh checkpoint, or an update
	// when PreviousSummary is set).
	TaskHistory Task = iota
	// TaskUpdate merges Messages into PreviousSummary (same as TaskHistory with a
	// previous summary; a fresh checkpoint when PreviousSummary is empty).
	TaskUpdate
	// TaskTurnPrefix summarizes the first part of a split turn.
	TaskTurnPrefix
	// TaskBranch summarizes a branch the user is leaving.
	TaskBranch
	// TaskMerge folds PreviousSummary, several consecutive summaries of one session (oldest
	// first, each covering what follows the one before), into one; Messages are empty. The
	// summaries of spans made one by one, while the agent compacted faster than a model
	// summarizes, become one text the size of one summary.
	TaskMerge
)

func (k Task) String() string {
	switch k {
	case TaskHistory:
		return "history"
	case TaskUpdate:
		return "update"
	case TaskTurnPrefix:
		return "turn-prefix"
	case TaskBranch:
		return "branch"
	case TaskMerge:
		return "merge"
	}
	return fmt.Sprintf("task(%d)", int(k))
}

// Request is one summarization: what to summarize and how.
type Request struct {
	Task     Task
	Messages []*sessionio.Message
	// PreviousSummary is merged into the new summary (update prompt) when non-empty.
	PreviousSummary string
	// CustomInstructions are quoted after the prompt as a focus request (history and
	// branch; the turn prefix too under Pi 1.x): data, bounded by CheckInstructions.
	CustomInstructions string
	// ReplaceInstructions (branch only): use CustomInstructions instead of the prompt.
	ReplaceInstructions bool
	// MaxTokens is the output limit; 0 lets the summarizer choose.
	MaxTokens int
	// Release is the Pi whose serialization and prompt rules the request follows (zero: the
	// newest).
	Release pi.Release
}

// Result is a summary and what it cost.
type Result struct {
	Text string
	// InputTokens and OutputTokens are the usage the endpoint reported, summed over every
	// call made for the request (0 for the extractive summarizer).
	InputTokens, OutputTokens int
	// CachedInputTokens is the part of InputTokens the endpoint served from its prompt
	// cache (usage.prompt_tokens_details.cached_tokens; 0 where it is not reported).
	CachedInputTokens int
	// Calls is the number of completed model calls (more than 1 when chunked).
	Calls int
	// Truncated: an answer stopped at its output limit (finish_reason "length"), so the
	// text is incomplete.
	Truncated bool
}

// Summarizer writes the text of one summary. Implementations: *OpenAI, *Extractive.
type Summarizer interface {
	Summarize(ctx context.Context, req Request) (Result, error)
}

// Output limits as Pi sets them (docs/pi-format.md, "The requests" and "Branch summaries").

// HistoryMaxTokens is the output limit of a history summary: floor(0.8 × reserveTokens).
// It is computed in float64 as JavaScript does, so it agrees with Pi for every input.
func HistoryMaxTokens(reserveTokens int) int { return int(math.Floor(0.8 * float64(reserveTokens))) }

// TurnPrefixMaxTokens is the output limit of a turn-prefix summary: floor(0.5 × reserveTokens).
func TurnPrefixMaxTokens(reserveTokens int) int { return int(math.Floor(0.5 * float64(reserveTokens))) }

// BranchMaxTokens is the fixed output limit of a branch summary.
const BranchMaxTokens = 2048

// TextCounter counts the tokens of a text (tokenize's tiktoken counter satisfies it).
type TextCounter interface {
	CountText(s string) int
}

// MessageCounter counts the tokens of a message the way Pi's estimateTokens does
// (tokenize.Estimate() satisfies it).
type MessageCounter interface {
	Count(m *sessionio.Message) int
}
