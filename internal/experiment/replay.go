package experiment

import (
	"context"
	"fmt"
	"github.com/compactor-dev/compactor/sessionio/picontext"
	"strings"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/engine"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/fileops"
	"github.com/compactor-dev/compactor/sessionio/jsjson"
	"github.com/compactor-dev/compactor/summarize"
)

// checkContextHook, when set (tests), is called after every replay step with the replayed
// path and the context size the replay tracks incrementally, so a test can recompute it.
var checkContextHook func(path []*sessionio.Entry, tokens int)

// isCheckpoint reports whether Pi would check the budget after orig[i]: at the end of an
// agent run (an assistant message that does not stop for tool use), just before the
// user's next prompt, and at the end of the session. Pi never compacts between the turns
// of one run, and a background service only sees a session at rest.
func isCheckpoint(orig []*sessionio.Entry, i int) bool {
	if i == len(orig)-1 {
		return true
	}
	if e := orig[i]; e.IsMessage(sessionio.RoleAssistant) && e.Message.StopReason != "toolUse" {
		return true
	}
	return orig[i+1].IsMessage(sessionio.RoleUser)
}

// replay grows the session's current path entry by entry and compacts it with the policy
// whenever it is over budget at a checkpoint.
//
// The context size is the counter's count of every context message (the latest
// compaction's summary plus every message from its first kept entry on). Pi's own formula
// takes the last assistant's recorded usage instead, but after a compaction that exists
// only in the replay the recorded usage still measures the uncompacted context, so the
// replay never uses it. It is tracked incrementally: each entry is counted once.
func (r *sessionRunner) replay(ctx context.Context, ss *session, policy string, keep int, sum string) (ReplayRow, error) {
	pol, err := cutpoint.ByName(policy)
	if err != nil {
		return ReplayRow{}, err
	}
	if sum == SummarizerRecorded {
		return r.recorded(ctx, ss, policy, keep)
	}
	st := ss.settings(r.cfg, keep)
	run := &replayRun{r: r, ss: ss, pol: pol, st: st, budget: st.ContextWindow - st.ReserveTokens, sum: sum, usage: &usageCounter{}}
	run.row = ReplayRow{File: ss.name, SessionID: ss.s.Header.ID, Policy: policy, KeepRecentTokens: keep, Summarizer: sum,
		ContextWindow: st.ContextWindow, Budget: run.budget}
	if r.cfg.Eval {
		run.ev = &evaluator{numbers: ss.numbers, texts: ss.texts}
	}

	orig := make([]*sessionio.Entry, 0, len(ss.path))
	for _, e := range ss.path {
		if e.Type != sessionio.TypeCompaction {
			orig = append(orig, e)
		}
	}
	run.row.Entries = len(orig)
	run.rp = make([]*sessionio.Entry, 0, len(orig)+16)
	for i, e := range orig {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return run.row, err
			}
		}
		run.grow(e)
		if run.tokens <= run.budget || !isCheckpoint(orig, i) {
			continue
		}
		if err := run.compact(ctx, e); err != nil {
			return run.row, err
		}
	}
	return run.finish(), nil
}

// replayRun is one replay of a session with one policy, keep setting and summarizer: the
// path grown so far, its context size, and the row it fills.
type replayRun struct {
	r      *sessionRunner
	ss     *session
	pol    cutpoint.Policy
	st     cutpoint.Settings
	budget int
	sum    string
	usage  *usageCounter
	ev     *evaluator
	row    ReplayRow
	rp     []*sessionio.Entry // the replayed path
	tokens int                // current context size
	from   int                // index in rp of the last compaction's first kept entry
}

// grow appends e to the replayed path and counts the context again.
func (run *replayRun) grow(e *sessionio.Entry) {
	ss := run.ss
	run.rp = append(run.rp, e)
	run.tokens += ss.entryTokens(e)
	if e.Type == sessionio.TypeContextEdit && ss.src.Release.Has(pi.ContextEdits) {
		// From Pi 0.87 an edit changes what an earlier entry weighs; count the context again.
		run.tokens = 0
		for _, m := range picontext.Project(run.rp[run.from:], ss.src.Release).Messages() {
			run.tokens += ss.mc.Count(m)
		}
	}
	run.row.MaxContextTokens = max(run.row.MaxContextTokens, run.tokens)
	if checkContextHook != nil {
		checkContextHook(run.rp, run.tokens)
	}
}

