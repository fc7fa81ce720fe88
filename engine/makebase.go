package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/outcome"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/fileops"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/tokenize"
)

// Making the model's summary for a session's base (base.go): which compaction it is for,
// what it reads, and the request.

// BaseRequest asks for the model's summary of what an extract answered (a job of kind
// "base").
type BaseRequest struct {
	File string
	// SessionID: as Request's.
	SessionID string
	// Anchor is the compaction the extract was handed to Pi for (its summary's SHA-256 is
	// the extract's).
	Anchor BaseAnchor
	// Settings: Pi, the counter and the output limit (ReserveTokens) as the extract's.
	Settings    Settings
	RequestedAt time.Time
	// SpanOnly: when the spans before the compaction's are not a model's yet (their own
	// summaries are being made), summarize its span alone, as a segment (segment.go).
	SpanOnly bool
	// Merge: fold the base's text and the segments that continue it into one summary (one
	// request reading only model text); Anchor is not used.
	Merge bool
}

// MakeBase makes the model's summary for the session's base (see the top of base.go):
// of the compaction req names, or of a newer one the stored base (current) already stands
// for (an extract answered Pi again while this job waited: one request covers both), from
// where the stored base's model text ends. It writes nothing: the caller stores the result
// through Land. A skip (the compaction is not on the branch, Pi wrote another one, the base
// already covers it, nothing to read) returns no Base and a Result saying why.
func (e *Engine) MakeBase(ctx context.Context, req BaseRequest, current *Base) (*Base, *Result, error) {
	j, res, err := e.open(baseJob, Request{File: req.File, SessionID: req.SessionID, Settings: req.Settings}, nil)
	if j == nil {
		return nil, res, err
	}
	src, path := j.src, j.src.Path
	sid := src.Session.Header.ID
	r := src.Release
	if req.Merge {
		return e.mergeBase(ctx, j, req, current)
	}
	target, rec := baseTarget(path, req.Anchor, current, sid)
	stored := rec // the base whose text the summary builds on
	if req.SpanOnly {
		// its own compaction's span, on what is stored now (the base of a newer compaction
		// holds the text the older spans have)
		target, rec, stored = spanTarget(req.Anchor, current, sid)
	}
	li := entryIndex(path, target.LeafID)
	if why := notCompactedThere(path, li, target, rec, r); why != "" {
		return nil, j.skip(why), nil
	}
	pre := path[:li+1] // the path Pi compacted
	bs, sp, msgs, why := baseReading(path, pre, r, &target, stored, current, sid)
	if why != "" {
		return nil, j.skip(why), nil
	}
	if req.SpanOnly && (bs.segments > 0 || bs.from < sp.StartIndex && current.pendingBefore(sp, time.Now())) {
		// the span before is being summarized, or the summaries before are segments a merge
		// folds: on a text that may change meanwhile, the span's summary lands as a segment
		return e.makeSpan(ctx, j, req, target, pre, sp)
	}
	fo := fileops.New()
	tokens := addSpan(fo, bs.details, msgs, r)
	cs := src.Settings(j.cfg.KeepRecentTokens, j.cfg.ReserveTokens)
	prevText, prevRead, prevModified := withoutFileLists(bs.text)
	for _, f := range prevRead {
		fo.AddRead(f)
	}
	for _, f := range prevModified {
		fo.AddEdited(f)
	}
	in := summarize.CompactionInput{MessagesToSummarize: msgs, PreviousSummary: prevText, ReserveTokens: cs.ReserveTokens, Release: r, FileOps: fo}
	out, err := summarize.CompactionSummary(ctx, e.Summarizer, in)
	if err != nil {
		return nil, nil, err
	}
	if err := checkSummary(out.Summary); err != nil {
		return nil, nil, err
	}
	text, _, _ := withoutFileLists(out.Summary)
	b := &Base{V: BaseVersion, SessionID: sid, Anchor: target, Summary: text,
		Details:     PreparedDetails{ReadFiles: nonNil(out.ReadFiles), ModifiedFiles: nonNil(out.ModifiedFiles)},
		FromEntryID: target.FirstKeptEntryID, Source: SourceModel, PiVersion: r.String(),
		Messages: len(msgs), TokensEstimate: tokens, RequestedAt: req.RequestedAt, CreatedAt: time.Now().UTC(), consumed: bs.consumed,
		modelUsage: usageOf(out.InputTokens, out.CachedInputTokens, out.OutputTokens, out.Calls)}
	b.BasedOnSHA256, b.BasedOnFromEntryID = bs.state()
	if rec != nil {
		b.Store, b.Path = rec.Store, rec.Path
	}
	res = j.res
	res.FirstKeptEntryID = target.FirstKeptEntryID
	res.Summarized = len(msgs)
	res.LLMInputTokens, res.LLMCachedInputTokens, res.LLMOutputTokens, res.LLMCalls = out.InputTokens, out.CachedInputTokens, out.OutputTokens, out.Calls
	res.Reason = fmt.Sprintf("a model's summary of %d messages (%d tokens) for the compaction at %s, on %s", len(msgs), tokens, target.FirstKeptEntryID, bs.source)
	return b, j.end(outcome.Done), nil
}

