package sessionio

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"unicode/utf8"
)

// Errors for files Pi cannot load. Pi would silently truncate such a file to a fresh
// header on open; compactor refuses them and never touches them.
var (
	ErrEmpty    = errors.New("file is empty")
	ErrNoHeader = errors.New(`no valid session header (the first JSON line must be {"type":"session","id":"...",...})`)
	ErrCycle    = errors.New("parentId cycle")
)

// FileError says what is wrong with a session file and where.
type FileError struct {
	File    string
	Line    int    // 1-based; 0 when not about one line
	EntryID string // when about one entry
	Err     error
}

func (e *FileError) Error() string {
	var b bytes.Buffer
	if e.File != "" {
		b.WriteString(e.File)
	} else {
		b.WriteString("session")
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.EntryID != "" {
		fmt.Fprintf(&b, " (entry %s)", e.EntryID)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *FileError) Unwrap() error { return e.Err }

// ReadFile reads and indexes a session file. It never modifies the file.
func ReadFile(path string) (*Session, error) {
	return ReadFileWith(path, Options{})
}

// Options tune reading.
type Options struct {
	// Light skips decoding message content (text, thinking, tool calls): Message.Content is
	// left empty and only role, provider, model, stop reason, usage and timestamp are set.
	// Enough to build a context and print it from the raw bytes with about half the memory.
	Light bool
}

// ReadFileWith is ReadFile with options.
func ReadFileWith(path string, opts Options) (*Session, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &FileError{File: path, Err: err}
	}
	return ParseWith(data, path, opts)
}

// rawEntry is the union of the fields compactor reads from an entry line.
type rawEntry struct {
	Type                string          `json:"type"`
	ID                  json.RawMessage `json:"id"`
	ParentID            json.RawMessage `json:"parentId"`
	Timestamp           json.RawMessage `json:"timestamp"`
	Message             msgField        `json:"message"`
	Summary             json.RawMessage `json:"summary"`
	FirstKeptEntryID    json.RawMessage `json:"firstKeptEntryId"`
	FirstKeptEntryIndex json.RawMessage `json:"firstKeptEntryIndex"`
	TokensBefore        json.RawMessage `json:"tokensBefore"`
	Details             json.RawMessage `json:"details"`
	FromHook            json.RawMessage `json:"fromHook"`
	FromID              json.RawMessage `json:"fromId"`
	CustomType          json.RawMessage `json:"customType"`
	Content             json.RawMessage `json:"content"`
	Display             json.RawMessage `json:"display"`
	Provider            json.RawMessage `json:"provider"`
	ModelID             json.RawMessage `json:"modelId"`
	ThinkingLevel       json.RawMessage `json:"thinkingLevel"`
	TargetID            json.RawMessage `json:"targetId"`
	Label               json.RawMessage `json:"label"`
	Name                json.RawMessage `json:"name"`
	// header
	Version       json.RawMessage `json:"version"`
	Cwd           json.RawMessage `json:"cwd"`
	ParentSession json.RawMessage `json:"parentSession"`
}

// msgField decodes an entry's message in the same pass as the entry and keeps its bytes.
type msgField struct {
	light bool
	m     *Message
	err   error
}

func (f *msgField) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '{' {
		return nil
	}
	f.m, f.err = decodeMessage(b, f.light)
	return nil
}

// fillEntry takes the fields compactor reads from an entry's members (the last of
// duplicate keys wins, as in JSON.parse). Values are sub-slices of the line: nothing is
// copied.
func fillEntry(ms []member, light bool) rawEntry {
	var re rawEntry
	for _, m := range ms {
		key := m.key
		if bytes.IndexByte(key, '\\') >= 0 {
			var k string
			if json.Unmarshal(append(append([]byte{'"'}, key...), '"'), &k) != nil {
				continue
			}
			key = []byte(k)
		}
		v := json.RawMessage(m.val)
		switch string(key) {
		case "type":
			re.Type, _ = jsonString(v)
		case "id":
			re.ID = v
		case "parentId":
			re.ParentID = v
		case "timestamp":
			re.Timestamp = v
		case "message":
			re.Message = msgField{light: light}
			_ = re.Message.UnmarshalJSON(v)
		case "summary":
			re.Summary = v
		case "firstKeptEntryId":
			re.FirstKeptEntryID = v
		case "firstKeptEntryIndex":
			re.FirstKeptEntryIndex = v
		case "tokensBefore":
			re.TokensBefore = v
		case "details":
			re.Details = v
		case "fromHook":
			re.FromHook = v
		case "fromId":
			re.FromID = v
		case "customType":
			re.CustomType = v
		case "content":
			re.Content = v
		case "display":
			re.Display = v
		case "provider":
			re.Provider = v
		case "modelId":
			re.ModelID = v
		case "thinkingLevel":
			re.ThinkingLevel = v
		case "targetId":
			re.TargetID = v
		case "label":
			re.Label = v
		case "name":
			re.Name = v
		case "version":
			re.Version = v
		case "cwd":
			re.Cwd = v
		case "parentSession":
			re.ParentSession = v
		}
	}
	return re
}