// compact plans, summarizes and appends a compaction at e, a checkpoint over budget, as
// the service would; a plan that cannot be made, or a compaction that would not shrink
// the context, is counted and left out.
func (run *replayRun) compact(ctx context.Context, e *sessionio.Entry) error {
	ss, row, policy := run.ss, &run.row, run.row.Policy
	// Plan on the part of the path from the last compaction's first kept entry on:
	// nothing before it can be summarized again or enter the context, so every
	// policy and the invariant check see the same range, context and previous
	// compaction, and a long replay does not re-read its whole history per plan.
	sub := run.rp[run.from:]
	p, err := run.pol.Plan(sub, run.st, ss.mc)
	if err != nil {
		return fmt.Errorf("replay %s: plan at entry %s: %w", policy, e.ID, err)
	}
	if !p.Prepared || (len(p.Summarize) == 0 && len(p.Prefix) == 0) {
		row.Stuck++
		return nil
	}
	if v := cutpoint.CheckInvariants(sub, p); len(v) > 0 {
		if row.Violations == 0 {
			row.Violation = v[0].String()
		}
		row.Violations += len(v)
	}
	row.SummarizerTokens += ss.cost(p)
	if p.IsSplitTurn && len(p.Prefix) > 0 && len(p.Summarize) == 0 && p.PreviousSummary != nil {
		row.DroppedSummaries++
	}
	summary, readFiles, modifiedFiles, err := run.r.summary(ctx, ss, p, run.sum, run.usage)
	if err != nil {
		return fmt.Errorf("replay %s: summarize at entry %s: %w", policy, e.ID, err)
	}
	kept := 0
	for _, k := range sub[p.FirstKeptEntryIndex:] {
		kept += ss.entryTokens(k)
	}
	// Like the service, list fewer files rather than leave the session over budget
	// (engine.FitFileLists; the service may also cut later, which the replay does not).
	text := strings.TrimSuffix(summary, summarize.FormatFileOperations(readFiles, modifiedFiles))
	if ss.summaryTokens(summary)+kept > run.budget {
		if fitted, _, _, ok := engine.FitFileLists(p, summary, readFiles, modifiedFiles, run.budget-kept, ss.summaryTokens); ok {
			summary = fitted
			row.ShortenedLists++
		}
	}
	comp, err := compactionEntry(fmt.Sprintf("replay-compaction-%d", row.Compactions+row.Refused+1), e,
		summary, p.FirstKeptEntryID, run.tokens, readFiles, modifiedFiles)
	if err != nil {
		return err
	}
	summaryTokens := ss.mc.Count(picontext.AsMessage(comp))
	after := summaryTokens + kept
	if after >= run.tokens {
		row.Refused++
		return nil
	}
	if run.ev != nil {
		run.ev.compacted(p, comp, sub[p.FirstKeptEntryIndex:], summaryTokens, ss.text(summary)-ss.text(text))
	}
	run.appended(p.FirstKeptEntryIndex, comp, kept, after)
	return nil
}

// appended takes the compaction comp into the replayed path: the context is now its
// summary and the kept entries from firstKept (an index into the range planned on) on.
func (run *replayRun) appended(firstKept int, comp *sessionio.Entry, kept, after int) {
	row := &run.row
	run.from += firstKept
	run.rp = append(run.rp, comp)
	run.tokens = after
	row.Compactions++
	row.KeptTokensSum += kept
	if row.Compactions == 1 || kept < row.MinKeptTokens {
		row.MinKeptTokens = kept
	}
	if run.tokens > run.budget {
		row.StillOverBudget++
	}
	if checkContextHook != nil {
		checkContextHook(run.rp, run.tokens)
	}
}

// finish completes the row: the final context, the mean kept, the LLM's usage and the
// evaluation.
func (run *replayRun) finish() ReplayRow {
	row := run.row
	row.FinalContextTokens = run.tokens
	if row.Compactions > 0 {
		row.MeanKeptTokens = roundDiv(row.KeptTokensSum, row.Compactions)
	}
	row.LLMCalls, row.LLMInputTokens, row.LLMCachedInputTokens, row.LLMOutputTokens = run.usage.totals()
	if run.ev != nil {
		row.Eval = run.ev.result()
	}
	return row
}

func roundDiv(a, b int) int { return (a + b/2) / b }

// cost is what the summarizer reads for a plan, as summarize.CompactionSummary sends it:
// a split turn with a prefix sends the prefix, and the history with the previous summary
// only when there is history (otherwise "No prior history." stands in and the previous
// summary is not sent); any other plan sends the history with the previous summary.
func (ss *session) cost(p *cutpoint.Plan) int {
	hist := 0
	for _, m := range p.Summarize {
		hist += ss.ser.get(m)
	}
	if p.PreviousSummary != nil {
		hist += ss.text(*p.PreviousSummary)
	}
	if p.IsSplitTurn && len(p.Prefix) > 0 {
		pre := 0
		for _, m := range p.Prefix {
			pre += ss.ser.get(m)
		}
		if len(p.Summarize) == 0 {
			return pre
		}
		return hist + pre
	}
	return hist
}

// summaryTokens counts a compaction summary as it enters the context.
func (ss *session) summaryTokens(summary string) int {
	return ss.mc.Count(&sessionio.Message{Role: sessionio.RoleCompactionSummary, Summary: summary})
}

