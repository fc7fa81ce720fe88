package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/sessionio/fileops"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/tokenize"
)

// ExtractRequest asks for a compaction at Pi's own cut made without a model, from inside
// Pi's session_before_compact hook, when no preparation is valid for the branch (none was
// made, or none could be ready: the agent compacts more often than a summary takes).
type ExtractRequest struct {
	File string
	// SessionID: as Request's (the session the agent's request names).
	SessionID string
	// LeafID is Pi's leaf when the hook ran ("" = the file's leaf).
	LeafID string
	// FirstKeptEntryID is Pi's own cut (the hook's preparation.firstKeptEntryId).
	FirstKeptEntryID string
	// KeepRecentTokens, ReserveTokens and ContextWindow are Pi's (preparation.settings and
	// the model's window); 0: the engine's.
	KeepRecentTokens, ReserveTokens, ContextWindow int
	// Pi is the Pi release the session follows ("": the engine's setting).
	Pi string
	// Base is the session's base (base.go): when it stands for the branch's latest
	// compaction, the extract updates its text instead of that compaction's.
	Base *Base
}

// Extract answers Pi's hook from the previous summary plus extractive notes of the new
// span: the span Pi would summarize now (from the previous compaction's kept boundary to
// Pi's cut) goes through the extractive summarizer (summarize.Extractive, in milliseconds,
// no model) as an update of the branch's latest compaction summary, exactly as `compactor
// compact` does without a model. A turn Pi splits is summarized whole up to its start and
// its prefix bridged (Bridge), so the result is a Prepared for Pi's cut and leaf that the
// extension checks as it checks any preparation. The next preparation that lands sends this
// summary to the model as the previous summary, so the model rewrites the notes then.
// Nothing is written and no model is called.
func (e *Engine) Extract(ctx context.Context, req ExtractRequest) (*Prepared, error) {
	x := *e
	if _, ok := e.Summarizer.(*summarize.Extractive); !ok {
		x.Summarizer = summarize.NewExtractive()
	}
	x.Settings.PrepareUpdate = PrepareFull
	set := Settings{Pi: req.Pi, Policy: cutpoint.PolicyPi, Counter: tokenize.CounterEstimate,
		KeepRecentTokens: req.KeepRecentTokens, ReserveTokens: req.ReserveTokens, ContextWindow: req.ContextWindow}
	prep, res, err := x.Prepare(ctx, Request{File: req.File, SessionID: req.SessionID, Settings: set, Base: req.Base}, nil)
	if err != nil {
		return nil, err
	}
	if prep == nil {
		reason := "nothing to summarize"
		if res != nil && res.Reason != "" {
			reason = res.Reason
		}
		return nil, &StaleError{Reason: "no extract: " + reason}
	}
	if prep.FirstKeptEntryID == req.FirstKeptEntryID {
		prep.extract = true
		return prep, nil
	}
	out, err := x.Bridge(ctx, BridgeRequest{File: req.File, LeafID: req.LeafID, FirstKeptEntryID: req.FirstKeptEntryID, Pi: req.Pi}, prep)
	if err != nil {
		return nil, fmt.Errorf("extract: %w", err)
	}
	out.basis = prep.basis // what the extract built on, for the base it leaves
	out.extract = true
	return out, nil
}

// LeftBase is the base a value leaves for the compaction Pi writes with it (Pi's leaf
// leafID its parent): for an extract, the text the extract built on, from where no model
// has read the spans yet (the model's summary of them is made later: MakeBase); for a
// bridged preparation, its own text before the bridge, from its cut (the next summary has
// the model read the bridge's gap), or, when the session's base for the previous compaction
// landed after the preparation was made on that compaction's text, that base, from its cut
// (the next summary reads the preparation's span again). builtOnLatest names the compaction
// the text stood for, for NextBase (nil: the text stands whatever is stored). made is nil
// when the value leaves no base.
func (p *Prepared) LeftBase(leafID string) (made *Base, builtOnLatest *BaseAnchor) {
	if p == nil || p.basis == nil {
		return nil, nil
	}
	bs := p.basis
	if leafID == "" {
		leafID = p.LeafID
	}
	// The base's own text: the segments joined to it stay segments (the state in-flight base
	// jobs were made on does not change).
	own := bs.own()
	text, read, modified := withoutFileLists(own.text)
	fo := fileops.New()
	for _, f := range append(slices.Clone(own.details.ReadFiles), read...) {
		fo.AddRead(f)
	}
	for _, f := range append(slices.Clone(own.details.ModifiedFiles), modified...) {
		fo.AddEdited(f)
	}
	read, modified = fo.Lists()
	b := &Base{V: BaseVersion, Store: p.Store, Path: p.Path, SessionID: p.SessionID,
		Anchor: BaseAnchor{LeafID: leafID, PreviousCompactionID: p.PreviousCompactionID, FirstKeptEntryID: p.FirstKeptEntryID,
			SummarizedEntryIDs: append([]string{}, p.SummarizedEntryIDs...), SummarySHA256: SHA256(p.Summary)},
		Summary: text, Details: PreparedDetails{ReadFiles: nonNil(read), ModifiedFiles: nonNil(modified)},
		FromEntryID: own.fromID, Source: own.source, PiVersion: p.PiVersion, CreatedAt: own.madeAt, ExtractOn: p.extract && bs.segments == 0}
	if b.CreatedAt.IsZero() {
		b.CreatedAt = p.CreatedAt
	}
	if p.leavesOwn {
		return b, nil // the preparation's text is what the compaction stands on, whatever is stored
	}
	return b, bs.latest
}
