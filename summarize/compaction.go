package summarize

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
)

// CompactionInput is what a cut-point Plan hands to the summarizer.
type CompactionInput struct {
	// MessagesToSummarize is the history before the kept part (or before the split turn).
	MessagesToSummarize []*sessionio.Message
	// TurnPrefix is the first part of a split turn (empty when the turn is not split, or
	// when the cut lands on a bash/custom/branch-summary message).
	TurnPrefix  []*sessionio.Message
	IsSplitTurn bool
	// PreviousSummary is the summary of the previous compaction on the path, if any.
	PreviousSummary    string
	CustomInstructions string
	// ReserveTokens sets the output limits before 1.4.0 (its default 16384); from 1.4.0
	// (ModelOutputLimit) Pi leaves the output limit to the model (reserveTokens only decides
	// when to compact).
	ReserveTokens int
	// Release is the Pi whose rules the summary follows (zero: the newest).
	Release pi.Release
	// FileOps are the plan's file operations (ExtractFileOps); nil means none.
	FileOps *FileOps
	// BaseHistory, when set, is a history summary already made of the span's beginning
	// (an earlier preparation at an older cut): MessagesToSummarize are then only the
	// messages after what it covers, merged into it with the update prompt, and
	// PreviousSummary is ignored (BaseHistory already holds it). With no new messages the
	// base is used as it is, without a request.
	BaseHistory *string
}

// DefaultReserveTokens is Pi's default reserveTokens.
const DefaultReserveTokens = 16384

// CompactionSummary writes a compaction summary as Pi's compact() does
// (docs/pi-format.md, "The requests"):
//
//   - a split turn with a non-empty prefix makes two requests (in parallel here; Pi from
//     0.80.4 makes them one after the other, for the same tokens): the history (with none,
//     the literal "No prior history.", which drops the previous summary; from 0.86.1,
//     SplitTurnKeepsPreviousSummary, the previous summary as it is) and the turn prefix,
//     joined by SplitTurnSeparator;
//   - otherwise one history request (an update when there is a previous summary), even
//     for an empty span;
//
// then the file lists are appended. Both requests are cancelled when one fails. Before 1.4.0
// Pi limits the output to 0.8 (history) and 0.5 (prefix) × reserveTokens; from 1.4.0
// (ModelOutputLimit) it leaves it to the model, and (TurnPrefixInstructions) gives the prefix
// request the custom instructions too.
func CompactionSummary(ctx context.Context, s Summarizer, in CompactionInput) (CompactionOutput, error) {
	reserve := in.ReserveTokens
	if reserve <= 0 {
		reserve = DefaultReserveTokens
	}
	history := historyRequest(in, reserve)
	// summarizeHistory makes the history part, or reuses the base when nothing is new.
	summarizeHistory := func(ctx context.Context) (Result, error) {
		if in.BaseHistory != nil && len(in.MessagesToSummarize) == 0 {
			return Result{Text: *in.BaseHistory}, nil
		}
		return s.Summarize(ctx, history)
	}
	var out CompactionOutput
	var text string
	if in.IsSplitTurn && len(in.TurnPrefix) > 0 {
		hist, prefix, err := splitTurnSummaries(ctx, s, in, reserve, summarizeHistory)
		if err != nil {
			return CompactionOutput{}, fmt.Errorf("compaction summary: %w", err)
		}
		text = hist.Text + SplitTurnSeparator + prefix.Text
		out.History = hist.Text
		out.add(hist)
		out.add(prefix)
	} else {
		r, err := summarizeHistory(ctx)
		if err != nil {
			return CompactionOutput{}, fmt.Errorf("compaction summary: history summary: %w", err)
		}
		text = r.Text
		out.History = r.Text
		out.add(r)
	}
	out.ReadFiles, out.ModifiedFiles = ComputeFileLists(in.FileOps)
	out.Summary = text + FormatFileOperations(out.ReadFiles, out.ModifiedFiles)
	return out, nil
}