type parsedLine struct {
	line int
	raw  []byte
	re   rawEntry
}

// Parse reads a session from memory. file is used in errors and diagnostics only.
//
// It follows Pi's loader: the whole content is trimmed (which drops a UTF-8 BOM), split on
// "\n" only, blank lines are skipped, and lines that are not JSON are skipped (reported as
// diagnostics with their line number). The first JSON line must be a session header with a
// string id. v1 and v2 files are migrated in memory exactly as Pi migrates them on load;
// the bytes on disk are never changed.
func Parse(data []byte, file string) (*Session, error) {
	return ParseWith(data, file, Options{})
}

// ParseWith is Parse with options.
func ParseWith(data []byte, file string, opts Options) (*Session, error) {
	s := &Session{File: file, Size: int64(len(data))}
	s.EndsWithNewline = len(data) > 0 && data[len(data)-1] == '\n'

	content, lineNo := jsTrim(data)
	var lines []parsedLine
	var members []member
	for len(content) > 0 {
		var line []byte
		if i := bytes.IndexByte(content, '\n'); i >= 0 {
			line, content = content[:i], content[i+1:]
		} else {
			line, content = content, nil
		}
		n := lineNo
		lineNo++
		if isBlank(line) {
			continue
		}
		var notObject bool
		var err error
		members, notObject, err = scanObject(line, members[:0])
		switch {
		case err != nil:
			s.diag(Diagnostic{Line: n, Kind: DiagMalformedLine, Message: "line is not valid JSON; skipped (Pi skips it too)"})
		case notObject:
			// Valid JSON that is not an object (a number, a string, an array...): Pi would keep
			// it as an entry and fail on it later; compactor skips it and says so.
			s.diag(Diagnostic{Line: n, Kind: DiagMalformedLine, Message: "line is JSON but not an entry object; skipped"})
		default:
			// A field of an unexpected type is reported where it is used (decodeEntry).
			lines = append(lines, parsedLine{line: n, raw: line, re: fillEntry(members, opts.Light)})
		}
	}
	if len(lines) == 0 {
		if len(s.Diagnostics) == 0 {
			return nil, &FileError{File: file, Err: ErrEmpty}
		}
		return nil, &FileError{File: file, Line: s.Diagnostics[0].Line,
			Err: fmt.Errorf("%w: no line is a JSON object (%d lines skipped)", ErrNoHeader, len(s.Diagnostics))}
	}
	h := lines[0]
	id, idIsString := jsonString(h.re.ID)
	if h.re.Type != TypeSession || !idIsString {
		return nil, &FileError{File: file, Line: h.line, Err: ErrNoHeader}
	}
	s.Header = Header{Type: h.re.Type, ID: id, Raw: h.raw, Version: 1}
	s.Header.Timestamp, _ = jsonString(h.re.Timestamp)
	s.Header.Cwd, _ = jsonString(h.re.Cwd)
	s.Header.ParentSession, _ = jsonString(h.re.ParentSession)
	if v, ok := jsonNumber(h.re.Version); ok {
		s.Header.Version = int(v)
	}

	s.Entries = make([]*Entry, 0, len(lines)-1)
	// all is aligned with lines (nil for headers): v1 migration indexes into it.
	all := make([]*Entry, len(lines))
	for i, pl := range lines[1:] {
		if pl.re.Type == TypeSession {
			s.diag(Diagnostic{Line: pl.line, Kind: DiagExtraHeader, Message: "another session header inside the file; ignored (Pi ignores it too)"})
			continue
		}
		e := s.decodeEntry(pl)
		all[i+1] = e
		s.Entries = append(s.Entries, e)
	}
	if s.Header.Version < 2 {
		s.migrateV1(lines, all)
	}
	if s.Header.Version < 3 {
		s.migrateV2()
	}
	if err := s.index(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Session) diag(d Diagnostic) { s.Diagnostics = append(s.Diagnostics, d) }

func (s *Session) badField(pl parsedLine, id, field string) {
	s.diag(Diagnostic{Line: pl.line, EntryID: id, Kind: DiagBadField, Message: fmt.Sprintf("field %q has an unexpected type; treated as absent", field)})
}

func (s *Session) decodeEntry(pl parsedLine) *Entry {
	re := &pl.re
	e := &Entry{Type: re.Type, Line: pl.line, Raw: pl.raw}
	str := func(raw json.RawMessage, field string) string {
		v, ok := jsonString(raw)
		if !ok && len(raw) > 0 && string(raw) != "null" {
			s.badField(pl, e.ID, field)
		}
		return v
	}
	e.ID = str(re.ID, "id")
	e.ParentID = str(re.ParentID, "parentId")
	e.Timestamp = str(re.Timestamp, "timestamp")
	switch re.Type {
	case TypeMessage:
		if re.Message.m == nil {
			s.badField(pl, e.ID, "message")
			break
		}
		e.Message = re.Message.m
		if re.Message.err != nil {
			s.diag(Diagnostic{Line: pl.line, EntryID: e.ID, Kind: DiagBadField, Message: "message has fields of unexpected types (kept as far as possible): " + re.Message.err.Error()})
		}
	case TypeCompaction, TypeBranchSummary:
		e.Summary = str(re.Summary, "summary")
		e.FirstKeptEntryID = str(re.FirstKeptEntryID, "firstKeptEntryId")
		e.TokensBefore, _ = jsonNumber(re.TokensBefore)
		e.Details = nonNull(re.Details)
		e.FromHook = jsonTruthy(re.FromHook)
		e.FromID = str(re.FromID, "fromId")
	case TypeCustom:
		e.CustomType = str(re.CustomType, "customType")
	case TypeCustomMessage:
		e.CustomType = str(re.CustomType, "customType")
		e.Content = re.Content
		e.Display = re.Display
		e.Details = re.Details
	case TypeModelChange:
		e.Provider = str(re.Provider, "provider")
		e.ModelID = str(re.ModelID, "modelId")
	case TypeThinkingLevelChange:
		e.ThinkingLevel = str(re.ThinkingLevel, "thinkingLevel")
	case TypeLabel:
		e.TargetID = str(re.TargetID, "targetId")
		e.Label = str(re.Label, "label")
	case TypeSessionInfo:
		e.Name = str(re.Name, "name")
	}
	return e
}

// index builds byID, children, labels, the name and the leaf, and rejects parentId cycles.
func (s *Session) index() error {
	s.byID = make(map[string]*Entry, len(s.Entries))
	s.labels = map[string]string{}
	s.leafID = ""
	for _, e := range s.Entries {
		if prev, dup := s.byID[e.ID]; dup {
			s.diag(Diagnostic{Line: e.Line, EntryID: e.ID, Kind: DiagDuplicateID,
				Message: fmt.Sprintf("id also used on line %d; the later line wins (as in Pi)", prev.Line)})
		}
		s.byID[e.ID] = e
		s.leafID = e.ID
		if e.Type == TypeLabel {
			if e.Label != "" {
				s.labels[e.TargetID] = e.Label
			} else {
				delete(s.labels, e.TargetID)
			}
		}
	}
	for i := len(s.Entries) - 1; i >= 0; i-- {
		if e := s.Entries[i]; e.Type == TypeSessionInfo {
			s.name = trimJSSpace(e.Name)
			break
		}
	}
	s.children = make(map[string][]*Entry)
	for _, e := range s.Entries {
		if s.byID[e.ID] != e {
			continue // superseded duplicate
		}
		if e.ParentID == "" {
			continue
		}
		if _, ok := s.byID[e.ParentID]; !ok {
			s.diag(Diagnostic{Line: e.Line, EntryID: e.ID, Kind: DiagOrphan,
				Message: fmt.Sprintf("parent %q not found; the entry is a root and paths through it stop here (as in Pi)", e.ParentID)})
			continue
		}
		s.children[e.ParentID] = append(s.children[e.ParentID], e)
	}
	return s.checkCycles()
}

// checkCycles fails on any parentId cycle: Pi's path walk would never end on one.
func (s *Session) checkCycles() error {
	const (
		unvisited = iota
		onStack
		done
	)
	state := make(map[*Entry]uint8, len(s.byID))
	for _, start := range s.byID {
		if state[start] == done {
			continue
		}
		var stack []*Entry
		e := start
		for e != nil && state[e] == unvisited {
			state[e] = onStack
			stack = append(stack, e)
			if e.ParentID == "" {
				break
			}
			e = s.byID[e.ParentID]
		}
		if e != nil && state[e] == onStack && e.ParentID != "" {
			if _, ok := s.byID[e.ParentID]; ok {
				return &FileError{File: s.File, Line: e.Line, EntryID: e.ID,
					Err: fmt.Errorf("%w: following parentId from entry %s comes back to it; Pi would loop forever on this file", ErrCycle, e.ID)}
			}
		}
		for _, x := range stack {
			state[x] = done
		}
	}
	return nil
}

// Path returns the entries from the root to leafID (root first), following parentId as Pi's
// getBranch does: the walk stops at a null or missing parent. leafID "" means the current
// leaf (the last entry line).
func (s *Session) Path(leafID string) ([]*Entry, error) {
	if leafID == "" {
		leafID = s.leafID
	}
	if leafID == "" {
		return nil, nil
	}
	e := s.byID[leafID]
	if e == nil {
		return nil, &FileError{File: s.File, EntryID: leafID, Err: errors.New("no entry with this id")}
	}
	var rev []*Entry
	for e != nil {
		rev = append(rev, e)
		if len(rev) > len(s.byID) {
			return nil, &FileError{File: s.File, EntryID: leafID, Err: ErrCycle}
		}
		if e.ParentID == "" {
			break
		}
		e = s.byID[e.ParentID]
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev, nil
}

// HasAssistant reports whether the file holds at least one assistant message. Pi rewrites
// (duplicates) the content of a file without one on its next flush, so compactor never
// appends to such a file.
func (s *Session) HasAssistant() bool {
	for _, e := range s.Entries {
		if e.IsMessage(RoleAssistant) {
			return true
		}
	}
	return false
}

// jsonString decodes a string value of a validated line ("" and false for other types).
func jsonString(raw json.RawMessage) (string, bool) {
	return jsonStringFast(raw)
}

func jsonNumber(raw json.RawMessage) (float64, bool) {
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return 0, false
	}
	var v float64
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, false
	}
	return v, true
}

