package engine

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/fileops"
	"github.com/compactor-dev/compactor/summarize"
)

// Trimmed says what a compaction left out to end under the budget (contextWindow -
// reserveTokens): a summary plus kept part over it would make the agent compact again on
// its next turn, and again, without end.
type Trimmed struct {
	// Threshold is the budget; TokensUntrimmed the compacted context as first made
	// (summary plus kept part), TokensAfter as written.
	Threshold       int `json:"threshold"`
	TokensUntrimmed int `json:"tokensUntrimmed"`
	TokensAfter     int `json:"tokensAfter"`
	// The file lists in the summary: how many paths are listed of how many (the most
	// recently used are listed; the compaction's details keep them all).
	ReadFilesListed     int `json:"readFilesListed"`
	ReadFiles           int `json:"readFiles"`
	ModifiedFilesListed int `json:"modifiedFilesListed"`
	ModifiedFiles       int `json:"modifiedFiles"`
	// KeepRecentTokens, when set, is the smaller setting of a later cut the plan was made
	// again with (the kept part was too large); the result's firstKeptEntryId is that cut's.
	KeepRecentTokens int `json:"keepRecentTokens,omitempty"`
}

// String is the line a person reads.
func (t *Trimmed) String() string {
	var parts []string
	if t.KeepRecentTokens > 0 {
		parts = append(parts, fmt.Sprintf("cut later (keepRecentTokens %d)", t.KeepRecentTokens))
	}
	if t.ReadFilesListed < t.ReadFiles || t.ModifiedFilesListed < t.ModifiedFiles {
		parts = append(parts, fmt.Sprintf("listed the %d most recent of %d read files and %d of %d modified files (the details keep them all)",
			t.ReadFilesListed, t.ReadFiles, t.ModifiedFilesListed, t.ModifiedFiles))
	}
	return fmt.Sprintf("trimmed to fit the budget of %d tokens: %s; context %d -> %d tokens", t.Threshold, strings.Join(parts, "; "), t.TokensUntrimmed, t.TokensAfter)
}

// maxLaterCuts bounds how often a compaction is planned again with a later cut (each one
// summarizes the messages between the two cuts).
const maxLaterCuts = 2

// fit makes a compaction fit under the budget: when its summary plus its kept part is
// over contextWindow - reserveTokens it lists fewer files (the most recently used first,
// modified before read, with a line saying how many are left out), and when even no file
// list is not enough it plans a later cut within the policy's rules (a smaller
// keepRecentTokens) and summarizes the messages between the two cuts into the summary
// already made. If nothing fits, it refuses with a GuardError that names the sizes. in is
// the summarizer's input out was made from.
func (e *Engine) fit(ctx context.Context, src *Source, cs cutpoint.Settings, p *cutpoint.Plan,
	in summarize.CompactionInput, out summarize.CompactionOutput) (*cutpoint.Plan, summarize.CompactionOutput, *Trimmed, error) {
	threshold := cs.ContextWindow - cs.ReserveTokens
	count := func(summary string) int {
		return src.Counter.Count(&sessionio.Message{Role: sessionio.RoleCompactionSummary, Summary: summary})
	}
	untrimmed := count(out.Summary) + p.KeptTokens
	if untrimmed <= threshold {
		return p, out, nil, nil
	}
	tr := &Trimmed{Threshold: threshold, TokensUntrimmed: untrimmed}
	for cuts := 0; ; cuts++ {
		text := strings.TrimSuffix(out.Summary, summarize.FormatFileOperations(out.ReadFiles, out.ModifiedFiles))
		if summary, read, mod, ok := capFileLists(text, out.ReadFiles, out.ModifiedFiles, recency(p), threshold-p.KeptTokens, count); ok {
			out.Summary = summary
			tr.ReadFilesListed, tr.ReadFiles = read, len(out.ReadFiles)
			tr.ModifiedFilesListed, tr.ModifiedFiles = mod, len(out.ModifiedFiles)
			tr.TokensAfter = count(summary) + p.KeptTokens
			return p, out, tr, nil
		}
		textTokens := count(text)
		if cuts == maxLaterCuts || textTokens >= threshold {
			break
		}
		// Half of what the summary text leaves goes to the kept part, half to the lists.
		keep := min((threshold-textTokens)/2, p.KeptTokens-1)
		later := cs
		later.KeepRecentTokens = max(keep, 0)
		p2, err := planPath(src.Path, p.Policy, later, src.Counter)
		if err != nil {
			return nil, out, nil, err
		}
		if !p2.Prepared || p2.FirstKeptEntryIndex <= p.FirstKeptEntryIndex || len(cutpoint.CheckInvariants(src.Path, p2)) > 0 {
			break // no later cut the policy allows
		}
		in2 := laterInput(in, p2)
		if from, to := historyEndOf(p), historyEndOf(p2); to >= from && out.History != "" && out.History != summarize.NoPriorHistory {
			base := out.History
			in2.BaseHistory = &base
			in2.MessagesToSummarize = messagesBetween(src.Path, from, to, src.Release)
		}
		out2, err := summarize.CompactionSummary(ctx, e.Summarizer, in2)
		if err != nil {
			return nil, out, nil, err
		}
		out2.InputTokens += out.InputTokens
		out2.CachedInputTokens += out.CachedInputTokens
		out2.OutputTokens += out.OutputTokens
		out2.Calls += out.Calls
		p, in, out = p2, in2, out2
		tr.KeepRecentTokens = later.KeepRecentTokens
	}
	text := strings.TrimSuffix(out.Summary, summarize.FormatFileOperations(out.ReadFiles, out.ModifiedFiles))
	summaryTokens := count(out.Summary)
	after := summaryTokens + p.KeptTokens
	why := "the compacted context cannot fit under the budget"
	if after >= p.TokensBefore {
		why = fmt.Sprintf("the compacted context would not be smaller (%d tokens after, %d before) and cannot fit under the budget", after, p.TokensBefore)
	}
	return nil, out, nil, &GuardError{Reason: fmt.Sprintf(
		"%s: summary %d tokens (%d of them the lists of %d read and %d modified files) + kept part %d = %d tokens, over %d (window %d - reserve %d); neither shorter file lists nor a later cut bring it under",
		why, summaryTokens, summaryTokens-count(text), len(out.ReadFiles), len(out.ModifiedFiles), p.KeptTokens, after,
		threshold, cs.ContextWindow, cs.ReserveTokens)}
}