// historyRequest is the request for the history part: an update of the previous summary
// (or of the base history) when there is one.
func historyRequest(in CompactionInput, reserve int) Request {
	history := Request{
		Task:               TaskHistory,
		Messages:           in.MessagesToSummarize,
		PreviousSummary:    in.PreviousSummary,
		CustomInstructions: in.CustomInstructions,
		MaxTokens:          HistoryMaxTokens(reserve),
		Release:            in.Release,
	}
	if in.Release.Has(pi.ModelOutputLimit) {
		history.MaxTokens = 0 // the model's own limit
	}
	if in.BaseHistory != nil {
		history.PreviousSummary = *in.BaseHistory
	}
	if history.PreviousSummary != "" {
		history.Task = TaskUpdate
	}
	return history
}

// turnPrefixRequest is the request for a split turn's prefix.
func turnPrefixRequest(in CompactionInput, reserve int) Request {
	req := Request{
		Task:      TaskTurnPrefix,
		Messages:  in.TurnPrefix,
		MaxTokens: TurnPrefixMaxTokens(reserve),
		Release:   in.Release,
	}
	if in.Release.Has(pi.ModelOutputLimit) {
		req.MaxTokens = 0
	}
	if in.Release.Has(pi.TurnPrefixInstructions) {
		req.CustomInstructions = in.CustomInstructions
	}
	return req
}

// splitTurnSummaries makes a split turn's two parts in parallel, both cancelled when one
// fails: the history (summarizeHistory; with no history to read, the previous summary or
// NoPriorHistory, as the release has it) and the turn prefix.
func splitTurnSummaries(ctx context.Context, s Summarizer, in CompactionInput, reserve int, summarizeHistory func(context.Context) (Result, error)) (hist, prefix Result, _ error) {
	g, gctx := errgroup.WithContext(ctx)
	if len(in.MessagesToSummarize) > 0 || in.BaseHistory != nil {
		g.Go(func() error {
			r, err := summarizeHistory(gctx)
			if err != nil {
				return fmt.Errorf("history summary: %w", err)
			}
			hist = r
			return nil
		})
	} else if in.PreviousSummary != "" && in.Release.Has(pi.SplitTurnKeepsPreviousSummary) {
		hist = Result{Text: in.PreviousSummary}
	} else {
		hist = Result{Text: NoPriorHistory}
	}
	g.Go(func() error {
		r, err := s.Summarize(gctx, turnPrefixRequest(in, reserve))
		if err != nil {
			return fmt.Errorf("turn prefix summary: %w", err)
		}
		prefix = r
		return nil
	})
	if err := g.Wait(); err != nil {
		return Result{}, Result{}, err
	}
	return hist, prefix, nil
}

// CompactionOutput is a finished compaction summary: Summary goes into the entry's
// "summary", ReadFiles/ModifiedFiles into its details.
type CompactionOutput = SummaryOutput

func (o *SummaryOutput) add(r Result) {
	o.InputTokens += r.InputTokens
	o.OutputTokens += r.OutputTokens
	o.CachedInputTokens += r.CachedInputTokens
	o.Calls += r.Calls
}

// MergeSummaries folds consecutive summaries of one session (joined oldest first, as
// previous) into one summary with one request (TaskMerge), under the output limit a history
// summary has by the rules of release r with reserve tokens reserved.
func MergeSummaries(ctx context.Context, s Summarizer, previous string, reserve int, r pi.Release) (Result, error) {
	if reserve <= 0 {
		reserve = DefaultReserveTokens
	}
	req := Request{Task: TaskMerge, PreviousSummary: previous, MaxTokens: HistoryMaxTokens(reserve), Release: r}
	if r.Has(pi.ModelOutputLimit) {
		req.MaxTokens = 0
	}
	res, err := s.Summarize(ctx, req)
	if err != nil {
		return Result{}, fmt.Errorf("merge summaries: %w", err)
	}
	return res, nil
}
