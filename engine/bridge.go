package engine

import (
	"context"
	"fmt"
	"github.com/compactor-dev/compactor/sessionio/picontext"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/fileops"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/tokenize"
)

// BridgeRequest asks for a preparation extended to the cut Pi makes now, from inside Pi's
// session_before_compact hook (summarize.Bridge says why).
type BridgeRequest struct {
	File string
	// LeafID is Pi's leaf when the hook ran: the compaction's parent ("" = the file's leaf).
	LeafID string
	// FirstKeptEntryID is Pi's own cut (the hook's preparation.firstKeptEntryId).
	FirstKeptEntryID string
	// MaxTokens bounds the text the bridge adds (0: Settings.BridgeMaxTokens).
	MaxTokens int
	// Pi is the Pi release the session follows ("": the engine's setting).
	Pi string
	// Base is the session's base (base.go). A preparation made on the previous compaction's
	// own text while a model's base for that compaction was being made is bridged as it is,
	// and the bridged value leaves that base for the next summary (Prepared.LeftBase).
	Base *Base
}

// BridgeInfo says what a bridge added to a preparation.
type BridgeInfo struct {
	// FromEntryID is the preparation's own cut: the gap starts there.
	FromEntryID string `json:"fromEntryId"`
	// Messages and TokensEstimate (Pi's chars/4) measure the gap; Items and Sections what
	// the extract added to the summary.
	Messages       int `json:"messages"`
	TokensEstimate int `json:"tokensEstimate"`
	Items          int `json:"items"`
	Sections       int `json:"sections"`
	// DurationMS is the bridge's own time (read, extract, merge).
	DurationMS float64 `json:"durationMs"`
}

// StaleError is a preparation that cannot be bridged to the requested cut: it was made for
// another state of the session (another branch, compaction or instructions) or its cut
// lies after the requested one. Nothing is wrong with the file; the caller lets Pi compact
// by itself.
type StaleError struct{ Reason string }

func (e *StaleError) Error() string { return "stale preparation: " + e.Reason }

// Stale marks the error for the pipeline's bridge replies.
func (e *StaleError) Stale() bool { return true }

// Bridge extends prep, a preparation of the session, to the cut req names: the messages
// between prep's cut and that cut are summarized without a model (summarize.Bridge) and
// merged into prep's summary, and the file lists cover the whole span. The result is a
// Prepared for the new cut and Pi's current leaf, which the extension checks as it checks
// any preparation. It writes nothing and calls no model; it takes what reading the file
// takes plus a few milliseconds.
func (e *Engine) Bridge(ctx context.Context, req BridgeRequest, prep *Prepared) (*Prepared, error) {
	start := time.Now()
	if prep == nil || prep.V != PreparedVersion {
		return nil, &StaleError{Reason: "no preparation of this version"}
	}
	file, err := e.file(req.File)
	if err != nil {
		return nil, err
	}
	src, err := Load(req.File, Settings{Pi: set(req.Pi, e.Settings.Pi), Counter: tokenize.CounterEstimate}, LoadOptions{Leaf: req.LeafID, File: file})
	if err != nil {
		return nil, err
	}
	path := src.Path
	from, to, err := bridgeRange(src, req, prep)
	if err != nil {
		return nil, err
	}
	base, ok := strings.CutSuffix(prep.Summary, summarize.FormatFileOperations(prep.Details.ReadFiles, prep.Details.ModifiedFiles))
	if !ok {
		return nil, &StaleError{Reason: "the prepared summary does not end in its file lists"}
	}
	est := tokenize.EstimateFor(src.Release)
	gap := gapOf(path, from, to, src.Release, prep.Details)
	maxTokens := req.MaxTokens
	if maxTokens <= 0 {
		maxTokens = e.Settings.BridgeMaxTokens
	}
	br, err := summarize.Bridge(ctx, base, gap.msgs, maxTokens)
	if err != nil {
		return nil, err
	}
	read, modified := gap.fileOps.Lists()
	out := *prep
	out.LeafID = path[len(path)-1].ID
	out.FirstKeptEntryID = req.FirstKeptEntryID
	out.SummarizedEntryIDs = append(append([]string{}, prep.SummarizedEntryIDs...), gap.ids...)
	out.Summary = br.Text + summarize.FormatFileOperations(read, modified)
	out.Details = PreparedDetails{ReadFiles: nonNil(read), ModifiedFiles: nonNil(modified)}
	out.TokensBefore = cutpoint.ContextTokens(path, src.Release, est)
	out.KeptTokensEstimate = keptTokens(path, to, src.Release, est)
	out.SummaryTokensEstimate = est.Count(&sessionio.Message{Role: sessionio.RoleCompactionSummary, Summary: out.Summary})
	// The history of a bridged value is not a model's: a later preparation must not build
	// on it incrementally (it reads the compaction's summary as its previous summary).
	out.History, out.HistoryEndEntryID = "", ""
	model := modelTokens(path, src.Release, prep, est)
	out.SpanTokens = &SpanTokens{Model: model, Extract: gap.tokens}
	if prep.SpanTokens != nil {
		out.SpanTokens.Extract += prep.SpanTokens.Extract
	}
	out.leaveBase(src, req.Base, prep, from, len(gap.msgs) > 0 && model > 0)
	out.askBase = out.basis != nil && fastPace(src, prep, time.Now())
	out.Bridge = &BridgeInfo{FromEntryID: prep.FirstKeptEntryID, Messages: len(gap.msgs), TokensEstimate: gap.tokens,
		Items: br.Added, Sections: br.Sections, DurationMS: float64(time.Since(start).Microseconds()) / 1000}
	return &out, nil
}

