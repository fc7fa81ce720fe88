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
)

// Segments: a model's summary of one span alone. When the agent compacts faster than a
// model summarizes, the summary of a span cannot wait for the one of the span before it (it
// would land up to two latencies after its compaction, and the agent would read extracts of
// spans a model could have read). So a base job whose span follows spans still being
// summarized (BaseRequest.SpanOnly) reads its span alone, with no previous summary, and its
// summary is kept beside the base as a segment. The next summary builds on the base's text
// and every segment that continues it, oldest first: the spans they cover are a model's as
// soon as each lands. A segment is used only where it continues the text exactly (it
// summarizes the span that starts where the text ends, for the compaction on the branch it
// names, with the same entries and chain), checked on the path like the base itself. Joined
// texts are folded into one by a merge (BaseRequest.Merge) or by the next preparation, which
// reads them as its previous summary.

// maxSegments bounds the segments kept with a base: the oldest go first (a segment older
// than the base's text is never used again).
const maxSegments = 16

// Segment is a model's summary of one compaction's span alone.
type Segment struct {
	// Anchor is the compaction whose span it summarizes (its parent, cut, entries, chain and
	// digest, as a base names one).
	Anchor BaseAnchor `json:"anchor"`
	// FromEntryID is the span's first entry: where the text it continues must end.
	FromEntryID string `json:"fromEntryId"`
	// Summary is the model's text without file lists; Details are its file lists.
	Summary string          `json:"summary"`
	Details PreparedDetails `json:"details"`

	Messages       int       `json:"messages,omitempty"`
	TokensEstimate int       `json:"tokensEstimate,omitempty"`
	RequestedAt    time.Time `json:"requestedAt,omitzero"`
	CreatedAt      time.Time `json:"createdAt"`
	modelUsage
}

// modelUsage is what a model's summary of a base or a segment cost, as the endpoint reported
// it (summed over every call).
type modelUsage struct {
	LLMInputTokens       int `json:"llmInputTokens,omitempty"`
	LLMCachedInputTokens int `json:"llmCachedInputTokens,omitempty"`
	LLMOutputTokens      int `json:"llmOutputTokens,omitempty"`
	LLMCalls             int `json:"llmCalls,omitempty"`
}

func usageOf(input, cached, output, calls int) modelUsage {
	return modelUsage{LLMInputTokens: input, LLMCachedInputTokens: cached, LLMOutputTokens: output, LLMCalls: calls}
}

// parts is how many summaries the base's own text is (an empty text: none).
func (b *Base) parts() int {
	if b.Summary == "" {
		return 0
	}
	return 1
}

// SegmentSeparator joins a text and the segments that continue it.
const SegmentSeparator = "\n\n---\n\n"

// extendBySegments joins to bs (resolved on path, whose latest compaction the base stands
// for is at index upTo) the segments that continue it, oldest first: each for a compaction
// on path[:upTo+1] whose span starts where the text ends.
func extendBySegments(path []*sessionio.Entry, r pi.Release, upTo int, bs basis, segs []Segment) basis {
	if len(segs) == 0 || bs.from < 0 {
		return bs
	}
	type next struct {
		seg Segment
		cut int
	}
	byStart := map[int]next{}
	for _, s := range segs {
		ci := compactionNamed(path, upTo, s.Anchor)
		if ci < 0 {
			continue
		}
		sp, err := cutpoint.SpanAt(path[:ci], r, s.Anchor.FirstKeptEntryID)
		if err != nil || sp.StartIndex < 0 || sp.StartIndex >= len(path) || path[sp.StartIndex].ID != s.FromEntryID ||
			!slices.Equal(sp.EntryIDs, s.Anchor.SummarizedEntryIDs) || previousID(sp) != deref(s.Anchor.PreviousCompactionID) {
			continue
		}
		byStart[sp.StartIndex] = next{s, sp.CutIndex}
	}
	for {
		n, ok := byStart[bs.from]
		if !ok || n.cut <= bs.from {
			return bs
		}
		if bs.stored == nil {
			bs.stored = &storedText{text: bs.text, details: bs.details, fromID: path[bs.from].ID, source: bs.source, madeAt: bs.madeAt}
		}
		if bs.text == "" {
			bs.text = n.seg.Summary
		} else {
			bs.text += SegmentSeparator + n.seg.Summary
		}
		if bs.source == SourceNone {
			bs.source = SourceModel
		}
		bs.details = unionDetails(bs.details, n.seg.Details)
		bs.from = n.cut
		bs.parts++
		bs.segments++
		bs.consumed = append(bs.consumed, n.seg.Anchor)
		bs.extractOn = false // the anchor's extract was made on the text before these
		if n.seg.CreatedAt.After(bs.madeAt) {
			bs.madeAt = n.seg.CreatedAt
		}
	}
}

