package engine

import (
	"context"
	"errors"
	"fmt"
	"github.com/compactor-dev/compactor/sessionio/picontext"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/outcome"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/activity"
	"github.com/compactor-dev/compactor/sessionio/liveappend"
	"github.com/compactor-dev/compactor/summarize"
)

// Compact plans, summarizes and appends one compaction entry, or says why not.
func (e *Engine) Compact(ctx context.Context, req Request) (*Result, error) {
	j, res, err := e.open(compactJob, req, foundCompaction)
	if j == nil {
		return res, err
	}
	p, cs, res, err := j.planCut()
	if res != nil || err != nil {
		return res, err
	}
	res = j.res
	res.FirstKeptEntryID = p.FirstKeptEntryID
	res.Summarized = len(p.MessagesToSummarize) + len(p.TurnPrefix)
	res.PromptChars = len(summarize.SerializeConversation(p.Summarize, p.Release)) + len(summarize.SerializeConversation(p.Prefix, p.Release))
	if req.DryRun {
		res.TokensAfter = p.KeptTokens
		return j.end(outcome.DryRun), nil
	}
	// Pay for a summary only if it can be written.
	if err := j.file.CheckWritable(); err != nil {
		return nil, err
	}
	prev := ""
	if p.PreviousSummary != nil {
		prev = *p.PreviousSummary
	}
	in := summarize.CompactionInput{
		MessagesToSummarize: p.Summarize, TurnPrefix: p.Prefix, IsSplitTurn: p.IsSplitTurn,
		PreviousSummary: prev, CustomInstructions: req.Instructions, ReserveTokens: cs.ReserveTokens, FileOps: p.Ops(),
		Release: p.Release,
	}
	out, err := summarize.CompactionSummary(ctx, e.Summarizer, in)
	if err != nil {
		return nil, err
	}
	// Never leave the session over budget (fit.go): it would compact again on its next turn.
	if p, out, res.Trimmed, err = e.fit(ctx, j.src, cs, p, in, out); err != nil {
		return nil, err
	}
	res.Plan, res.FirstKeptEntryID, res.Summarized = p, p.FirstKeptEntryID, len(p.MessagesToSummarize)+len(p.TurnPrefix)
	res.LLMInputTokens, res.LLMCachedInputTokens, res.LLMOutputTokens, res.LLMCalls = out.InputTokens, out.CachedInputTokens, out.OutputTokens, out.Calls
	if err := checkSummary(out.Summary); err != nil {
		return nil, err
	}
	return e.appendCompaction(ctx, j, p, cs, out)
}

// appendCompaction appends the compaction of plan p with summary out. When the agent wrote
// while the summary was being made, the summary is carried over to the newer leaf where it
// still holds (salvage), up to maxSalvage times.
func (e *Engine) appendCompaction(ctx context.Context, j *job, p *cutpoint.Plan, cs cutpoint.Settings, out summarize.SummaryOutput) (*Result, error) {
	res := j.res
	summaryTokens := j.src.Counter.Count(&sessionio.Message{Role: sessionio.RoleCompactionSummary, Summary: out.Summary})
	compaction := liveappend.NewCompaction{
		Summary: out.Summary, FirstKeptEntryID: p.FirstKeptEntryID, TokensBefore: p.TokensBefore,
		ReadFiles: out.ReadFiles, ModifiedFiles: out.ModifiedFiles,
	}
	piFields(&compaction, j.src, out)
	for attempt := 1; ; attempt++ {
		res.TokensAfter = summaryTokens + p.KeptTokens
		if res.TokensAfter >= p.TokensBefore {
			return nil, &GuardError{Reason: fmt.Sprintf("the compacted context would not be smaller (%d tokens after, %d before)", res.TokensAfter, p.TokensBefore)}
		}
		ap, err := liveappend.Compaction(ctx, j.file, liveappend.ExpectOf(j.src.Session), compaction)
		if err == nil {
			res.EntryID, res.ParentID = ap.ID, ap.ParentID
			return j.appended(ap), nil
		}
		if !errors.Is(err, sessionio.ErrChanged) {
			return nil, err
		}
		// The agent wrote while the summary was being made. The summary covers entries
		// before the cut; if the session only grew after the planned leaf, it still holds.
		if attempt > maxSalvage {
			return j.busy(BusyChanged, fmt.Sprintf("busy: the session changed %d times while its summary was written; it is compacted when idle", attempt)), nil
		}
		src, p2, cause, why, err := e.salvage(j, p)
		if err != nil {
			return nil, err
		}
		if why != "" {
			return j.busy(cause, "busy: "+why), nil
		}
		j.src, p = src, p2
		compaction.TokensBefore = p.TokensBefore
		piFields(&compaction, j.src, out)
		res.TokensBefore, res.Salvaged, res.Plan = p.TokensBefore, true, p
		res.OverBudget = cutpoint.OverBudget(p.TokensBefore, cs)
	}
}

