package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/compactor-dev/compactor/outcome"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/liveappend"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/tokenize"
)

// BranchSummary summarizes the branch being left for req.TargetID (from req.FromID, else
// the leaf the requester saw, else the current leaf) and appends the branch_summary entry
// where Pi's /tree navigation puts it: at the target, or at its parent when the target is
// a user message or a custom_message.
func (e *Engine) BranchSummary(ctx context.Context, req Request) (*Result, error) {
	var b branch
	j, res, err := e.open(branchJob, req, b.resolve)
	if j == nil {
		return res, err
	}
	entries, _, err := summarize.CollectBranch(j.src.Session, b.from, req.TargetID)
	if err != nil {
		return nil, &GuardError{Reason: err.Error()}
	}
	if len(entries) == 0 {
		return j.skip("nothing to summarize: the target is on the branch being left"), nil
	}
	window := j.src.Model.ContextWindow
	if window <= 0 {
		window = 128000
	}
	r := j.src.Release
	msgs, fo, _ := summarize.PrepareBranch(entries, window-j.cfg.BranchReserveTokens, tokenize.EstimateFor(r), r)
	res = j.res
	res.Summarized = len(msgs)
	res.PromptChars = len(summarize.SerializeConversation(msgs, r))
	if req.DryRun {
		return j.end(outcome.DryRun), nil
	}
	if err := j.file.CheckWritable(); err != nil {
		return nil, err
	}
	out, err := summarize.BranchSummary(ctx, e.Summarizer, msgs, fo, summarize.BranchOptions{CustomInstructions: req.Instructions, Release: r})
	if err != nil {
		return nil, err
	}
	res.LLMInputTokens, res.LLMCachedInputTokens, res.LLMOutputTokens, res.LLMCalls = out.InputTokens, out.CachedInputTokens, out.OutputTokens, out.Calls
	if err := checkSummary(out.Summary); err != nil {
		return nil, err
	}
	nb := liveappend.NewBranchSummary{ParentID: b.parent, Summary: out.Summary, ReadFiles: out.ReadFiles, ModifiedFiles: out.ModifiedFiles}
	if r.Has(pi.BranchFromLeaf) {
		nb.FromID = b.from // the leaf that was left (before 0.84.3: the summary's parent)
	}
	if r.Has(pi.SummaryUsage) {
		nb.Usage = summaryUsage(out)
	}
	ap, err := liveappend.BranchSummary(ctx, j.file, liveappend.ExpectOf(j.src.Session), nb)
	if errors.Is(err, sessionio.ErrChanged) {
		// The branch summary hangs off a fixed entry, not the leaf; but an agent that wrote
		// meanwhile is still on the branch being left, and its next entry would leave the
		// summary behind. Try again when the session is idle.
		return j.busy(BusyChanged, "busy: the session changed while its branch summary was written: "+err.Error()), nil
	}
	if err != nil {
		return nil, err
	}
	res.EntryID = ap.ID
	return j.appended(ap), nil
}

// branch is what a branch summary's opening finds: where the entry goes and which leaf
// is left.
type branch struct {
	parent, from string
}

// resolve is BranchSummary's lookup in its opening: the target (the entry hangs at it, or
// at its parent when it is a user or custom message), the summary an earlier delivery
// already appended there (which ends the job), and the leaf being left.
func (b *branch) resolve(j *job) (*Result, error) {
	req, s := j.req, j.src.Session
	target := s.Get(req.TargetID)
	if req.TargetID == "" || target == nil {
		return nil, &InputError{Err: fmt.Errorf("%s: --to %q: no entry with this id in the file", req.File, req.TargetID)}
	}
	b.parent = target.ID
	if target.IsMessage(sessionio.RoleUser) || target.Type == sessionio.TypeCustomMessage {
		b.parent = target.ParentID
	}
	j.res.ParentID = b.parent
	if done := findAfter(s, req.ExpectLeafID, func(e *sessionio.Entry) bool {
		return e.Type == sessionio.TypeBranchSummary && e.ParentID == b.parent
	}); done != nil {
		j.res.EntryID = done.ID
		j.res.Reason = fmt.Sprintf("branch summary %s at %s is already in the file (this request was done before)", done.ID, b.parent)
		return j.found(done.ID), nil
	}
	b.from = req.FromID
	if b.from == "" {
		b.from = req.ExpectLeafID
	}
	if b.from == "" {
		b.from = s.LeafID()
	}
	if s.Get(b.from) == nil {
		return nil, &InputError{Err: fmt.Errorf("%s: --from %q: no entry with this id in the file", req.File, b.from)}
	}
	if b.from == req.TargetID {
		return j.skip("the target is the leaf: nothing is left behind"), nil
	}
	return nil, nil
}
