package experiment

import (
	"context"
	"github.com/compactor-dev/compactor/sessionio/picontext"
	"sync"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
)

// evaluator follows one replay's compactions: the recall of each summarized span's probes
// right after its compaction, the summary sizes, and the first span's probes at the
// Milestones.
type evaluator struct {
	numbers map[*sessionio.Message][]string // the session's memos (deriveProbes, contextText)
	texts   map[*sessionio.Message]string
	n       int // compactions so far
	first   []probe
	out     ReplayEval
}

// compacted records the compaction comp of plan p, which keeps the entries kept.
func (ev *evaluator) compacted(p *cutpoint.Plan, comp *sessionio.Entry, kept []*sessionio.Entry, summaryTokens, fileListTokens int) {
	ev.n++
	span := make([]*sessionio.Message, 0, len(p.Summarize)+len(p.Prefix))
	span = append(append(span, p.Summarize...), p.Prefix...)
	probes := deriveProbes(span, ev.numbers)
	// Message entries' messages live as long as the session, and their text is kept;
	// the others (custom messages, summaries) are made afresh at every AsMessage.
	fresh := []*sessionio.Message{picontext.AsMessage(comp)}
	stable := make([]*sessionio.Message, 0, len(kept))
	for _, e := range kept {
		switch m := contextMessage(e); {
		case m == nil:
		case e.Type == sessionio.TypeMessage:
			stable = append(stable, m)
		default:
			fresh = append(fresh, m)
		}
	}
	text := contextText(fresh, nil) + " " + contextText(stable, ev.texts)
	ev.out.Recall.add(recall(probes, text))
	if ev.n == 1 {
		ev.first = probes
	}
	ev.out.SummaryTokensSum += summaryTokens
	ev.out.SummaryTokensMax = max(ev.out.SummaryTokensMax, summaryTokens)
	ev.out.SummaryTokensMean = roundDiv(ev.out.SummaryTokensSum, ev.n)
	ev.out.FileListTokensSum += fileListTokens
	ev.out.FileListTokensMean = roundDiv(ev.out.FileListTokensSum, ev.n)
	for i, after := range Milestones {
		if after == ev.n {
			ev.out.Milestones[i] = Milestone{After: after, Reached: true, SummaryTokens: summaryTokens, FirstSpan: recall(ev.first, text)}
		}
	}
}

func (ev *evaluator) result() *ReplayEval {
	out := ev.out
	for i, after := range Milestones {
		out.Milestones[i].After = after
	}
	return &out
}

// contextMessage is what an entry puts into Pi's context (picontext.Build): a
// message, a custom_message, a branch_summary with a summary; nil for the rest (a
// compaction's summary enters only as the latest one, which the caller adds).
func contextMessage(e *sessionio.Entry) *sessionio.Message {
	switch e.Type {
	case sessionio.TypeMessage:
		return e.Message
	case sessionio.TypeCustomMessage:
		return picontext.AsMessage(e)
	case sessionio.TypeBranchSummary:
		if e.Summary != "" {
			return picontext.AsMessage(e)
		}
	}
	return nil
}

// usageCounter sums what an LLM reported over one replay (a split turn makes two calls
// at once, hence the lock).
type usageCounter struct {
	mu                       sync.Mutex
	calls, in, cached, outTk int
}

func (u *usageCounter) totals() (calls, in, cached, out int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls, u.in, u.cached, u.outTk
}

func (u *usageCounter) wrap(s summarize.Summarizer) summarize.Summarizer { return counted{s, u} }

// counted is a summarizer whose usage goes to a usageCounter.
type counted struct {
	s summarize.Summarizer
	u *usageCounter
}

func (c counted) Summarize(ctx context.Context, req summarize.Request) (summarize.Result, error) {
	r, err := c.s.Summarize(ctx, req)
	c.u.mu.Lock()
	c.u.calls += r.Calls
	c.u.in += r.InputTokens
	c.u.cached += r.CachedInputTokens
	c.u.outTk += r.OutputTokens
	c.u.mu.Unlock()
	return r, err
}
