package engine

import (
	"fmt"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/tokenize"
)

// A preparation made while the previous compaction's base job is in flight. That job reads
// the spans the base's text does not cover yet; a preparation reading them too would pay
// for them twice, and the two requests race. So the preparation reads its own span alone
// (from the previous compaction's kept boundary), with no previous summary, and waits beside
// the base (Base.Awaiting) until the base's text reaches its span: then the two are joined,
// as segments are, into the preparation Pi's hook takes (Compose). Whichever lands second,
// the base job or the preparation, joins them; nothing is asked of a model to do it.

// SpanAlone reports whether p is a preparation of its own span alone, to be joined to the
// session's base before Pi's hook can take it.
func (p *Prepared) SpanAlone() bool { return p != nil && p.spanFrom != "" }

// Awaiting is a preparation of one span alone kept beside the base (Base.Awaiting).
type Awaiting struct {
	// FromEntryID is where its span starts: the base's text must end there.
	FromEntryID string   `json:"fromEntryId"`
	Prepared    Prepared `json:"prepared"`
}

// AwaitingOf is the record of a span-alone preparation p (SpanAlone), nil for any other.
func AwaitingOf(p *Prepared) *Awaiting {
	if !p.SpanAlone() {
		return nil
	}
	return &Awaiting{FromEntryID: p.spanFrom, Prepared: *p}
}

// spanWhilePending reports whether a preparation of plan p on basis bs would read spans
// again that the base job of the branch's latest compaction is reading now (b.Pending).
func spanWhilePending(b *Base, bs basis, p *cutpoint.Plan, now time.Time) bool {
	return bs.refused == "" && bs.latest != nil && p.PreviousCompactionID != "" && bs.from < p.BoundaryStartIndex &&
		b.pendingAt(bs.latest.FirstKeptEntryID, now)
}

// Compose joins the span-alone preparation a to the session's base b on the session file
// (read by the rules of release piVersion, "" for the engine's): the base's text and the
// segments that continue it, then a's summary, with the file lists of both. It returns the
// preparation for Pi's hook, or in a few words why not yet (the base's text does not reach
// a's span) or never (a was made for another compaction, or the base is refused).
func (e *Engine) Compose(file, piVersion string, a *Awaiting, b *Base) (*Prepared, string, error) {
	sp := a.Prepared
	f, err := e.file(file)
	if err != nil {
		return nil, "", fmt.Errorf("compose: %w", err)
	}
	src, err := Load(file, Settings{Pi: set(piVersion, e.Settings.Pi), Counter: tokenize.CounterEstimate}, LoadOptions{File: f})
	if err != nil {
		return nil, "", fmt.Errorf("compose: %w", err)
	}
	path := src.Path
	if src.Session.Header.ID != sp.SessionID || (sp.PiVersion != "" && !sameRules(sp.PiVersion, src.Release)) {
		return nil, "another session or rules", nil
	}
	ci := latestCompaction(path)
	switch {
	case entryIndex(path, sp.LeafID) < 0:
		return nil, "its leaf is not on the branch", nil
	case ci < 0 || path[ci].ID != deref(sp.PreviousCompactionID):
		return nil, "the branch compacted again", nil
	}
	bs := resolveBasis(path, src.Release, b, sp.SessionID)
	switch {
	case bs.refused != "":
		return nil, "the base is refused: " + bs.refused, nil
	case bs.source != SourceModel || bs.fromID != a.FromEntryID:
		return nil, "the base's text does not reach the span yet", nil
	}
	own, ok := strings.CutSuffix(sp.Summary, summarize.FormatFileOperations(sp.Details.ReadFiles, sp.Details.ModifiedFiles))
	if !ok {
		return nil, "", fmt.Errorf("compose: the span's summary does not end in its file lists")
	}
	details := unionDetails(bs.details, sp.Details)
	out := sp
	out.Summary = bs.text + SegmentSeparator + own + summarize.FormatFileOperations(details.ReadFiles, details.ModifiedFiles)
	out.Details = details
	est := tokenize.EstimateFor(src.Release)
	out.SummaryTokensEstimate = est.Count(&sessionio.Message{Role: sessionio.RoleCompactionSummary, Summary: out.Summary})
	out.BuiltOn = bs.builtOn(path, 0)
	out.BuiltOn.Segments++ // the preparation's own span is one more
	out.spanFrom = ""
	return &out, "", nil
}
