package engine

import (
	"context"
	"fmt"
	"github.com/compactor-dev/compactor/sessionio/picontext"
	"slices"
	"time"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/outcome"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/tokenize"
)

// PreparedVersion is the version of the Prepared JSON this package writes.
const PreparedVersion = 1

// Prepared is a compaction made ahead of time for a live agent, without writing anything
// to its session. Pi's extension (extensions/pi) returns it from Pi's
// session_before_compact hook when it is still valid for the branch, and Pi appends the
// compaction entry itself from its in-memory leaf: no reload, no side branch, no wait.
// Its JSON is the value of the COMPACTOR_PREPARED bucket; the field names are the
// contract with the extension (extensions/pi/README.md, docs/live-agents.md).
type Prepared struct {
	V         int    `json:"v"`
	Store     string `json:"store"`
	Path      string `json:"path"`
	SessionID string `json:"sessionId"`
	// LeafID is the leaf the preparation was planned at.
	LeafID           string `json:"leafId"`
	FirstKeptEntryID string `json:"firstKeptEntryId"`
	// PreviousCompactionID is the latest compaction on the path at LeafID (null if none):
	// the preparation builds on its summary and starts where it kept.
	PreviousCompactionID *string `json:"previousCompactionId"`
	BoundaryStartEntryID string  `json:"boundaryStartEntryId"`
	// SummarizedEntryIDs are, in path order, the entries whose messages the summary covers
	// (the history, then the split turn's prefix).
	SummarizedEntryIDs []string        `json:"summarizedEntryIds"`
	TokensBefore       int             `json:"tokensBefore"`
	Summary            string          `json:"summary"`
	Details            PreparedDetails `json:"details"`
	// Estimates with Pi's chars/4 estimateTokens, as the extension checks the window with:
	// the kept part from FirstKeptEntryID to LeafID, and the summary as Pi will wrap it.
	KeptTokensEstimate    int    `json:"keptTokensEstimate"`
	SummaryTokensEstimate int    `json:"summaryTokensEstimate"`
	Policy                string `json:"policy"`
	Counter               string `json:"counter"`
	// PiVersion is the Pi release whose rules made the preparation: the cut, and the summary
	// request as that release would have asked for it (thinking left out or not, the output
	// limit, ...). A preparation is built on (PrepareIncremental) or bridged only for a
	// release with the same rules, and the extension takes it only in that Pi. Empty in
	// values of compactor before 0.3 (taken as they are).
	PiVersion          string           `json:"piVersion,omitempty"`
	Settings           PreparedSettings `json:"settings"`
	CustomInstructions string           `json:"customInstructions"`
	// RequestedAt is when the job asked for it (the requester's clock; zero when not
	// asked by a job): CreatedAt - RequestedAt is how long a live agent waits for a
	// preparation, which the extension learns to ask early enough.
	RequestedAt          time.Time `json:"requestedAt,omitzero"`
	CreatedAt            time.Time `json:"createdAt"`
	LLMInputTokens       int       `json:"llmInputTokens"`
	LLMCachedInputTokens int       `json:"llmCachedInputTokens"`
	LLMOutputTokens      int       `json:"llmOutputTokens"`
	LLMCalls             int       `json:"llmCalls"`
	// Incremental: the history was an earlier preparation's, updated with only the
	// messages after it; BasedOnLeafID is that preparation's leaf.
	Incremental   bool    `json:"incremental"`
	BasedOnLeafID *string `json:"basedOnLeafId"`
	// History is the summary's history part alone (no split-turn prefix, no file lists),
	// covering the entries up to HistoryEndEntryID (exclusive): what the next, incremental
	// preparation builds on.
	History           string `json:"history"`
	HistoryEndEntryID string `json:"historyEndEntryId"`
	// Bridge is set on a value extended to a later cut by Bridge (never stored).
	Bridge *BridgeInfo `json:"bridge,omitempty"`
	// BuiltOn says what the summary's older part is (base.go): the session's base, a model's
	// summary standing in for the previous compaction's text, or that text itself.
	BuiltOn *BuiltOn `json:"builtOn,omitempty"`
	// SpanTokens splits the span Pi's compaction summarizes (SummarizedEntryIDs) into what a
	// model read and what was only extracted.
	SpanTokens *SpanTokens `json:"spanTokens,omitempty"`

	// basis is what it was built on, for the base an extract leaves (Extract); extract says
	// it is one (made by Extract).
	basis   *basis
	extract bool
	// leavesOwn: a bridged preparation leaves its own text, before the bridge, as the base
	// (Bridge): nothing stored stands in for it.
	leavesOwn bool
	// askBase: a bridged value whose base is to be read by a model at once (AsksBaseJob).
	askBase bool
	// spanFrom is set on a preparation of its own span alone (compose.go): the entry where
	// that span starts, where the base's text must end for the two to be joined.
	spanFrom string
}