// jsonTruthy is JavaScript truthiness for a JSON value.
func jsonTruthy(raw json.RawMessage) bool {
	switch s := string(raw); s {
	case "", "null", "false", `""`, "0", "-0":
		return false
	default:
		if v, ok := jsonNumber(raw); ok {
			return v != 0
		}
		return true
	}
}

func nonNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}

func isBlank(line []byte) bool {
	t, _ := jsTrim(line)
	return len(t) == 0
}

// jsTrim trims JavaScript white space (String.prototype.trim: ASCII space and controls
// \t\n\v\f\r, U+00A0, U+FEFF (BOM), U+1680, U+2000–U+200A, U+2028, U+2029, U+202F, U+205F,
// U+3000). It returns the trimmed bytes and the 1-based line number of their first byte.
func jsTrim(b []byte) ([]byte, int) {
	line := 1
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if !isJSSpace(r) {
			break
		}
		if r == '\n' {
			line++
		}
		b = b[n:]
	}
	for len(b) > 0 {
		r, n := utf8.DecodeLastRune(b)
		if !isJSSpace(r) {
			break
		}
		b = b[:len(b)-n]
	}
	return b, line
}

func trimJSSpace(s string) string {
	b, _ := jsTrim([]byte(s))
	return string(b)
}

func isJSSpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\v', '\f', '\r', 0xA0, 0xFEFF, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200A
}