// bridgeRange is the gap a bridge of prep to req's cut covers on src's path, [from, to),
// or why there is none: prep was made for another session, Pi's rules, branch or
// compaction (StaleError), or the requested cut is no valid cut on the path (InputError).
func bridgeRange(src *Source, req BridgeRequest, prep *Prepared) (from, to int, err error) {
	path := src.Path
	if src.Session.Header.ID != prep.SessionID {
		return 0, 0, &StaleError{Reason: fmt.Sprintf("prepared for session %s, the file is session %s", prep.SessionID, src.Session.Header.ID)}
	}
	if prep.PiVersion != "" && !sameRules(prep.PiVersion, src.Release) {
		return 0, 0, &StaleError{Reason: fmt.Sprintf("prepared by the rules of Pi %s, the session follows Pi %s", prep.PiVersion, src.Release)}
	}
	from, to = entryIndex(path, prep.FirstKeptEntryID), entryIndex(path, req.FirstKeptEntryID)
	switch {
	case entryIndex(path, prep.LeafID) < 0:
		return 0, 0, &StaleError{Reason: fmt.Sprintf("prepared at leaf %s, which is not on the branch", prep.LeafID)}
	case from < 0:
		return 0, 0, &StaleError{Reason: fmt.Sprintf("the prepared cut %s is not on the branch", prep.FirstKeptEntryID)}
	case to < 0:
		return 0, 0, &InputError{Err: fmt.Errorf("bridge: entry %s is not on the path to leaf %s", req.FirstKeptEntryID, path[len(path)-1].ID)}
	case !cutpoint.ValidCutAt(path, to, src.Release):
		return 0, 0, &InputError{Err: fmt.Errorf("bridge: entry %s is not a valid cut point (a tool result stays with its call)", req.FirstKeptEntryID)}
	case to < from:
		return 0, 0, &StaleError{Reason: fmt.Sprintf("the prepared cut %s lies after the requested cut %s", prep.FirstKeptEntryID, req.FirstKeptEntryID)}
	}
	latest := ""
	for i := len(path) - 1; i >= 0; i-- {
		if path[i].Type == sessionio.TypeCompaction {
			latest = path[i].ID
			break
		}
	}
	if prev := deref(prep.PreviousCompactionID); prev != latest {
		return 0, 0, &StaleError{Reason: fmt.Sprintf("prepared after compaction %q, the branch's latest is %q", prev, latest)}
	}
	return from, to, nil
}

// bridgeGap is what a bridge adds: the gap's messages and their entries, their estimated
// tokens, and the file lists of the preparation and the gap.
type bridgeGap struct {
	ids     []string
	msgs    []*sessionio.Message
	tokens  int
	fileOps *fileops.FileOps
}

// gapOf is the gap path[from:to) as Pi r summarizes it, with the file lists of details
// (the preparation's) and the gap.
func gapOf(path []*sessionio.Entry, from, to int, r pi.Release, details PreparedDetails) bridgeGap {
	g := bridgeGap{fileOps: fileops.New()}
	for _, gm := range gapMessages(path, from, to, r) {
		g.ids = append(g.ids, gm.id)
		g.msgs = append(g.msgs, gm.m)
	}
	g.tokens = addSpan(g.fileOps, details, g.msgs, r)
	return g
}