// PreparedDetails are the compaction's details as Pi stores them.
type PreparedDetails struct {
	ReadFiles     []string `json:"readFiles"`
	ModifiedFiles []string `json:"modifiedFiles"`
}

// PreparedSettings are the settings the preparation was planned with.
type PreparedSettings struct {
	KeepRecentTokens int `json:"keepRecentTokens"`
	ReserveTokens    int `json:"reserveTokens"`
	ContextWindow    int `json:"contextWindow"`
}

// Prepare plans a compaction of the session at its current leaf with the configured
// policy and summarizes it, writing nothing to the session file. A skip (nothing to
// prepare) returns no Prepared and a Result saying why. Unlike Compact it runs
// while a turn is in progress: that is when a live agent needs it.
//
// A plan that splits a turn is cut at the turn's start instead (cutpoint.WholeTurns):
// one summary request instead of two, since Pi's hook bridges the gap to its own, later
// cut anyway (Bridge).
//
// How a preparation builds on the session's previous one (prev) is Settings.PrepareUpdate.
// With PrepareFull (the default) it does not: the whole span is sent again, in entry order
// after the same system prompt, so the request starts with the previous request's text and
// a provider's prompt cache serves that part. With PrepareIncremental, when prev still
// applies (same previous compaction and range start, same policy and instructions, its
// history end on the current path at or before the new one), only the messages between
// its history end and the new one are sent, merged into its history with the update
// prompt, as Pi updates a previous summary: fewer input tokens where no cache helps.
func (e *Engine) Prepare(ctx context.Context, req Request, prev *Prepared) (*Prepared, *Result, error) {
	j, res, err := e.open(prepareJob, req, nil)
	if j == nil {
		return nil, res, err
	}
	p, cs, res, err := j.planCut()
	if res != nil || err != nil {
		return nil, res, err
	}
	src, res := j.src, j.res
	historyEnd := p.FirstKeptEntryIndex
	if p.IsSplitTurn {
		historyEnd = p.TurnStartIndex
	}
	in := preparationInput(src, p, cs, req)
	// What the summary builds on: the session's base when it stands for the previous
	// compaction (a model's summary in place of an extract's text), reading again the spans
	// no model has summarized yet (base.go).
	bs := resolveBasis(src.Path, src.Release, req.Base, src.Session.Header.ID)
	_, extractive := e.Summarizer.(*summarize.Extractive)
	spanAlone := !extractive && spanWhilePending(req.Base, bs, p, time.Now())
	var builtOn *BuiltOn
	if spanAlone {
		// the spans before this one are being read by a base job: this preparation reads its
		// own span alone, and is joined to that job's text once it lands (Compose)
		in.PreviousSummary = ""
	} else if builtOn, err = buildOnBasis(src, p, &bs, extractive, &in); err != nil {
		return nil, nil, err
	}
	var basedOn *string
	if j.cfg.PrepareUpdate != PrepareIncremental || spanAlone {
		prev = nil
	}
	if from, ok := incrementalFrom(prev, src, p, req, historyEnd, builtOn); ok {
		base := prev.History
		in.BaseHistory = &base
		in.MessagesToSummarize = messagesBetween(src.Path, from, historyEnd, src.Release)
		leaf := prev.LeafID
		basedOn = &leaf
	}
	out, err := summarize.CompactionSummary(ctx, e.Summarizer, in)
	if err != nil {
		return nil, nil, err
	}
	if err := checkSummary(out.Summary); err != nil {
		return nil, nil, err
	}
	// Never prepare a compaction that leaves the session over budget (fit.go).
	if p, out, res.Trimmed, err = e.fit(ctx, src, cs, p, in, out); err != nil {
		return nil, nil, err
	}
	res.Plan, historyEnd = p, historyEndOf(p) // a later cut moves the history's end
	pr := newPrepared(src, p, cs, req, out, extractive, src.Path[historyEnd].ID)
	pr.Incremental, pr.BasedOnLeafID, pr.BuiltOn, pr.basis = basedOn != nil, basedOn, builtOn, &bs
	if spanAlone {
		pr.spanFrom, pr.basis, pr.History, pr.HistoryEndEntryID = src.Path[p.BoundaryStartIndex].ID, nil, "", ""
	}
	res.FirstKeptEntryID = p.FirstKeptEntryID
	res.Summarized = len(pr.SummarizedEntryIDs)
	res.LLMInputTokens, res.LLMCachedInputTokens, res.LLMOutputTokens, res.LLMCalls = out.InputTokens, out.CachedInputTokens, out.OutputTokens, out.Calls
	res.TokensAfter = src.Counter.Count(&sessionio.Message{Role: sessionio.RoleCompactionSummary, Summary: out.Summary}) + p.KeptTokens
	if pr.Incremental {
		res.Reason = fmt.Sprintf("incremental: built on the preparation at leaf %s", prev.LeafID)
	}
	return pr, j.end(outcome.Done), nil // for a preparation: made and returned, nothing written
}

