package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
)

// Extract now, model later. When Pi's hook is answered by the extract (no preparation could
// be ready), the compaction Pi writes holds extractive notes of its span. The session's
// base is what the next summary builds on instead of that text: a model's summary of
// exactly what the compaction covers (the same summarized entries, built on the same chain
// of compactions), made in the background by a job of kind "base" right after the extract
// answered. Until it lands, the base says where the model's text ends: the next summary then
// reads the spans after it again, raw, rather than the extract's notes of them. A compaction
// answered by a preparation bridged to Pi's cut leaves the preparation's own text the same
// way, from the preparation's cut: the next summary has the model read the bridge's gap. So
// over a session everything older than the last cycle is a model's summary, however fast
// the agent compacts.
//
// One base per session (the newest), stored beside its preparation (PreparedStore's base),
// replaced as the session moves on. It names the compaction it stands for by what can be
// checked in the file: the compaction's parent (Pi's leaf at the hook), its cut, the
// entries it summarized, the compaction it follows and the SHA-256 of its summary (the
// text the hook handed to Pi). A base is used only while that compaction is the branch's
// latest and every one of these holds; otherwise the compaction's own text is used and the
// reason is said in a word (BuiltOn.Refused).

// BaseVersion is the version of the Base JSON this package writes.
const BaseVersion = 1

// Where a summary's older part comes from (Base.Source, BuiltOn.Source).
const (
	// SourceModel: a model's summary of everything before the base's FromEntryID.
	SourceModel = "model"
	// SourceCompaction: the text of a compaction on the path, as it was written (a model's,
	// or an extract whose spans a model has not summarized yet).
	SourceCompaction = "compaction"
	// SourceNone: no previous summary at all (the session's first compaction).
	SourceNone = "none"
)

// Reasons a base is not used (BuiltOn.Refused). A base for a compaction the branch has
// left behind (another compaction came after it) is not refused: it has served.
const (
	BaseRefusedOtherCompaction = "other-compaction" // it stands for another compaction than the branch's latest
	BaseRefusedEntriesDiffer   = "entries-differ"   // the compaction summarized other entries than the base says
	BaseRefusedChainDiffers    = "chain-differs"    // it follows another compaction, or its text ends where no span of the chain lies
	BaseRefusedMalformed       = "malformed"        // another session's, or a version this worker does not read
	BaseRefusedOtherRules      = "other-rules"      // made by the rules of a Pi release that cuts or asks otherwise than the session's
)

// Base is the session's base (see above). Its JSON is stored per session.
type Base struct {
	V         int    `json:"v"`
	Store     string `json:"store"`
	Path      string `json:"path"`
	SessionID string `json:"sessionId"`
	// Anchor is the compaction the base stands for.
	Anchor BaseAnchor `json:"anchor"`
	// Summary is the text the next summary takes as its previous summary, in place of the
	// anchor's own; Details are its file lists.
	Summary string          `json:"summary"`
	Details PreparedDetails `json:"details"`
	// FromEntryID is where the messages the next summary reads start: the anchor's cut when
	// Summary covers everything the anchor summarized; an earlier span's start when spans
	// after it were answered without a model and no model has summarized them yet.
	FromEntryID string `json:"fromEntryId"`
	// Source says what Summary is (SourceModel, SourceCompaction, SourceNone).
	Source string `json:"source"`
	// PiVersion is the Pi release whose rules made the base: the anchor's span (which entries,
	// read how) and the summary request. A base is used only by the same rules (sameRules);
	// empty in a base of a compactor before releases were told apart, checked by its anchor
	// alone.
	PiVersion string `json:"piVersion,omitempty"`
	// ExtractOn: the anchor compaction's own text is an extract made on exactly this base
	// (Summary, from FromEntryID). The next extract then updates that text rather than
	// extracting the spans after FromEntryID again (the same notes, in a fraction of the
	// time); a preparation or a base job still reads them (a model must).
	ExtractOn bool `json:"extractOn,omitempty"`
	// BasedOnSHA256 and BasedOnFromEntryID (a model's base) are the text it was made on and
	// where its messages started: it lands only on the state it was made for (Land).
	BasedOnSHA256      string `json:"basedOnSha256,omitempty"`
	BasedOnFromEntryID string `json:"basedOnFromEntryId,omitempty"`
	// Messages and TokensEstimate (Pi's estimate) measure what the model read.
	Messages       int `json:"messages,omitempty"`
	TokensEstimate int `json:"tokensEstimate,omitempty"`
	// RequestedAt is when the extract that asked for it answered; CreatedAt when it was made.
	RequestedAt time.Time `json:"requestedAt,omitzero"`
	CreatedAt   time.Time `json:"createdAt"`
	modelUsage
	// Segments are models' summaries of single spans after FromEntryID, made while an
	// earlier span's summary was still being made (segment.go); the next summary builds on
	// Summary and those that continue it.
	Segments []Segment `json:"segments,omitempty"`
	// Pending are the compactions whose base jobs were asked for and have not ended: a base
	// job reads its span alone only when the span before it is one of them (its job covers
	// what lies before), never past a span no job will read (a bridge's gap).
	Pending []PendingSpan `json:"pending,omitempty"`
	// Awaiting is a preparation of the span after the anchor's alone, made while the base job
	// before it was in flight: joined to the base's text once that reaches its span
	// (compose.go). A new compaction drops it.
	Awaiting *Awaiting `json:"awaiting,omitempty"`

	// spanOnly: this value carries one new segment (Segments[0]) for Land to add, nothing
	// else; consumed are the segments its text holds now, dropped when it lands.
	spanOnly bool
	consumed []BaseAnchor
}

