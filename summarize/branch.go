package summarize

import (
	"context"
	"fmt"
	"github.com/compactor-dev/compactor/sessionio/picontext"

	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/fileops"
)

// CollectBranch is Pi's collectEntriesForBranchSummary
// (docs/pi-format.md, "Branch summaries"): the entries on the way from oldLeafID back to
// the deepest entry it shares with targetID's path, in chronological order, and that common
// ancestor ("" when the two paths share nothing). Compaction entries are not a stop: their
// summaries become input. When the target descends from the old leaf the list is empty. An
// empty oldLeafID gives nothing.
func CollectBranch(s *sessionio.Session, oldLeafID, targetID string) ([]*sessionio.Entry, string, error) {
	if oldLeafID == "" {
		return nil, "", nil
	}
	if s.Get(oldLeafID) == nil {
		return nil, "", fmt.Errorf("collect branch: old leaf %q: no such entry", oldLeafID)
	}
	if s.Get(targetID) == nil {
		return nil, "", fmt.Errorf("collect branch: target %q: no such entry", targetID)
	}
	onOld := map[string]bool{}
	if err := walkUp(s, oldLeafID, func(e *sessionio.Entry) bool { onOld[e.ID] = true; return true }); err != nil {
		return nil, "", fmt.Errorf("collect branch: %w", err)
	}
	// The target's path is walked from the target upward: the first entry that is also on
	// the old path is the deepest common one.
	ancestor := ""
	if err := walkUp(s, targetID, func(e *sessionio.Entry) bool {
		if onOld[e.ID] {
			ancestor = e.ID
			return false
		}
		return true
	}); err != nil {
		return nil, "", fmt.Errorf("collect branch: %w", err)
	}
	var entries []*sessionio.Entry
	if err := walkUp(s, oldLeafID, func(e *sessionio.Entry) bool {
		if ancestor != "" && e.ID == ancestor {
			return false
		}
		entries = append(entries, e)
		return true
	}); err != nil {
		return nil, "", fmt.Errorf("collect branch: %w", err)
	}
	for i, j := 0, len(entries)-1; i < j; i, j = i+1, j-1 {
		entries[i], entries[j] = entries[j], entries[i]
	}
	return entries, ancestor, nil
}

// walkUp calls fn for id and each of its ancestors, stopping at a root, a missing parent
// or when fn returns false. A parentId cycle (which sessionio refuses at load time, but a
// Session can be built by hand) is reported instead of looping.
func walkUp(s *sessionio.Session, id string, fn func(*sessionio.Entry) bool) error {
	seen := map[string]bool{}
	for id != "" {
		e := s.Get(id)
		if e == nil {
			return nil
		}
		if seen[id] {
			return fmt.Errorf("parentId cycle at entry %q", id)
		}
		seen[id] = true
		if !fn(e) {
			return nil
		}
		if e.ParentID == id {
			return nil // Pi treats a self-parent as a root
		}
		id = e.ParentID
	}
	return nil
}

// branchMessage converts an entry as Pi's branch summarization does: messages except
// tool results, custom_message → custom, branch_summary → branchSummary (even when its
// summary is empty), compaction → compactionSummary; nil for everything else.
func branchMessage(e *sessionio.Entry) *sessionio.Message {
	switch e.Type {
	case sessionio.TypeMessage:
		if e.Message == nil || e.Message.Role == sessionio.RoleToolResult {
			return nil
		}
		return e.Message
	case sessionio.TypeCustomMessage, sessionio.TypeBranchSummary, sessionio.TypeCompaction:
		return picontext.AsMessage(e)
	}
	return nil
}