// preparationInput is the summary request of plan p: its spans, the previous summary, and
// the file lists (seeded from a previous compaction that came through Pi's hook).
func preparationInput(src *Source, p *cutpoint.Plan, cs cutpoint.Settings, req Request) summarize.CompactionInput {
	fo := p.Ops()
	if p.PreviousCompactionID != "" {
		// A previous compaction that came through Pi's hook (most likely one of ours) keeps
		// its file lists: Pi does not carry them forward, a preparation does.
		for _, e := range src.Path {
			if e.ID == p.PreviousCompactionID {
				fo.SeedFromHookCompaction(e)
			}
		}
	}
	in := summarize.CompactionInput{
		MessagesToSummarize: p.Summarize, TurnPrefix: p.Prefix, IsSplitTurn: p.IsSplitTurn,
		CustomInstructions: req.Instructions, ReserveTokens: cs.ReserveTokens, FileOps: fo,
		Release: src.Release,
	}
	if p.PreviousSummary != nil {
		in.PreviousSummary = *p.PreviousSummary
	}
	return in
}

// buildOnBasis makes the request in build on bs where bs stands for the previous
// compaction: bs's text as the previous summary, its file lists, and the spans after it
// that no model has summarized yet, read again. It returns what the summary is built on.
func buildOnBasis(src *Source, p *cutpoint.Plan, bs *basis, extractive bool, in *summarize.CompactionInput) (*BuiltOn, error) {
	readAgain := 0
	via := ""
	if extractive && bs.extractOn && bs.from < p.BoundaryStartIndex && p.PreviousCompactionID != "" {
		// The previous compaction's text is an extract made on this base: updating it gives the
		// notes of the spans after the base without extracting them again.
		via = p.PreviousCompactionID
	}
	if via == "" && (bs.source != SourceCompaction || bs.from != p.BoundaryStartIndex) {
		in.PreviousSummary = bs.text
		var older []*sessionio.Message
		if bs.from < p.BoundaryStartIndex {
			var err error
			if older, err = spansFrom(src.Path, src.Release, bs.from, latestCompaction(src.Path)); err != nil {
				return nil, fmt.Errorf("prepare: the base: %w", err)
			}
			in.MessagesToSummarize = append(older, in.MessagesToSummarize...)
		}
		readAgain = addSpan(in.FileOps, bs.details, older, src.Release)
	}
	builtOn := bs.builtOn(src.Path, readAgain)
	builtOn.Via = via
	return builtOn, nil
}

// newPrepared is the preparation of plan p with summary out, whose history ends before the
// entry historyEndID (what it is built on is set by the caller).
func newPrepared(src *Source, p *cutpoint.Plan, cs cutpoint.Settings, req Request, out summarize.SummaryOutput, extractive bool, historyEndID string) *Prepared {
	est := tokenize.EstimateFor(src.Release)
	span := 0
	for _, m := range append(append([]*sessionio.Message{}, p.Summarize...), p.Prefix...) {
		span += est.Count(m)
	}
	spanTokens := &SpanTokens{Model: span}
	if extractive {
		spanTokens = &SpanTokens{Extract: span}
	}
	pr := &Prepared{
		V: PreparedVersion, SessionID: src.Session.Header.ID, LeafID: src.Path[len(src.Path)-1].ID,
		FirstKeptEntryID: p.FirstKeptEntryID, BoundaryStartEntryID: p.BoundaryStartEntryID,
		SummarizedEntryIDs: append(append([]string{}, p.MessagesToSummarize...), p.TurnPrefix...),
		TokensBefore:       p.TokensBefore, Summary: out.Summary,
		Details:               PreparedDetails{ReadFiles: nonNil(out.ReadFiles), ModifiedFiles: nonNil(out.ModifiedFiles)},
		KeptTokensEstimate:    keptTokens(src.Path, p.FirstKeptEntryIndex, src.Release, est),
		SummaryTokensEstimate: est.Count(&sessionio.Message{Role: sessionio.RoleCompactionSummary, Summary: out.Summary}),
		Policy:                p.Policy, Counter: p.Counter, PiVersion: src.Release.String(),
		Settings:           PreparedSettings{KeepRecentTokens: cs.KeepRecentTokens, ReserveTokens: cs.ReserveTokens, ContextWindow: cs.ContextWindow},
		CustomInstructions: req.Instructions, CreatedAt: time.Now().UTC(),
		LLMInputTokens: out.InputTokens, LLMCachedInputTokens: out.CachedInputTokens, LLMOutputTokens: out.OutputTokens, LLMCalls: out.Calls,
		History: out.History, HistoryEndEntryID: historyEndID, SpanTokens: spanTokens,
	}
	if p.PreviousCompactionID != "" {
		id := p.PreviousCompactionID
		pr.PreviousCompactionID = &id
	}
	return pr
}

