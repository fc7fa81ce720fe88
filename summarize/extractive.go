package summarize

// The extractive summarizer, in the order it works (one file per step):
//
//   extractive.go           the Summarizer: budget and limits from the Request, the steps in order
//   extractive_gather.go    one pass over the span: requests, rules, commands and their runs, open calls
//   extractive_classify.go  what a sentence, a tool result or a command line is (rule, question, failure)
//   extractive_items.go     the summary's lines (kind, section, priority) made from those facts
//   extractive_merge.go     a previous summary read back into lines and merged below the span's own
//   extractive_budget.go    the token budget: which lines go, and the note that counts them
//   extractive_render.go    the markdown text of the sections
//   extractive_text.go      small text helpers (clipping, sentences, plurals)
//
// Each step is a file of its own so that it can be read on its own; none of them calls a model.

import (
	"context"
	"unicode/utf8"
)

// DefaultExtractiveBudget is the extractive summarizer's default size in tokens (the
// summary text; Pi's file lists are appended after it). It is below the mean extractive
// summary of the corpus before the budget existed (docs/quality.md).
const DefaultExtractiveBudget = 1500

// Extractive is a Summarizer that needs no model: it fills the summary sections with what
// an agent loses when its context is compacted, taken verbatim from the span: the user's
// requests and the rules they stated, every command that failed with its error line
// (and whether it passed later), the commands that passed, the tool calls still open,
// the decisions, and the latest request and answer.
//
// It classifies messages by what they are: a user question is a request, not a
// constraint; a command is blocked only if its last run failed (a non-zero exit, an
// error result, a cancelled or timed-out run), and a failure fixed later is reported as
// fixed, with its error. The summary stays within a token budget: when everything does
// not fit, the least important items go first (the previous summary's before the span's,
// the oldest before the newest; passed commands and decisions before requests, failures
// and constraints), and each section says how many items of each kind it left out. Its
// output is deterministic (same input, same bytes). It is the fallback when no endpoint
// is configured and the summarizer of policy experiments.
type Extractive struct {
	// Budget is the summary's size limit in tokens, as Counter counts them (default
	// DefaultExtractiveBudget). A request's MaxTokens lowers it further.
	Budget int
	// Counter counts tokens for Budget (nil: Pi's chars/4 estimate, EstimateText).
	Counter TextCounter
	// MaxItems, when set, also caps the items of one section (the most important kept).
	MaxItems int
	// MaxItemChars, when set, lowers the length limit of one item, in characters.
	MaxItemChars int
	// MaxChars, when set, also caps the whole summary, in characters.
	MaxChars int
}

// NewExtractive returns an extractive summarizer with the default budget.
func NewExtractive() *Extractive { return &Extractive{} }

// Summarize implements Summarizer. It makes no call and reports no token usage.
func (x *Extractive) Summarize(ctx context.Context, req Request) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, ctxError(err, 0)
	}
	budget := x.Budget
	if budget <= 0 {
		budget = DefaultExtractiveBudget
	}
	if req.MaxTokens > 0 && req.MaxTokens < budget {
		budget = req.MaxTokens
	}
	count := textCounter(x.Counter)
	clip := func(n int) int {
		if x.MaxItemChars > 0 && x.MaxItemChars < n {
			return x.MaxItemChars
		}
		return n
	}
	f := gather(req.Messages, clip)

	var titles []string
	switch req.Task {
	case TaskTurnPrefix:
		titles = []string{secOrigRequest, secEarly, secSuffix}
	default:
		titles = []string{secGoal, secConstraints, secProgress, secDone, secInProgress, secBlocked, secDecisions, secNext}
		if req.Task != TaskBranch {
			titles = append(titles, secCritical)
		}
	}
	items := f.items(titles)
	omitted := map[string]map[string]int{} // section -> kind -> count
	if req.PreviousSummary != "" {
		prev, prevOmitted := previousItems(req.PreviousSummary, f, titles)
		items = append(prev, items...)
		for sec, kinds := range prevOmitted {
			for k, n := range kinds {
				addOmitted(omitted, sec, k, n)
			}
		}
	}
	items = dedupe(items)
	for i := range items {
		items[i].cost = count(items[i].text) + 2
	}
	text := fit(titles, items, omitted, budget, x.MaxItems, count)
	if x.MaxChars > 0 && utf8.RuneCountInString(text) > x.MaxChars {
		text = clipChars(text, x.MaxChars)
	}
	return Result{Text: text}, nil
}