// BaseAnchor names a compaction by what the file shows of it.
type BaseAnchor struct {
	// LeafID is the compaction's parent: Pi's leaf when its hook ran.
	LeafID               string   `json:"leafId"`
	PreviousCompactionID *string  `json:"previousCompactionId"`
	FirstKeptEntryID     string   `json:"firstKeptEntryId"`
	SummarizedEntryIDs   []string `json:"summarizedEntryIds"`
	// SummarySHA256 is the SHA-256 (hex) of the compaction's summary.
	SummarySHA256 string `json:"summarySha256"`
}

// Equal reports whether a and b name the same compaction.
func (a BaseAnchor) Equal(b BaseAnchor) bool {
	return a.LeafID == b.LeafID && deref(a.PreviousCompactionID) == deref(b.PreviousCompactionID) &&
		a.FirstKeptEntryID == b.FirstKeptEntryID && a.SummarySHA256 == b.SummarySHA256 &&
		slices.Equal(a.SummarizedEntryIDs, b.SummarizedEntryIDs)
}

// names reports whether a names the compaction b does by the fields a job carries (its
// parent, its cut and its summary's digest).
func (a BaseAnchor) names(b BaseAnchor) bool {
	return a.LeafID == b.LeafID && a.FirstKeptEntryID == b.FirstKeptEntryID && a.SummarySHA256 == b.SummarySHA256
}

// Complete reports whether the base is a model's summary of everything its anchor covers.
func (b *Base) Complete() bool {
	return b != nil && b.Source == SourceModel && b.FromEntryID == b.Anchor.FirstKeptEntryID
}

// withoutFileLists splits a summary into its text and the file lists appended to it (as
// summarize.FormatFileOperations writes them); a summary without them is returned whole. A
// base keeps its text without the lists, which travel in its details: the next summary
// appends them again, and the model is not sent them twice a cycle.
func withoutFileLists(summary string) (text string, read, modified []string) {
	text = summary
	cut := func(tag string) []string {
		end := "\n</" + tag + ">"
		if !strings.HasSuffix(text, end) {
			return nil
		}
		i := strings.LastIndex(text, "\n\n<"+tag+">\n")
		if i < 0 {
			return nil
		}
		list := strings.Split(text[i+len("\n\n<"+tag+">\n"):len(text)-len(end)], "\n")
		text = text[:i]
		return list
	}
	modified = cut("modified-files")
	read = cut("read-files")
	if text+summarize.FormatFileOperations(read, modified) != summary {
		return summary, nil, nil
	}
	return text, read, modified
}

