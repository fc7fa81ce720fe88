package sessionio

import "encoding/json"

// Header is the first line of a session file.
type Header struct {
	Type          string
	Version       int // as on disk; 1 when the field is absent
	ID            string
	Timestamp     string
	Cwd           string
	ParentSession string
	Raw           json.RawMessage
}

// Diagnostic is something Pi accepts without a word (a skipped line, a duplicate id, an
// orphan, a migration) that compactor reports.
type Diagnostic struct {
	Line    int    `json:"line,omitempty"`
	EntryID string `json:"entryId,omitempty"`
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// Diagnostic kinds.
const (
	DiagMalformedLine = "malformed-line"
	DiagDuplicateID   = "duplicate-id"
	DiagOrphan        = "orphan"
	DiagExtraHeader   = "extra-header"
	DiagUnknownType   = "unknown-type"
	DiagMigrated      = "migrated"
	DiagBadField      = "bad-field"
)

// Session is a parsed session file: the header, every entry in file order (v1/v2 files
// migrated in memory, never on disk), and the tree index.
type Session struct {
	File        string // path it was read from ("" when parsed from memory)
	Header      Header
	Entries     []*Entry // file order; duplicates included (the index keeps the last)
	Diagnostics []Diagnostic

	// Size is the number of bytes read; EndsWithNewline tells whether the last byte was '\n'.
	Size            int64
	EndsWithNewline bool

	byID     map[string]*Entry
	children map[string][]*Entry
	labels   map[string]string
	name     string
	leafID   string
}

// Version is the format version found on disk (1, 2 or 3).
func (s *Session) Version() int { return s.Header.Version }

// LeafID is the id of the last entry line in the file (Pi's leaf after loading), "" if none.
func (s *Session) LeafID() string { return s.leafID }

// Get returns the entry with that id (the last one in file order for duplicate ids).
func (s *Session) Get(id string) *Entry { return s.byID[id] }

// Labels returns the resolved labels, entry id to label.
func (s *Session) Labels() map[string]string { return s.labels }

// Name returns the session name from the latest session_info entry ("" if none or cleared).
func (s *Session) Name() string { return s.name }

// ModelRef is the provider and model id of a context.
type ModelRef struct {
	Provider string `json:"provider"`
	ModelID  string `json:"modelId"`
}
