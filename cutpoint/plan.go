// Package cutpoint decides where a compaction cuts a session's current path: which entries
// are summarized, which turn prefix (if any) gets its own summary, and which entries stay
// verbatim. A Policy produces a Plan; CheckInvariants verifies, for any plan, the invariants
// every plan keeps (docs/architecture.md, "The invariants of a plan"), so experiments can
// compare policies that are all known to be safe.
//
// Three policies exist:
//
//   - "pi" reproduces Pi 0.73.1's prepareCompaction/findCutPoint exactly (quirks included,
//     see docs/policies.md), with any token counter;
//   - "turn" cuts only where a user turn starts, so no turn is ever split;
//   - "nearest" cuts at the safe cut point whose kept part is closest to keepRecentTokens,
//     in either direction.
package cutpoint

import (
	"encoding/json"
	"fmt"
	"github.com/compactor-dev/compactor/sessionio/picontext"
	"strings"

	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/fileops"
	"github.com/compactor-dev/compactor/sessionio/jsjson"
)

// Settings are the compaction settings a policy plans with.
type Settings struct {
	// KeepRecentTokens is roughly how many recent tokens stay verbatim (Pi: 20000).
	KeepRecentTokens int
	// ReserveTokens is the headroom kept free in the context window (Pi: 16384).
	ReserveTokens int
	// ContextWindow is the model's window; 0 means unknown (then every session is over
	// budget, as in Pi with a window of 0).
	ContextWindow int
	// Release is the Pi release whose rules the plan follows (zero: the newest).
	Release pi.Release
}

// Pi's DEFAULT_COMPACTION_SETTINGS.
const (
	DefaultKeepRecentTokens = 20000
	DefaultReserveTokens    = 16384
)

// DefaultSettings returns Pi's defaults (no context window: the caller knows the model).
func DefaultSettings() Settings {
	return Settings{KeepRecentTokens: DefaultKeepRecentTokens, ReserveTokens: DefaultReserveTokens}
}

// Counter counts one message's tokens. tokenize's Pi estimate and tiktoken counters
// satisfy it; a policy calls it for every message it weighs.
type Counter interface {
	Name() string
	Count(m *sessionio.Message) int
}

// Policy chooses a cut for a path (root first, as sessionio.Session.Path returns it).
type Policy interface {
	Name() string
	Plan(path []*sessionio.Entry, s Settings, c Counter) (*Plan, error)
}

// Policy names.
const (
	PolicyPi      = "pi"
	PolicyTurn    = "turn"
	PolicyNearest = "nearest"
)

// Names lists the policies ByName knows, in a stable order.
func Names() []string { return []string{PolicyPi, PolicyTurn, PolicyNearest} }

// ByName returns the policy with that name.
func ByName(name string) (Policy, error) {
	switch name {
	case PolicyPi:
		return Pi{}, nil
	case PolicyTurn:
		return Turn{}, nil
	case PolicyNearest:
		return Nearest{}, nil
	}
	return nil, fmt.Errorf("cutpoint: unknown policy %q (known: %s)", name, strings.Join(Names(), ", "))
}

// Reasons a plan is not prepared (the words a plan says it with; Pi's harness prints its own).
const (
	ReasonAlreadyCompacted = "last entry on the branch is a compaction (Pi: 'Already compacted')"
	ReasonEmpty            = "no entry with an id at the cut point (empty branch / needs migration)"
	// ReasonNothingToSummarize: Pi 1.x makes no plan when the cut would summarize nothing
	// (its manual /compact says "Nothing to compact").
	ReasonNothingToSummarize = "nothing to summarize before the cut (Pi 1.x: 'Nothing to compact')"
)

// FileOps are the file operations of the summarized part: Pi's raw sets (insertion order,
// as Pi's JavaScript Sets iterate) and the lists stored in the compaction's details.
type FileOps struct {
	Read          []string `json:"read"`
	Written       []string `json:"written"`
	Edited        []string `json:"edited"`
	ReadFiles     []string `json:"readFiles"`
	ModifiedFiles []string `json:"modifiedFiles"`
}