// sameRules reports whether a preparation made by the rules of Pi release made (its
// PiVersion) asks and cuts as r does: the same behaviours (pi.Release.Rules). An
// empty or unreadable version is not the same.
func sameRules(made string, r pi.Release) bool {
	m, err := pi.ParseRelease(made)
	return made != "" && err == nil && slices.Equal(m.Rules(), r.Rules())
}

// incrementalFrom reports whether prev can be the base of a preparation of plan p, and the
// path index its history ends at (where the new messages start).
func incrementalFrom(prev *Prepared, src *Source, p *cutpoint.Plan, req Request, historyEnd int, builtOn *BuiltOn) (int, bool) {
	if prev == nil || prev.V != PreparedVersion || prev.SessionID != src.Session.Header.ID || prev.History == "" ||
		prev.History == summarize.NoPriorHistory || prev.Policy != p.Policy || prev.CustomInstructions != req.Instructions ||
		prev.BoundaryStartEntryID != p.BoundaryStartEntryID || !sameRules(prev.PiVersion, src.Release) || !sameBuiltOn(prev.BuiltOn, builtOn, p) {
		return 0, false
	}
	prevComp := ""
	if prev.PreviousCompactionID != nil {
		prevComp = *prev.PreviousCompactionID
	}
	if prevComp != p.PreviousCompactionID {
		return 0, false
	}
	for i, e := range src.Path {
		if e.ID == prev.HistoryEndEntryID {
			return i, i > p.BoundaryStartIndex && i <= historyEnd && onPath(src.Path, prev.LeafID)
		}
	}
	return 0, false
}

// sameBuiltOn reports whether a preparation built on was made on the same text as one built
// on now (a preparation of an older version says nothing: it was made on the previous
// compaction's text, from the range's start).
func sameBuiltOn(was, now *BuiltOn, p *cutpoint.Plan) bool {
	if was == nil {
		return now.Source != SourceModel && now.FromEntryID == p.BoundaryStartEntryID && now.ReadAgainTokens == 0
	}
	return was.Source == now.Source && was.SHA256 == now.SHA256 && was.FromEntryID == now.FromEntryID
}

// messagesBetween returns the messages of path[from:to) as a summary reads them
// (gapMessages: compaction entries excluded; from 0.87 Pi reads its projection, context
// edits applied, system messages left to the compaction's checkpoint, entries outside the
// context left out).
func messagesBetween(path []*sessionio.Entry, from, to int, r pi.Release) []*sessionio.Message {
	gap := gapMessages(path, from, to, r)
	out := make([]*sessionio.Message, len(gap))
	for i, g := range gap {
		out[i] = g.m
	}
	return out
}

// keptTokens counts the context messages from path[first] to the end with c: from 0.87
// (ContextEdits) the projection's, system messages included, as Pi's cut weighs them; from
// 0.80.4 (EntryMessages) what every entry puts into the context (an older compaction's
// summary too, ResentSummary; the kept range's system messages not, SystemMessages); before,
// the messages a summary would read.
func keptTokens(path []*sessionio.Entry, first int, r pi.Release, c cutpoint.Counter) int {
	n := 0
	if r.Has(pi.ContextEdits) {
		for _, pe := range picontext.Project(path, r).Entries {
			if pe.Index >= first && pe.Entry.Type != sessionio.TypeCompaction {
				for _, m := range pe.Messages {
					n += c.Count(m)
				}
			}
		}
		return n
	}
	if r.Has(pi.EntryMessages) {
		for _, e := range path[min(first, len(path)):] {
			if e.Type == sessionio.TypeCompaction && !r.Has(pi.ResentSummary) {
				continue
			}
			for _, m := range picontext.MessagesOf(e, r) {
				if !(m.Role == sessionio.RoleSystem && r.Has(pi.SystemMessages)) {
					n += c.Count(m)
				}
			}
		}
		return n
	}
	for _, m := range messagesBetween(path, first, len(path), r) {
		n += c.Count(m)
	}
	return n
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