// entryIndex is the index of the entry id on path, -1 if it is not there.
func entryIndex(path []*sessionio.Entry, id string) int {
	for i, en := range path {
		if en.ID == id {
			return i
		}
	}
	return -1
}

// baseTarget is the compaction a base job makes the summary for: the one anchor names, or
// a newer one the stored base (current, returned as rec) already stands for.
func baseTarget(path []*sessionio.Entry, anchor BaseAnchor, current *Base, sid string) (target BaseAnchor, rec *Base) {
	target = anchor
	if current != nil && current.V == BaseVersion && current.SessionID == sid {
		if current.Anchor.names(anchor) || entryIndex(path, current.Anchor.LeafID) > entryIndex(path, anchor.LeafID) && entryIndex(path, anchor.LeafID) >= 0 {
			target, rec = current.Anchor, current
		}
	}
	return target, rec
}

// spanTarget is what a span-only job summarizes and on what: its own compaction (anchor),
// with the stored base (current) as the text before it; the base is also the record of the
// compaction when it stands for that one.
func spanTarget(anchor BaseAnchor, current *Base, sid string) (target BaseAnchor, rec, stored *Base) {
	if current == nil || current.V != BaseVersion || current.SessionID != sid {
		return anchor, nil, nil
	}
	if current.Anchor.names(anchor) {
		return current.Anchor, current, current
	}
	return anchor, nil, current
}

// notCompactedThere says why no base is made for target (at li on path; rec the stored
// base standing for it, nil if none), "" when one is: the leaf is not on the branch, Pi
// went on without the extract, the base is complete, or it was made by other rules.
func notCompactedThere(path []*sessionio.Entry, li int, target BaseAnchor, rec *Base, r pi.Release) string {
	if li < 0 {
		return fmt.Sprintf("moved-on: leaf %s, where the compaction was made, is not on the session's branch", target.LeafID)
	}
	if li+1 < len(path) {
		c := path[li+1]
		if c.Type != sessionio.TypeCompaction || c.FirstKeptEntryID != target.FirstKeptEntryID || SHA256(c.Summary) != target.SummarySHA256 {
			return fmt.Sprintf("not-used: Pi went on from leaf %s without the extract (entry %s is not its compaction)", target.LeafID, c.ID)
		}
	}
	if rec.Complete() {
		return "done: the base already holds a model's summary of compaction at " + target.FirstKeptEntryID
	}
	if rec != nil && rec.PiVersion != "" && !sameRules(rec.PiVersion, r) {
		return fmt.Sprintf("%s: the session's base was made by the rules of Pi %s, the job follows Pi %s", BaseRefusedOtherRules, rec.PiVersion, r)
	}
	return ""
}

