package sessionio

import (
	"encoding/json"
	"slices"

	"github.com/compactor-dev/compactor/pi"
)

// Entry types Pi writes. Other types are kept, indexed and may be the leaf, but never
// enter the context or the cut-point logic.
const (
	TypeSession             = "session"
	TypeMessage             = "message"
	TypeModelChange         = "model_change"
	TypeThinkingLevelChange = "thinking_level_change"
	TypeCompaction          = "compaction"
	TypeBranchSummary       = "branch_summary"
	TypeCustom              = "custom"
	TypeCustomMessage       = "custom_message"
	TypeLabel               = "label"
	TypeSessionInfo         = "session_info"
	// Pi >= 0.87 (Projection), >= 0.86 (SystemMessages): an edit of an earlier entry's model-visible content, and usage
	// that is no message (the cache warmer's, for instance).
	TypeContextEdit = "context_edit"
	TypeUsage       = "usage"
)

// EntryTypes lists the session entry types Pi r declares (the header's "session" included),
// sorted: every release's, usage from 0.86 (SystemMessages), context_edit from 0.87
// (ContextEdits). make interop-releases compares them with each release's own declarations.
func EntryTypes(r pi.Release) []string {
	ts := []string{TypeSession, TypeMessage, TypeModelChange, TypeThinkingLevelChange, TypeCompaction, TypeBranchSummary,
		TypeCustom, TypeCustomMessage, TypeLabel, TypeSessionInfo}
	if r.Has(pi.SystemMessages) {
		ts = append(ts, TypeUsage)
	}
	if r.Has(pi.ContextEdits) {
		ts = append(ts, TypeContextEdit)
	}
	slices.Sort(ts)
	return ts
}

// Entry is one non-header line of a session file.
//
// Raw holds the line's exact bytes (for v1/v2 files: the entry as Pi's in-memory migration
// would serialize it), so unknown fields survive and nothing is re-encoded by accident.
type Entry struct {
	Type      string
	ID        string
	ParentID  string // "" for a root (parentId null or absent)
	Timestamp string
	Line      int // 1-based line number in the file; 0 for entries not read from a file
	Raw       json.RawMessage

	// message
	Message *Message

	// compaction (Summary, FirstKeptEntryID, TokensBefore, Details, FromHook; Pi 1.x:
	// SystemMessage, Usage) and branch_summary (FromID, Summary, Details, FromHook; Pi 1.x:
	// Usage)
	Summary          string
	FirstKeptEntryID string
	TokensBefore     float64
	Details          json.RawMessage
	FromHook         bool
	FromID           string
	// SystemMessage is a Pi 1.x compaction's checkpoint of the system prompt and tools at the
	// compaction point (a "system" message); nil when absent.
	SystemMessage *Message
	// Usage is the raw usage of a compaction, branch_summary or usage entry (nil: absent).
	Usage json.RawMessage

	// context_edit (TargetID, Replacement): Replacement is the raw "replacement" value,
	// "null" (omit the target from the context) or an object with the new content; nil when
	// the member is absent.
	Replacement json.RawMessage

	// usage (Kind, Provider, Model, Usage)
	Kind  string
	Model string

	// custom and custom_message
	CustomType string
	Content    json.RawMessage // custom_message content, raw
	Display    json.RawMessage // custom_message display, raw (absent when nil)

	// model_change
	Provider string
	ModelID  string

	// thinking_level_change
	ThinkingLevel string

	// label and context_edit
	TargetID string
	Label    string

	// session_info
	Name string

	fromEnd int   // a tail read: the line's number counted from the end of the file, 0 for the last
	at      Span  // a tail read: where the line lies in the file
	record  int32 // a tail read: 1 + its record in the checkpoint's table it came from; 0 if none
}

// IsMessage reports whether e is a "message" entry with the given role.
func (e *Entry) IsMessage(role string) bool {
	return e.Type == TypeMessage && e.Message != nil && e.Message.Role == role
}