// PrepareBranch is Pi's prepareBranchEntries (docs/pi-format.md, "Branch summaries"): file
// operations seeded from earlier branch summaries' details (unless fromHook), then the
// entries converted to messages from newest to oldest while they fit tokenBudget (0 = no
// limit). Each message's file operations are recorded before the budget check, so the one
// that breaks the budget still contributes its files. A compaction or branch summary that
// does not fit is still taken when less than 90% of the budget is used; then the walk
// stops. counter must be Pi's estimate of the release (tokenize.EstimateFor(r)) to
// reproduce Pi. From 1.5.0 (BranchHonoursEdits) Pi honours the branch's context edits: the
// latest edit of a message or custom_message among entries omits it or replaces its
// content.
func PrepareBranch(entries []*sessionio.Entry, tokenBudget int, counter MessageCounter, r pi.Release) ([]*sessionio.Message, *FileOps, int) {
	fileOps := fileops.New()
	edits := map[string]*sessionio.Entry{}
	for _, e := range entries {
		switch e.Type {
		case sessionio.TypeBranchSummary:
			fileOps.SeedFromBranchSummary(e)
		case sessionio.TypeContextEdit:
			edits[e.TargetID] = e
		}
	}
	if !r.Has(pi.BranchHonoursEdits) {
		edits = nil
	}
	var rev []*sessionio.Message
	total := 0
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		m := branchMessage(e)
		if edit := edits[e.ID]; edit != nil && m != nil && (e.Type == sessionio.TypeMessage || e.Type == sessionio.TypeCustomMessage) {
			m = nil
			if ms := picontext.ProjectEntry(e, edit); len(ms) > 0 {
				m = ms[0]
			}
		}
		if m == nil {
			continue
		}
		fileOps.AddFromMessage(m)
		tokens := counter.Count(m)
		if tokenBudget > 0 && total+tokens > tokenBudget {
			if (e.Type == sessionio.TypeCompaction || e.Type == sessionio.TypeBranchSummary) &&
				float64(total) < float64(tokenBudget)*0.9 {
				rev = append(rev, m)
				total += tokens
			}
			break
		}
		rev = append(rev, m)
		total += tokens
	}
	msgs := make([]*sessionio.Message, len(rev))
	for i, m := range rev {
		msgs[len(rev)-1-i] = m
	}
	return msgs, fileOps, total
}

// branchMaxTokens is the output limit of a branch summary of Pi r: BranchMaxTokens, 4,096
// from 0.85.0 (BranchOutput4096), the model's own from 1.4.0 (ModelOutputLimit).
func branchMaxTokens(r pi.Release) int {
	switch {
	case r.Has(pi.ModelOutputLimit):
		return 0 // the model's own limit
	case r.Has(pi.BranchOutput4096):
		return 4096
	}
	return BranchMaxTokens
}

// SummaryOutput is a finished summary as it goes into a compaction or branch_summary
// entry: the text (with Pi's framing and file lists) and the details lists.
type SummaryOutput struct {
	Summary       string
	ReadFiles     []string
	ModifiedFiles []string
	// InputTokens and OutputTokens sum the model usage of every call made.
	InputTokens, OutputTokens int
	// CachedInputTokens is the part of InputTokens served from the endpoint's prompt cache.
	CachedInputTokens int
	Calls             int
	// History is a compaction summary's history part alone (without the split turn's
	// prefix summary and the file lists): what a later, incremental preparation builds on.
	History string
}

// BranchOptions are the optional parts of a branch summary request.
type BranchOptions struct {
	CustomInstructions string
	// ReplaceInstructions sends CustomInstructions instead of the branch prompt.
	ReplaceInstructions bool
	// Release is the Pi whose rules the summary follows (zero: the newest): the output limit
	// (branchMaxTokens) and the serialization.
	Release pi.Release
}

// BranchSummary writes the summary of a prepared branch (PrepareBranch's messages and
// file operations) as Pi's generateBranchSummary does: BranchSummaryPreamble + the
// summarizer's text + the file lists. With no messages it makes no call and returns
// "No content to summarize" with empty lists.
func BranchSummary(ctx context.Context, s Summarizer, msgs []*sessionio.Message, fileOps *FileOps, opts BranchOptions) (SummaryOutput, error) {
	if len(msgs) == 0 {
		return SummaryOutput{Summary: NoContentToSummarize, ReadFiles: []string{}, ModifiedFiles: []string{}}, nil
	}
	res, err := s.Summarize(ctx, Request{
		Task:                TaskBranch,
		Messages:            msgs,
		CustomInstructions:  opts.CustomInstructions,
		ReplaceInstructions: opts.ReplaceInstructions,
		MaxTokens:           branchMaxTokens(opts.Release),
		Release:             opts.Release,
	})
	if err != nil {
		return SummaryOutput{}, fmt.Errorf("branch summary: %w", err)
	}
	read, modified := ComputeFileLists(fileOps)
	return SummaryOutput{
		Summary:           BranchSummaryPreamble + res.Text + FormatFileOperations(read, modified),
		ReadFiles:         read,
		ModifiedFiles:     modified,
		InputTokens:       res.InputTokens,
		OutputTokens:      res.OutputTokens,
		CachedInputTokens: res.CachedInputTokens,
		Calls:             res.Calls,
	}, nil
}
