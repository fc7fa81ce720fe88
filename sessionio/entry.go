package sessionio

import "encoding/json"

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
)

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

	// compaction (Summary, FirstKeptEntryID, TokensBefore, Details, FromHook)
	// and branch_summary (FromID, Summary, Details, FromHook)
	Summary          string
	FirstKeptEntryID string
	TokensBefore     float64
	Details          json.RawMessage
	FromHook         bool
	FromID           string

	// custom and custom_message
	CustomType string
	Content    json.RawMessage // custom_message content, raw
	Display    json.RawMessage // custom_message display, raw (absent when nil)

	// model_change
	Provider string
	ModelID  string

	// thinking_level_change
	ThinkingLevel string

	// label
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