// compactionNamed is the index on path[:upTo+1] of the compaction a names, -1 if none.
func compactionNamed(path []*sessionio.Entry, upTo int, a BaseAnchor) int {
	for i := min(upTo, len(path)-1); i >= 0; i-- {
		e := path[i]
		if e.Type == sessionio.TypeCompaction && e.ParentID == a.LeafID && e.FirstKeptEntryID == a.FirstKeptEntryID && SHA256(e.Summary) == a.SummarySHA256 {
			return i
		}
	}
	return -1
}

// previousID is the id of the compaction before a span, "" for the first.
func previousID(sp *cutpoint.Span) string {
	if sp.Previous == nil {
		return ""
	}
	return sp.Previous.ID
}

func unionDetails(a, b PreparedDetails) PreparedDetails {
	add := func(list []string, more []string) []string {
		out := slices.Clone(list)
		for _, f := range more {
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
		return nonNil(out)
	}
	return PreparedDetails{ReadFiles: add(a.ReadFiles, b.ReadFiles), ModifiedFiles: add(a.ModifiedFiles, b.ModifiedFiles)}
}

// withoutConsumed are segs less those named in consumed.
func withoutConsumed(segs []Segment, consumed []BaseAnchor) []Segment {
	var out []Segment
	for _, s := range segs {
		if !slices.ContainsFunc(consumed, s.Anchor.Equal) {
			out = append(out, s)
		}
	}
	return out
}

// landSpan adds b's one segment to the stored base (current): the base it continues may
// have moved on meanwhile (an extract, a merge, another segment), which is why a segment is
// checked where it is used, not here. Nothing is stored without a base of the same session
// and rules, or when the segment is there already.
func (b *Base) landSpan(current *Base) (*Base, string) {
	if current == nil || current.V != BaseVersion || current.SessionID != b.SessionID || !b.sameRulesAs(current) {
		return nil, "moved-on"
	}
	seg := b.Segments[0]
	if slices.ContainsFunc(current.Segments, func(s Segment) bool { return s.Anchor.Equal(seg.Anchor) }) {
		return nil, "duplicate"
	}
	next := *current
	next.Segments = append(slices.Clone(current.Segments), seg)
	if n := len(next.Segments); n > maxSegments {
		next.Segments = next.Segments[n-maxSegments:]
	}
	return &next, ""
}

// makeSpan summarizes the span of the compaction target (sp, on pre, the path Pi compacted)
// alone: a value carrying one segment, for Land to add to the base.
func (e *Engine) makeSpan(ctx context.Context, j *job, req BaseRequest, target BaseAnchor, pre []*sessionio.Entry, sp *cutpoint.Span) (*Base, *Result, error) {
	r := j.src.Release
	fo := fileops.New()
	tokens := addSpan(fo, PreparedDetails{}, sp.Messages, r)
	cs := j.src.Settings(j.cfg.KeepRecentTokens, j.cfg.ReserveTokens)
	in := summarize.CompactionInput{MessagesToSummarize: sp.Messages, ReserveTokens: cs.ReserveTokens, Release: r, FileOps: fo}
	out, err := summarize.CompactionSummary(ctx, e.Summarizer, in)
	if err != nil {
		return nil, nil, err
	}
	if err := checkSummary(out.Summary); err != nil {
		return nil, nil, err
	}
	text, _, _ := withoutFileLists(out.Summary)
	now := time.Now().UTC()
	seg := Segment{Anchor: target, FromEntryID: pre[sp.StartIndex].ID, Summary: text,
		Details:  PreparedDetails{ReadFiles: nonNil(out.ReadFiles), ModifiedFiles: nonNil(out.ModifiedFiles)},
		Messages: len(sp.Messages), TokensEstimate: tokens, RequestedAt: req.RequestedAt, CreatedAt: now,
		modelUsage: usageOf(out.InputTokens, out.CachedInputTokens, out.OutputTokens, out.Calls)}
	b := &Base{V: BaseVersion, SessionID: j.src.Session.Header.ID, Anchor: target, Source: SourceModel, PiVersion: r.String(),
		Segments: []Segment{seg}, RequestedAt: req.RequestedAt, CreatedAt: now, spanOnly: true, modelUsage: seg.modelUsage}
	res := j.res
	res.FirstKeptEntryID = target.FirstKeptEntryID
	res.Summarized = len(sp.Messages)
	res.LLMInputTokens, res.LLMCachedInputTokens, res.LLMOutputTokens, res.LLMCalls = out.InputTokens, out.CachedInputTokens, out.OutputTokens, out.Calls
	res.Reason = fmt.Sprintf("a model's summary of the span of the compaction at %s alone (%d messages, %d tokens): the spans before it are being summarized", target.FirstKeptEntryID, len(sp.Messages), tokens)
	return b, j.end(outcome.Done), nil
}

// mergeBase folds the stored base's text and the segments that continue it (current, for
// the branch's latest compaction) into one summary: one request reading model text only.
func (e *Engine) mergeBase(ctx context.Context, j *job, req BaseRequest, current *Base) (*Base, *Result, error) {
	path, r, sid := j.src.Path, j.src.Release, j.src.Session.Header.ID
	if current == nil {
		return nil, j.skip("nothing to merge: the session has no base"), nil
	}
	bs := resolveBasis(path, r, current, sid)
	switch {
	case bs.refused != "":
		return nil, j.skip(fmt.Sprintf("%s: the session's base is not used, nothing to merge", bs.refused)), nil
	case bs.segments == 0 || bs.parts < 2:
		return nil, j.skip("nothing to merge: the base's text is one summary"), nil
	}
	cs := j.src.Settings(j.cfg.KeepRecentTokens, j.cfg.ReserveTokens)
	out, err := summarize.MergeSummaries(ctx, e.Summarizer, bs.text, cs.ReserveTokens, r)
	if err != nil {
		return nil, nil, err
	}
	if err := checkSummary(out.Text); err != nil {
		return nil, nil, err
	}
	text, _, _ := withoutFileLists(out.Text)
	b := &Base{V: BaseVersion, Store: current.Store, Path: current.Path, SessionID: sid, Anchor: current.Anchor, Summary: text, Details: bs.details,
		FromEntryID: bs.fromID, Source: bs.source, PiVersion: r.String(), BasedOnSHA256: SHA256(current.Summary), BasedOnFromEntryID: current.FromEntryID,
		RequestedAt: req.RequestedAt, CreatedAt: time.Now().UTC(), consumed: bs.consumed,
		modelUsage: usageOf(out.InputTokens, out.CachedInputTokens, out.OutputTokens, out.Calls)}
	res := j.res
	res.FirstKeptEntryID = current.Anchor.FirstKeptEntryID
	res.LLMInputTokens, res.LLMCachedInputTokens, res.LLMOutputTokens, res.LLMCalls = out.InputTokens, out.CachedInputTokens, out.OutputTokens, out.Calls
	res.Reason = fmt.Sprintf("a model merged %d summaries (%d segments) of the session's base into one", bs.parts, bs.segments)
	return b, j.end(outcome.Done), nil
}

// SpanOnly reports whether b carries one span's summary alone (a segment for Land to add),
// not a base.
func (b *Base) SpanOnly() bool { return b.spanOnly }

// PendingSpan is a compaction whose base job was asked for (Base.Pending).
type PendingSpan struct {
	// Cut is the compaction's firstKeptEntryId.
	Cut string    `json:"cut"`
	At  time.Time `json:"at"`
}

// pendingFor bounds how long a base job asked for counts as pending: one that never ended
// (its worker died, it was dead-lettered) stops holding the spans after it to their own
// text.
const pendingFor = 15 * time.Minute

// WithPending is b with the compaction at cut pending from now on (a base job asked for it).
func (b *Base) WithPending(cut string, now time.Time) *Base {
	next := *b
	next.Pending = append(livePending(b.Pending, now, cut), PendingSpan{Cut: cut, At: now.UTC()})
	return &next
}

// WithoutPending is b with the compaction at cut no longer pending (its job ended).
func (b *Base) WithoutPending(cut string) *Base {
	next := *b
	next.Pending = livePending(b.Pending, time.Now(), cut)
	return &next
}

// livePending are the entries of ps that are not stale, less the one for cut.
func livePending(ps []PendingSpan, now time.Time, cut string) []PendingSpan {
	var out []PendingSpan
	for _, p := range ps {
		if p.Cut != cut && now.Sub(p.At) < pendingFor {
			out = append(out, p)
		}
	}
	return out
}

// pendingBefore reports whether the compaction before the span sp (its previous
// compaction) has a base job pending in b.
func (b *Base) pendingBefore(sp *cutpoint.Span, now time.Time) bool {
	return sp.Previous != nil && b.pendingAt(sp.Previous.FirstKeptEntryID, now)
}

// pendingAt reports whether the compaction at cut has a base job pending in b.
func (b *Base) pendingAt(cut string, now time.Time) bool {
	if b == nil {
		return false
	}
	for _, p := range b.Pending {
		if p.Cut == cut && now.Sub(p.At) < pendingFor {
			return true
		}
	}
	return false
}