// foundCompaction is Compact's lookup in its opening: the compaction the request asked
// for, already in the file (one whose parent is the leaf the requester saw, written after
// it), ends the job.
func foundCompaction(j *job) (*Result, error) {
	c := findAfter(j.src.Session, j.req.ExpectLeafID, func(e *sessionio.Entry) bool {
		return e.Type == sessionio.TypeCompaction && e.ParentID == j.req.ExpectLeafID
	})
	if c == nil {
		return nil, nil
	}
	res := j.res
	res.EntryID, res.ParentID, res.FirstKeptEntryID, res.TokensBefore = c.ID, c.ParentID, c.FirstKeptEntryID, int(c.TokensBefore)
	res.Reason = fmt.Sprintf("compaction %s of leaf %s is already in the file (this request was done before)", c.ID, j.req.ExpectLeafID)
	return j.found(c.ID), nil
}

// maxSalvage bounds how often one summary is carried over to a newer leaf.
const maxSalvage = 3

// salvage re-reads a session that changed after the job planned p and, if the paid
// summary still applies (the path only grew, nobody compacted, no turn in progress now),
// returns the new read and the plan moved to it: same cut, tokensBefore and the kept part
// counted again on the new path. Otherwise why says why not, and cause how the session
// is busy.
func (e *Engine) salvage(j *job, p *cutpoint.Plan) (_ *Source, _ *cutpoint.Plan, cause BusyCause, why string, _ error) {
	src, err := e.load(j.file, j.cfg)
	if err != nil {
		return nil, nil, "", "", err
	}
	if ok, why := extends(j.src.Path, src.Path); !ok {
		return nil, nil, BusyChanged, "the session changed while its summary was written: " + why, nil
	}
	act := activity.OnPath(src.Session, src.Path)
	if act.TurnInProgress {
		return nil, nil, BusyTurn, "turn in progress: " + act.Reason + " (the session changed while its summary was written)", nil
	}
	if act.TornLine > 0 {
		return nil, nil, BusyWrite, fmt.Sprintf("write in progress: line %d is incomplete (the session changed while its summary was written)", act.TornLine), nil
	}
	if e := editOfSummarized(src.Path[len(j.src.Path):], p); e != nil {
		return nil, nil, BusyChanged, fmt.Sprintf("the session changed while its summary was written: context edit %s changes %s, which the summary covers", e.ID, e.TargetID), nil
	}
	moved := *p
	moved.TokensBefore = cutpoint.ContextTokens(src.Path, src.Release, src.Counter)
	moved.KeptTokens = keptTokens(src.Path, p.FirstKeptEntryIndex, src.Release, src.Counter)
	if v := cutpoint.CheckInvariants(src.Path, &moved); len(v) > 0 {
		return nil, nil, BusyChanged, fmt.Sprintf("the cut no longer keeps its invariants on the new path (%s)", v[0]), nil
	}
	return src, &moved, "", "", nil
}

// piFields fills what the session's Pi writes into a compaction besides the fields every
// release writes: from 0.86 (SystemMessages) the systemMessage checkpoint (Pi's current
// system message of the context being compacted; liveappend.Compaction stamps it with
// the entry's time), from 0.81 (SummaryUsage) the summary's usage.
func piFields(compaction *liveappend.NewCompaction, src *Source, out summarize.SummaryOutput) {
	if src.Release.Has(pi.SystemMessages) {
		compaction.SystemMessage = picontext.CurrentSystemMessage(picontext.Project(src.Path, src.Release).Messages())
	}
	if src.Release.Has(pi.SummaryUsage) {
		compaction.Usage = summaryUsage(out)
	}
}

// summaryUsage is a summary's token usage in Pi's shape (pi-ai's Usage), nil when no model
// was called. compactor knows no prices: cost is 0, so Pi's session totals show the tokens
// of the summaries compactor made, at no cost it could vouch for.
func summaryUsage(out summarize.SummaryOutput) *sessionio.Usage {
	if out.Calls == 0 || out.InputTokens+out.OutputTokens == 0 {
		return nil
	}
	in := float64(out.InputTokens - out.CachedInputTokens)
	return &sessionio.Usage{Input: in, Output: float64(out.OutputTokens), CacheRead: float64(out.CachedInputTokens),
		TotalTokens: float64(out.InputTokens + out.OutputTokens)}
}

// editOfSummarized returns the first context edit among entries (appended after a plan was
// made) whose target the plan summarizes: from 0.87 (ContextEdits) it changes what the
// summary should have read (an omitted failure, a replaced message), so the summary no
// longer applies.
func editOfSummarized(entries []*sessionio.Entry, p *cutpoint.Plan) *sessionio.Entry {
	if !p.Release.Has(pi.ContextEdits) {
		return nil
	}
	summarized := map[string]bool{}
	for _, id := range p.MessagesToSummarize {
		summarized[id] = true
	}
	for _, id := range p.TurnPrefix {
		summarized[id] = true
	}
	for _, e := range entries {
		if e.Type == sessionio.TypeContextEdit && summarized[e.TargetID] {
			return e
		}
	}
	return nil
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