// modelTokens is how much of prep's span a model read: its SpanTokens, or for a
// preparation of an older version (made by its model) the span counted on path.
func modelTokens(path []*sessionio.Entry, r pi.Release, prep *Prepared, est tokenize.Counter) int {
	model := 0
	if prep.SpanTokens != nil {
		model = prep.SpanTokens.Model
	} else if sp, err := cutpoint.SpanAt(path, r, prep.FirstKeptEntryID); err == nil {
		for _, m := range sp.Messages {
			model += est.Count(m)
		}
	}
	return model
}

// leaveBase sets what the compaction Pi writes with bridged value out leaves for the next
// summary (LeftBase): a model's base (b, the session's) for the previous compaction that
// landed after the preparation prep was made on its own text; else, when the bridge added
// notes (addedNotes), the preparation's own text from its cut (at from), so that the next
// summary has the model read the gap rather than build on its notes.
func (out *Prepared) leaveBase(src *Source, b *Base, prep *Prepared, from int, addedNotes bool) {
	out.basis, out.leavesOwn = nil, false
	if bs := resolveBasis(src.Path, src.Release, b, src.Session.Header.ID); bs.source == SourceModel && (prep.BuiltOn == nil || prep.BuiltOn.SHA256 != SHA256(bs.text)) {
		out.basis = &bs
	} else if addedNotes {
		out.basis = &basis{text: prep.Summary, details: prep.Details, from: from, fromID: prep.FirstKeptEntryID, source: SourceModel, madeAt: prep.CreatedAt}
		out.leavesOwn = true
	}
}

// A bridged compaction's base job (a model reading what the text it leaves does not cover:
// the gap, or the preparation's span) is asked at once only when compactions come less than
// fastPaceLatencies summary latencies apart. At a slower pace the next compaction is
// prepared, and the next preparation reads the same entries anyway, in time: a job of its
// own would be a third request in the cycle. At a faster one the next compaction is
// likely answered by the extract, which would leave them a model's only a latency after it.
const fastPaceLatencies = 2

// fastPace reports whether the session compacts less than fastPaceLatencies summary
// latencies apart, judged by the cycle that ends now (since the path's latest compaction,
// or the session's start) and the latency of the preparation prep (from when it was asked
// to when it was made; a preparation not asked by a job says nothing: false).
func fastPace(src *Source, prep *Prepared, now time.Time) bool {
	latency := prep.CreatedAt.Sub(prep.RequestedAt)
	if prep.RequestedAt.IsZero() || latency <= 0 {
		return false
	}
	since := src.Session.Header.Timestamp
	if ci := latestCompaction(src.Path); ci >= 0 {
		since = src.Path[ci].Timestamp
	}
	at, err := time.Parse(time.RFC3339Nano, since)
	if err != nil {
		return true // no cycle to judge by: the span is a model's within a latency
	}
	return now.Sub(at) < fastPaceLatencies*latency
}

// AsksBaseJob reports whether the base a bridged value leaves (LeftBase) should be read by a
// model at once, by a base job (fastPace).
func (p *Prepared) AsksBaseJob() bool { return p.askBase }

// gapMessage is a message of a bridge's gap and the entry it came from.
type gapMessage struct {
	id string
	m  *sessionio.Message
}

// gapMessages are the messages of path[from:to) as Pi r's compaction summarizes them:
// compactions excluded, from 0.86 (SystemMessages) system messages too; from 0.87
// (ContextEdits) its projection's, from 0.80.4 (EntryMessages) the first message an entry
// puts into the context, before that the message made from the entry.
func gapMessages(path []*sessionio.Entry, from, to int, r pi.Release) []gapMessage {
	var out []gapMessage
	if r.Has(pi.ContextEdits) {
		for _, pe := range picontext.Project(path, r).Entries {
			if pe.Index < from || pe.Index >= to || pe.Entry.Type == sessionio.TypeCompaction {
				continue
			}
			for _, m := range pe.Messages {
				if m.Role != sessionio.RoleSystem {
					out = append(out, gapMessage{pe.Entry.ID, m})
				}
			}
		}
		return out
	}
	for _, en := range path[from:to] {
		if en.Type == sessionio.TypeCompaction {
			continue // a summary of a compaction is never summarized again (Pi's rule)
		}
		m := picontext.AsMessage(en)
		if r.Has(pi.EntryMessages) {
			m = nil
			if msgs := picontext.MessagesOf(en, r); len(msgs) > 0 {
				m = msgs[0]
			}
		}
		if m != nil && !(m.Role == sessionio.RoleSystem && r.Has(pi.SystemMessages)) {
			out = append(out, gapMessage{en.ID, m})
		}
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