// SHA256 is the hex SHA-256 of s (how a base names a summary text).
func SHA256(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// BuiltOn says what a summary's older part is made of: the session's base or the previous
// compaction's own text, where the messages it read start, and why not the base when one
// was there. The extension shows it in its debug line.
type BuiltOn struct {
	// Source is SourceModel (the base's model summary), SourceCompaction or SourceNone.
	Source string `json:"source"`
	// SHA256 is the older text's (empty for SourceNone).
	SHA256 string `json:"sha256,omitempty"`
	// FromEntryID is where the messages the summary read start; ReadAgainTokens (Pi's
	// estimate) how much of them lies before the previous compaction's cut: spans the
	// previous compaction's text covers without a model's summary of them, read again.
	FromEntryID     string `json:"fromEntryId,omitempty"`
	ReadAgainTokens int    `json:"readAgainTokens,omitempty"`
	// BaseMadeAt is when the base used was made (a model's).
	BaseMadeAt time.Time `json:"baseMadeAt,omitzero"`
	// Via is the previous compaction whose text an extract updated (that text is an extract
	// made on the base: Base.ExtractOn) instead of the base's own text and the spans after it.
	Via string `json:"via,omitempty"`
	// Refused is why a base that was there was not used (BaseRefused*), empty otherwise.
	Refused string `json:"refused,omitempty"`
	// Segments is how many models' summaries of single spans continued the base's text
	// (Base.Segments).
	Segments int `json:"segments,omitempty"`
}

// SpanTokens splits the span a value summarizes for Pi (its summarized entries), by Pi's
// estimate, into what a model read and what was only extracted (the extract, a bridge's
// gap).
type SpanTokens struct {
	Model   int `json:"model"`
	Extract int `json:"extract"`
}

// basis is what the next summary of a path builds on (resolveBasis).
type basis struct {
	text      string
	details   PreparedDetails
	from      int    // path index where the messages to read start
	fromID    string // that entry's id
	source    string
	madeAt    time.Time
	extractOn bool
	refused   string
	// latest is the anchor of the path's latest compaction (nil without one): a base for it
	// may land after this basis was read (NextBase).
	latest *BaseAnchor
	// parts is how many model summaries text joins; segments how many of the base's
	// segments were joined to it here (consumed names them).
	parts    int
	segments int
	consumed []BaseAnchor
	// stored is the stored base's own text, file lists and end before segments were joined
	// (set when one was): what a value made on the basis is based on (Base.Land) and what an
	// extract leaves as the base's text (the segments stay segments).
	stored *storedText
}

type storedText struct {
	text    string
	details PreparedDetails
	fromID  string
	source  string
	madeAt  time.Time
}

// own is the stored base's own text, file lists and end, whatever segments were joined.
func (b basis) own() storedText {
	if b.stored != nil {
		return *b.stored
	}
	return storedText{text: b.text, details: b.details, fromID: b.fromID, source: b.source, madeAt: b.madeAt}
}

// state is the stored state a value made on b is based on (Base.BasedOn*).
func (b basis) state() (sha, fromID string) {
	o := b.own()
	return SHA256(o.text), o.fromID
}

func (b basis) builtOn(path []*sessionio.Entry, readAgain int) *BuiltOn {
	bo := &BuiltOn{Source: b.source, ReadAgainTokens: readAgain, BaseMadeAt: b.madeAt, Refused: b.refused, Segments: b.segments}
	if b.source != SourceNone {
		bo.SHA256 = SHA256(b.text)
	}
	bo.FromEntryID = b.fromID
	return bo
}

// namedOn names the entry on path where basis b's messages start.
func (b basis) namedOn(path []*sessionio.Entry) basis {
	b.fromID = ""
	if b.from >= 0 && b.from < len(path) {
		b.fromID = path[b.from].ID
	}
	return b
}

// latestCompaction is the index of the path's latest compaction, -1 without one.
func latestCompaction(path []*sessionio.Entry) int {
	for i := len(path) - 1; i >= 0; i-- {
		if path[i].Type == sessionio.TypeCompaction {
			return i
		}
	}
	return -1
}

// anchorOf names the compaction at path[ci] as a base would.
func anchorOf(path []*sessionio.Entry, ci int, r pi.Release) (BaseAnchor, error) {
	c := path[ci]
	sp, err := cutpoint.SpanAt(path[:ci], r, c.FirstKeptEntryID)
	if err != nil {
		return BaseAnchor{}, err
	}
	a := BaseAnchor{LeafID: c.ParentID, FirstKeptEntryID: c.FirstKeptEntryID, SummarizedEntryIDs: sp.EntryIDs, SummarySHA256: SHA256(c.Summary)}
	if sp.Previous != nil {
		id := sp.Previous.ID
		a.PreviousCompactionID = &id
	}
	return a, nil
}

// resolveBasis is what the next summary of path builds on, by the rules of release r: b when
// it was made by the same rules, stands for the path's latest compaction and every check
// holds; else that compaction's own text from where the next range starts (or nothing,
// without a compaction).
func resolveBasis(path []*sessionio.Entry, r pi.Release, b *Base, sessionID string) basis {
	return resolveBasisOn(path, r, b, sessionID).namedOn(path)
}

func resolveBasisOn(path []*sessionio.Entry, r pi.Release, b *Base, sessionID string) basis {
	ci := latestCompaction(path)
	def := basis{from: cutpoint.RangeStart(path, r), source: SourceNone}
	if ci >= 0 {
		def.text, def.source = path[ci].Summary, SourceCompaction
		if a, err := anchorOf(path, ci, r); err == nil {
			def.latest = &a
		}
	}
	if b == nil {
		return def
	}
	refuse := func(why string) basis { def.refused = why; return def }
	if b.V != BaseVersion || b.SessionID != sessionID {
		return refuse(BaseRefusedMalformed)
	}
	if b.PiVersion != "" && !sameRules(b.PiVersion, r) {
		return refuse(BaseRefusedOtherRules)
	}
	if ci < 0 || def.latest == nil {
		return refuse(BaseRefusedOtherCompaction)
	}
	a, c := b.Anchor, path[ci]
	if a.LeafID != c.ParentID || a.FirstKeptEntryID != c.FirstKeptEntryID || a.SummarySHA256 != def.latest.SummarySHA256 {
		// A base for a compaction further back on the branch has served: the branch compacted
		// again after it, from a summary built on it or on what it stood for.
		for _, e := range path[:ci] {
			if e.Type == sessionio.TypeCompaction && e.ParentID == a.LeafID && e.FirstKeptEntryID == a.FirstKeptEntryID && SHA256(e.Summary) == a.SummarySHA256 {
				return def
			}
		}
		return refuse(BaseRefusedOtherCompaction)
	}
	if deref(a.PreviousCompactionID) != deref(def.latest.PreviousCompactionID) {
		return refuse(BaseRefusedChainDiffers)
	}
	if !slices.Equal(a.SummarizedEntryIDs, def.latest.SummarizedEntryIDs) {
		return refuse(BaseRefusedEntriesDiffer)
	}
	from := -1
	for i, e := range path[:ci] {
		if e.ID == b.FromEntryID {
			from = i
			break
		}
	}
	if from < 0 {
		return refuse(BaseRefusedChainDiffers)
	}
	if _, err := spansFrom(path, r, from, ci); err != nil {
		return refuse(BaseRefusedChainDiffers)
	}
	bs := basis{text: b.Summary, details: b.Details, from: from, source: b.Source, madeAt: b.CreatedAt, extractOn: b.ExtractOn, latest: def.latest, parts: b.parts()}
	bs = bs.namedOn(path)
	return extendBySegments(path, r, ci, bs, b.Segments)
}

// spansFrom are the messages the compactions on path[:upTo+1] summarized from path index
// from on, each span as its compaction read it (on the path it was appended to), oldest
// first: nothing when from is the latest one's cut. from may lie inside a span (a bridged
// preparation's cut: the gap after it is read).
func spansFrom(path []*sessionio.Entry, r pi.Release, from, upTo int) ([]*sessionio.Message, error) {
	var spans [][]*sessionio.Message
	found := false
	for ci := upTo; ci >= 0 && !found; ci-- {
		c := path[ci]
		if c.Type != sessionio.TypeCompaction {
			continue
		}
		sp, err := cutpoint.SpanAt(path[:ci], r, c.FirstKeptEntryID)
		if err != nil {
			return nil, fmt.Errorf("compaction %s: %w", c.ID, err)
		}
		switch {
		case sp.CutIndex == from:
			found = true
			continue
		case sp.CutIndex < from:
			return nil, fmt.Errorf("entry %s lies after the cut of compaction %s", path[from].ID, c.ID)
		}
		spans = append(spans, spanFrom(path, sp, from))
		found = sp.StartIndex <= from
	}
	if !found {
		return nil, fmt.Errorf("entry %s lies in no span of the compactions on the path", path[from].ID)
	}
	var out []*sessionio.Message
	for i := len(spans) - 1; i >= 0; i-- {
		out = append(out, spans[i]...)
	}
	return out, nil
}

// spanFrom are the messages of span sp (on path) from path index from on: the whole span
// when from lies at or before its start, the part after a bridged preparation's cut when
// from lies inside it.
func spanFrom(path []*sessionio.Entry, sp *cutpoint.Span, from int) []*sessionio.Message {
	if from <= sp.StartIndex {
		return sp.Messages
	}
	at := map[string]int{}
	for i, e := range path[sp.StartIndex:sp.CutIndex] {
		at[e.ID] = sp.StartIndex + i
	}
	var msgs []*sessionio.Message
	for k, id := range sp.EntryIDs {
		if at[id] >= from {
			msgs = append(msgs, sp.Messages[k])
		}
	}
	return msgs
}

// NextBase is the base to keep for the compaction Pi is about to write with an extract
// (made), given the one stored now (current): made carries the text the extract built on;
// when a model's base for the compaction before landed since the extract read the store,
// the new compaction builds on that one instead (its spans were read again by the
// extract, but its text is what the next summary should build on).
//
// The stored base's segments stay with the base kept (those the extract's text holds go).
func NextBase(current, made *Base, builtOnLatest *BaseAnchor) *Base {
	if current != nil && current.SessionID == made.SessionID && current.sameRulesAs(made) {
		withSegments := *made
		withSegments.Segments = withoutConsumed(current.Segments, made.consumed)
		withSegments.Pending = current.Pending
		made = &withSegments
	}
	if current == nil || builtOnLatest == nil || !current.Anchor.Equal(*builtOnLatest) || !current.sameRulesAs(made) {
		return made
	}
	if SHA256(current.Summary) == SHA256(made.Summary) && current.FromEntryID == made.FromEntryID {
		return made
	}
	next := *made
	next.Segments = current.Segments
	next.Summary, next.Details, next.FromEntryID, next.Source = current.Summary, current.Details, current.FromEntryID, current.Source
	next.ExtractOn = false // the extract was made on what was there before
	next.BasedOnSHA256, next.BasedOnFromEntryID = current.BasedOnSHA256, current.BasedOnFromEntryID
	next.Messages, next.TokensEstimate, next.CreatedAt = current.Messages, current.TokensEstimate, current.CreatedAt
	next.modelUsage = current.modelUsage
	return &next
}

// Land is the base to store when the model's base b lands on the one stored now (current),
// and in a word why nothing is stored when b is discarded. b was made on a state of the
// store (BasedOn*): it replaces that state for its own anchor, and it carries over to a
// newer compaction whose base still holds the same state (an extract answered Pi again
// while b was being made, from the same text: b is a better start for it). Anything else
// means the session moved on (a preparation or another base replaced what b was made on,
// or the branch changed): b is discarded.
//
// A value carrying one segment (a span summarized alone) is added to the stored base's
// segments instead (landSpan). Segments stored beside the base stay with what lands, but
// those its text holds now.
func (b *Base) Land(current *Base) (*Base, string) {
	if b.spanOnly {
		return b.landSpan(current)
	}
	if current == nil {
		return b, ""
	}
	same := SHA256(current.Summary) == b.BasedOnSHA256 && current.FromEntryID == b.BasedOnFromEntryID && b.sameRulesAs(current)
	next := *b
	next.Segments = withoutConsumed(current.Segments, b.consumed)
	next.Pending, next.Awaiting = current.Pending, current.Awaiting
	switch {
	case current.Anchor.Equal(b.Anchor) && same:
		return &next, ""
	case current.Anchor.Equal(b.Anchor) && current.Complete():
		return nil, "duplicate"
	case same:
		next.Anchor = current.Anchor
		return &next, ""
	}
	return nil, "moved-on"
}

// sameRulesAs reports whether b and o were made by the rules of the same Pi behaviours (a
// base without PiVersion, of an older compactor, is taken as made by the same).
func (b *Base) sameRulesAs(o *Base) bool {
	if b.PiVersion == "" || o.PiVersion == "" {
		return true
	}
	r, err := pi.ParseRelease(o.PiVersion)
	return err == nil && sameRules(b.PiVersion, r)
}