// baseReading is what a base job reads on pre, the path Pi compacted: the basis it builds on
// and the messages from the basis's end through the compaction's span; or why it reads
// nothing. A target named by a job alone gets its span's entries from the file.
func baseReading(path, pre []*sessionio.Entry, r pi.Release, target *BaseAnchor, rec, current *Base, sid string) (bs basis, sp *cutpoint.Span, msgs []*sessionio.Message, why string) {
	sp, err := cutpoint.SpanAt(pre, r, target.FirstKeptEntryID)
	if err != nil {
		return bs, nil, nil, "moved-on: " + err.Error()
	}
	prevID := ""
	if sp.Previous != nil {
		prevID = sp.Previous.ID
	}
	if target.SummarizedEntryIDs == nil {
		// A job alone names the compaction by its parent, cut and digest: the rest is the file's.
		target.SummarizedEntryIDs, target.PreviousCompactionID = sp.EntryIDs, nil
		if prevID != "" {
			target.PreviousCompactionID = &prevID
		}
	}
	if prevID != deref(target.PreviousCompactionID) || !slices.Equal(sp.EntryIDs, target.SummarizedEntryIDs) {
		return bs, sp, nil, fmt.Sprintf("%s: the compaction at %s does not summarize what the extract did", BaseRefusedEntriesDiffer, target.FirstKeptEntryID)
	}
	if rec != nil {
		bs = basis{text: rec.Summary, details: rec.Details, from: entryIndex(path, rec.FromEntryID), fromID: rec.FromEntryID, source: rec.Source, parts: rec.parts()}
		if bs.from >= sp.CutIndex && rec.Source == SourceModel {
			return bs, sp, nil, "done: the base holds a model's summary of the compaction at " + target.FirstKeptEntryID
		}
		// a bridged preparation's own text ends inside the span it was bridged over: the job
		// reads the gap after it
		if bs.from < 0 || bs.from > sp.StartIndex && (rec.Source != SourceModel || bs.from >= sp.CutIndex) {
			return bs, sp, nil, fmt.Sprintf("%s: the base's text ends at %s, not on the branch before the compaction's span", BaseRefusedChainDiffers, rec.FromEntryID)
		}
		bs = extendBySegments(pre, r, len(pre)-1, bs, rec.Segments).namedOn(pre)
	} else {
		bs = resolveBasis(pre, r, current, sid)
	}
	older, err := spansFrom(pre, r, bs.from, latestCompaction(pre))
	if bs.from >= sp.StartIndex {
		older, err = nil, nil
	}
	if err != nil {
		return bs, sp, nil, fmt.Sprintf("%s: %v", BaseRefusedChainDiffers, err)
	}
	if bs.from >= sp.CutIndex {
		return bs, sp, nil, "done: the base and its segments hold a model's summary of the compaction at " + target.FirstKeptEntryID
	}
	msgs = append(older, spanFrom(pre, sp, bs.from)...)
	if len(msgs) == 0 {
		return bs, sp, nil, "nothing to summarize: the compaction summarized no message"
	}
	return bs, sp, msgs, ""
}

// addSpan adds to fo the file lists of details and those the messages msgs mention, and
// returns msgs' estimated tokens (Pi r's chars/4).
func addSpan(fo *fileops.FileOps, details PreparedDetails, msgs []*sessionio.Message, r pi.Release) int {
	for _, f := range details.ReadFiles {
		fo.AddRead(f)
	}
	for _, f := range details.ModifiedFiles {
		fo.AddEdited(f)
	}
	est := tokenize.EstimateFor(r)
	tokens := 0
	for _, m := range msgs {
		fo.AddFromMessage(m)
		if r.Has(pi.NestedCallsFileOps) {
			fo.AddFromNestedCalls(m)
		}
		tokens += est.Count(m)
	}
	return tokens
}