// Plan is a policy's decision for one path. Indices are positions in the path (for Pi >= 0.87
// too, whose own indices count in its projection). Its JSON
// uses the field names Pi's harness (interop/pi/pi cut) prints wherever a field means the same thing.
type Plan struct {
	// Prepared is false when there is nothing to plan (empty path, or the path already
	// ends in a compaction); Reason says which.
	Prepared bool
	Reason   string
	Policy   string
	Counter  string
	// Release is the Pi release whose rules made the plan.
	Release pi.Release

	FirstKeptEntryID    string
	FirstKeptEntryIndex int
	IsSplitTurn         bool
	TurnStartIndex      int // -1 when none
	TurnStartEntryID    string

	// TokensBefore is the current context's size: the usage of the last assistant message
	// that is neither aborted nor an error, plus the counter's count of every context
	// message after it (Pi's estimateContextTokens over buildSessionContext).
	TokensBefore int

	// BoundaryStartIndex is where this compaction's range starts: the previous
	// compaction's firstKeptEntryId on the path, else just after the previous compaction,
	// else 0. Nothing before it is summarized again.
	BoundaryStartIndex   int
	BoundaryStartEntryID string
	PreviousCompactionID string  // "" when none (JSON null)
	PreviousSummary      *string // nil when none (JSON null)

	// MessagesToSummarize and TurnPrefix are entry ids; Summarize and Prefix are the same
	// entries as the messages the summarizer reads (compaction entries excluded).
	MessagesToSummarize []string
	TurnPrefix          []string
	Summarize           []*sessionio.Message
	Prefix              []*sessionio.Message

	FileOps FileOps

	// Token counts with the plan's counter: the kept part (every context message from
	// FirstKeptEntryIndex on), the summarized messages and the turn prefix.
	KeptTokens       int
	SummarizedTokens int
	TurnPrefixTokens int
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// MarshalJSON writes the plan with the field names Pi's harness prints for its cut
// (interop/pi), in its order, as JSON.stringify would (so a path with a lone surrogate prints
// as Pi prints it); ids that do not exist are null and lists are never null, as in the
// harness's output. piVersion names the Pi whose rules made the plan. An unprepared plan has
// only prepared, reason, policy, counter, piVersion and tokensBefore.
func (p *Plan) MarshalJSON() ([]byte, error) {
	if !p.Prepared {
		return jsjson.Marshal(jsjson.Fields{
			{Key: "prepared", Value: false}, {Key: "reason", Value: p.Reason},
			{Key: "policy", Value: p.Policy}, {Key: "counter", Value: p.Counter},
			{Key: "piVersion", Value: p.Release.String()},
			{Key: "tokensBefore", Value: p.TokensBefore},
		})
	}
	str := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	var turnStart, prevSummary any
	if p.TurnStartIndex >= 0 {
		turnStart = str(p.TurnStartEntryID)
	}
	if p.PreviousSummary != nil {
		prevSummary = *p.PreviousSummary
	}
	return jsjson.Marshal(jsjson.Fields{
		{Key: "prepared", Value: true},
		{Key: "policy", Value: p.Policy},
		{Key: "counter", Value: p.Counter},
		{Key: "piVersion", Value: p.Release.String()},
		{Key: "firstKeptEntryId", Value: p.FirstKeptEntryID},
		{Key: "firstKeptEntryIndex", Value: p.FirstKeptEntryIndex},
		{Key: "isSplitTurn", Value: p.IsSplitTurn},
		{Key: "turnStartIndex", Value: p.TurnStartIndex},
		{Key: "turnStartEntryId", Value: turnStart},
		{Key: "tokensBefore", Value: p.TokensBefore},
		{Key: "boundaryStartIndex", Value: p.BoundaryStartIndex},
		{Key: "boundaryStartEntryId", Value: str(p.BoundaryStartEntryID)},
		{Key: "previousCompactionId", Value: str(p.PreviousCompactionID)},
		{Key: "previousSummary", Value: prevSummary},
		{Key: "messagesToSummarize", Value: nonNil(p.MessagesToSummarize)},
		{Key: "turnPrefix", Value: nonNil(p.TurnPrefix)},
		{Key: "fileOps", Value: jsjson.Fields{
			{Key: "read", Value: nonNil(p.FileOps.Read)},
			{Key: "written", Value: nonNil(p.FileOps.Written)},
			{Key: "edited", Value: nonNil(p.FileOps.Edited)},
			{Key: "readFiles", Value: nonNil(p.FileOps.ReadFiles)},
			{Key: "modifiedFiles", Value: nonNil(p.FileOps.ModifiedFiles)},
		}},
		{Key: "keptTokens", Value: p.KeptTokens},
		{Key: "summarizedTokens", Value: p.SummarizedTokens},
		{Key: "turnPrefixTokens", Value: p.TurnPrefixTokens},
	})
}

// Ops returns the plan's file operations as the summarizer takes them (sets in Pi's
// insertion order), to which a caller may add before the lists are computed.
func (p *Plan) Ops() *fileops.FileOps {
	fo := fileops.New()
	for _, f := range p.FileOps.Read {
		fo.AddRead(f)
	}
	for _, f := range p.FileOps.Written {
		fo.AddWritten(f)
	}
	for _, f := range p.FileOps.Edited {
		fo.AddEdited(f)
	}
	return fo
}

// Details returns the compaction entry's details for this plan, byte for byte as Pi
// writes them: {"readFiles":[...],"modifiedFiles":[...]}.
func (p *Plan) Details() json.RawMessage {
	b, _ := jsjson.Marshal(jsjson.Fields{
		{Key: "readFiles", Value: nonNil(p.FileOps.ReadFiles)},
		{Key: "modifiedFiles", Value: nonNil(p.FileOps.ModifiedFiles)},
	})
	return b
}

// CountPath returns the counter's tokens for every entry of the path that yields a message
// (compaction entries as their summary); -1 for entries that yield none. Used by inspect.
func CountPath(path []*sessionio.Entry, c Counter) []int {
	out := make([]int, len(path))
	for i, e := range path {
		out[i] = -1
		if m := picontext.AsMessage(e); m != nil {
			out[i] = c.Count(m)
		}
	}
	return out
}