// summary writes the replayed compaction's summary with the summarizer named sum; the
// LLM's usage is added to usage.
func (r *sessionRunner) summary(ctx context.Context, ss *session, p *cutpoint.Plan, sum string, usage *usageCounter) (string, []string, []string, error) {
	var s summarize.Summarizer
	switch sum {
	case SummarizerNone:
		return r.standInSummary(ss), p.FileOps.ReadFiles, p.FileOps.ModifiedFiles, nil
	case SummarizerLLM:
		s = usage.wrap(r.cfg.LLM)
	default:
		s = r.cfg.Extractive
	}
	prev := ""
	if p.PreviousSummary != nil {
		prev = *p.PreviousSummary
	}
	fo := p.Ops()
	out, err := summarize.CompactionSummary(ctx, s, summarize.CompactionInput{
		MessagesToSummarize: p.Summarize, TurnPrefix: p.Prefix, IsSplitTurn: p.IsSplitTurn,
		PreviousSummary: prev, ReserveTokens: r.cfg.ReserveTokens, FileOps: fo, Release: ss.src.Release,
	})
	if err != nil {
		return "", nil, nil, err
	}
	return out.Summary, out.ReadFiles, out.ModifiedFiles, nil
}

// compactionEntry builds an in-memory compaction entry as Pi would append it after leaf,
// with Raw written like Pi's line so picontext.AsMessage and picontext.Build read it.
func compactionEntry(id string, leaf *sessionio.Entry, summary, firstKept string, tokensBefore int, readFiles, modifiedFiles []string) (*sessionio.Entry, error) {
	if readFiles == nil {
		readFiles = []string{}
	}
	if modifiedFiles == nil {
		modifiedFiles = []string{}
	}
	details, err := jsjson.Marshal(jsjson.Fields{{Key: "readFiles", Value: readFiles}, {Key: "modifiedFiles", Value: modifiedFiles}})
	if err != nil {
		return nil, fmt.Errorf("replay: compaction details: %w", err)
	}
	raw, err := jsjson.Marshal(jsjson.Fields{
		{Key: "type", Value: sessionio.TypeCompaction},
		{Key: "id", Value: id},
		{Key: "parentId", Value: leaf.ID},
		{Key: "timestamp", Value: leaf.Timestamp},
		{Key: "summary", Value: summary},
		{Key: "firstKeptEntryId", Value: firstKept},
		{Key: "tokensBefore", Value: tokensBefore},
		{Key: "details", Value: jsjson.Fields{{Key: "readFiles", Value: readFiles}, {Key: "modifiedFiles", Value: modifiedFiles}}},
		{Key: "fromHook", Value: false},
	})
	if err != nil {
		return nil, fmt.Errorf("replay: compaction entry: %w", err)
	}
	return &sessionio.Entry{
		Type: sessionio.TypeCompaction, ID: id, ParentID: leaf.ID, Timestamp: leaf.Timestamp, Raw: raw,
		Summary: summary, FirstKeptEntryID: firstKept, TokensBefore: float64(tokensBefore), Details: details,
	}, nil
}

// recorded replays the session's own compactions (SummarizerRecorded): each compaction on its
// path, with its summary and its cut, as the agent continued from it. Its span is what Pi
// summarized for that cut (cutpoint.SpanAt); the context after it is its summary and the
// entries it kept, up to it.
func (r *sessionRunner) recorded(ctx context.Context, ss *session, policy string, keep int) (ReplayRow, error) {
	st := ss.settings(r.cfg, keep)
	row := ReplayRow{File: ss.name, SessionID: ss.s.Header.ID, Policy: policy, KeepRecentTokens: keep, Summarizer: SummarizerRecorded,
		ContextWindow: st.ContextWindow, Budget: st.ContextWindow - st.ReserveTokens}
	var ev *evaluator
	if r.cfg.Eval {
		ev = &evaluator{numbers: ss.numbers, texts: ss.texts}
	}
	path := ss.path
	tokens := 0
	for i, e := range path {
		if err := ctx.Err(); err != nil {
			return row, err
		}
		if e.Type != sessionio.TypeCompaction {
			row.Entries++
			tokens += ss.entryTokens(e)
			row.MaxContextTokens = max(row.MaxContextTokens, tokens)
			continue
		}
		sp, err := cutpoint.SpanAt(path[:i], ss.src.Release, e.FirstKeptEntryID)
		if err != nil {
			row.Refused++ // a compaction whose cut is not where Pi could cut: not evaluated
			continue
		}
		fo := fileops.New()
		fo.SeedFromCompaction(e)
		fo.SeedFromHookCompaction(e)
		read, modified := fo.Lists()
		text := strings.TrimSuffix(e.Summary, summarize.FormatFileOperations(read, modified))
		kept := path[sp.CutIndex:i]
		summaryTokens := ss.summaryTokens(e.Summary)
		kt := 0
		for _, k := range kept {
			kt += ss.entryTokens(k)
		}
		if ev != nil {
			ev.compacted(&cutpoint.Plan{Summarize: sp.Messages}, e, kept, summaryTokens, ss.text(e.Summary)-ss.text(text))
		}
		row.Compactions++
		row.KeptTokensSum += kt
		if row.Compactions == 1 || kt < row.MinKeptTokens {
			row.MinKeptTokens = kt
		}
		tokens = summaryTokens + kt
	}
	row.FinalContextTokens = tokens
	if row.Compactions > 0 {
		row.MeanKeptTokens = roundDiv(row.KeptTokensSum, row.Compactions)
	}
	if ev != nil {
		row.Eval = ev.result()
	}
	return row, nil
}