// laterInput is the summarizer's input for p, a later cut of the plan in was made for:
// the same previous summary, instructions and limits, p's span, and the file operations of
// both (what the caller added to in's, such as a hook compaction's lists, stays).
func laterInput(in summarize.CompactionInput, p *cutpoint.Plan) summarize.CompactionInput {
	fo := p.Ops()
	if in.FileOps != nil {
		for _, f := range in.FileOps.ReadSet() {
			fo.AddRead(f)
		}
		for _, f := range in.FileOps.WrittenSet() {
			fo.AddWritten(f)
		}
		for _, f := range in.FileOps.EditedSet() {
			fo.AddEdited(f)
		}
	}
	in.MessagesToSummarize, in.TurnPrefix, in.IsSplitTurn, in.FileOps, in.BaseHistory = p.Summarize, p.Prefix, p.IsSplitTurn, fo, nil
	return in
}

// historyEndOf is the path index where a plan's history part ends: the split turn's start,
// or the first kept entry.
func historyEndOf(p *cutpoint.Plan) int {
	if p.IsSplitTurn {
		return p.TurnStartIndex
	}
	return p.FirstKeptEntryIndex
}

// recency ranks the paths a plan's span touched by their last use (higher is more
// recent); paths only carried from a previous compaction rank lowest, in their order.
func recency(p *cutpoint.Plan) map[string]int {
	rank := map[string]int{}
	n := 0
	for _, set := range [][]string{p.FileOps.Read, p.FileOps.Written, p.FileOps.Edited} {
		for _, f := range set {
			if _, ok := rank[f]; !ok {
				rank[f] = n
				n++
			}
		}
	}
	for _, msgs := range [][]*sessionio.Message{p.Summarize, p.Prefix} {
		for _, m := range msgs {
			if m == nil || m.Role != sessionio.RoleAssistant {
				continue
			}
			ops := fileops.New()
			ops.AddFromMessage(m)
			for _, set := range [][]string{ops.ReadSet(), ops.WrittenSet(), ops.EditedSet()} {
				for _, f := range set {
					rank[f] = n
					n++
				}
			}
		}
	}
	return rank
}

// FitFileLists shortens the file lists of a compaction summary of plan p (text plus Pi's
// lists of read and modified files) until the summary costs at most room tokens, as
// count counts them: what a compaction does before anything else when it would leave the
// session over budget (the experiments replay it so). ok is false when not even the text
// with no list fits.
func FitFileLists(p *cutpoint.Plan, summary string, read, modified []string, room int, count func(string) int) (fitted string, readListed, modListed int, ok bool) {
	text := strings.TrimSuffix(summary, summarize.FormatFileOperations(read, modified))
	return capFileLists(text, read, modified, recency(p), room, count)
}

// capFileLists appends to text the longest file lists that keep the summary within room
// tokens: modified files before read files, each list's most recently used first, in Pi's
// tags, followed by a line that says how many of each are left out. ok is false when not
// even the line fits.
func capFileLists(text string, read, modified []string, rank map[string]int, room int, count func(string) int) (summary string, readListed, modListed int, ok bool) {
	byRecency := func(files []string) []string {
		out := slices.Clone(files)
		sort.SliceStable(out, func(i, j int) bool { return rank[out[i]] > rank[out[j]] })
		return out
	}
	mod, rd := byRecency(modified), byRecency(read)
	build := func(k int) (string, int, int) {
		m := min(k, len(mod))
		r := min(k-m, len(rd))
		s := text + summarize.FormatFileOperations(rd[:r], mod[:m])
		if r < len(rd) || m < len(mod) {
			s += fmt.Sprintf("\n\n(File lists shortened to fit the context budget: %d of %d read files and %d of %d modified files are not listed; these are the most recently used. The compaction's details keep every path.)",
				len(rd)-r, len(rd), len(mod)-m, len(mod))
		}
		return s, r, m
	}
	// The largest k whose summary fits (the size grows with k).
	k := sort.Search(len(mod)+len(rd)+1, func(k int) bool {
		s, _, _ := build(k)
		return count(s) > room
	}) - 1
	if k < 0 {
		return "", 0, 0, false
	}
	summary, readListed, modListed = build(k)
	return summary, readListed, modListed, true
}
