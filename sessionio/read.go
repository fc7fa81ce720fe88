package sessionio

import (
	"bytes"
	"errors"
	"fmt"
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
	return Named(path).Read(opts)
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

// ParseWith is Parse with options. Entries keep sub-slices of data (Raw, Message.Raw,
// Details...): data must not be modified afterwards.
func ParseWith(data []byte, file string, opts Options) (*Session, error) {
	s := &Session{File: file, Size: int64(len(data))}
	s.EndsWithNewline = len(data) > 0 && data[len(data)-1] == '\n'

	content, lineNo := jsTrim(data)
	p := lineParser{dec: decoder{file: file, light: opts.Light, diag: s.diag}}
	p.dec.reserve(bytes.Count(content, []byte{'\n'}) + 1)
	haveHeader := false
	// For v1 files: every entry line in order (nil for headers, the header itself at 0) and
	// the firstKeptEntryIndex of compactions, which migration turns into ids.
	var all []*Entry
	var fki map[*Entry][]byte
	for len(content) > 0 {
		var line []byte
		if i := bytes.IndexByte(content, '\n'); i >= 0 {
			line, content = content[:i], content[i+1:]
		} else {
			line, content = content, nil
		}
		n := lineNo
		lineNo++
		kind := p.scan(line)
		switch kind {
		case lineBlank:
			continue
		case lineMalformed, lineNotObject:
			s.diag(skipped(kind, n))
			continue
		}
		if !haveHeader {
			h, ok := header(&p.fields, line)
			if !ok || kind != lineHeader {
				return nil, &FileError{File: file, Line: n, Err: ErrNoHeader}
			}
			s.Header, haveHeader = h, true
			if h.Version < 2 {
				all = append(all, nil)
				fki = map[*Entry][]byte{}
			}
			continue
		}
		if kind == lineHeader {
			s.diag(skipped(kind, n))
			if fki != nil {
				all = append(all, nil)
			}
			continue
		}
		e := p.entry(line, n)
		s.Entries = append(s.Entries, e)
		if fki != nil {
			all = append(all, e)
			if e.Type == TypeCompaction && len(p.fields.firstKeptEntryIndex) > 0 {
				fki[e] = p.fields.firstKeptEntryIndex
			}
		}
	}
	if !haveHeader {
		if len(s.Diagnostics) == 0 {
			return nil, &FileError{File: file, Err: ErrEmpty}
		}
		return nil, &FileError{File: file, Line: s.Diagnostics[0].Line,
			Err: fmt.Errorf("%w: no line is a JSON object (%d lines skipped)", ErrNoHeader, len(s.Diagnostics))}
	}
	if s.Header.Version < 2 {
		s.migrateV1(all, fki)
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

// index builds byID, labels, the name and the leaf, reports duplicates and orphans, and
// rejects parentId cycles. Children are indexed on first use (only inspect asks).
func (s *Session) index() error {
	s.byID = make(map[string]*Entry, len(s.Entries))
	s.labels = map[string]string{}
	s.leafID = ""
	for _, e := range s.Entries {
		if prev, dup := s.byID[e.ID]; dup {
			s.diag(duplicateID(e.Line, e.ID, prev.Line))
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
	for _, e := range s.Entries {
		if e.ParentID == "" || s.byID[e.ID] != e { // a root, or a superseded duplicate
			continue
		}
		if _, ok := s.byID[e.ParentID]; !ok {
			s.diag(orphan(e.Line, e.ID, e.ParentID))
		}
	}
	return findCycle(s.File, s.Entries, func(id string) *Entry { return s.byID[id] })
}

// Children returns the entries whose parentId is id, in file order (superseded duplicates
// and orphans excluded).
func (s *Session) Children(id string) []*Entry {
	if s.children == nil {
		s.children = make(map[string][]*Entry)
		for _, e := range s.Entries {
			if e.ParentID == "" || s.byID[e.ID] != e {
				continue
			}
			if _, ok := s.byID[e.ParentID]; ok {
				s.children[e.ParentID] = append(s.children[e.ParentID], e)
			}
		}
	}
	return s.children[id]
}

// findCycle fails on any parentId cycle among the entries that get returns for their ids
// (the winners of duplicate ids): Pi's path walk would never end on one. Each entry is
// visited once: a walk stops at an entry already known to reach a root.
func findCycle(file string, entries []*Entry, get func(string) *Entry) error {
	const (
		unvisited = iota
		onStack
		done
	)
	state := make(map[*Entry]uint8, len(entries))
	var stack []*Entry
	for _, start := range entries {
		if get(start.ID) != start || state[start] == done {
			continue
		}
		stack = stack[:0]
		e := start
		for e != nil && state[e] == unvisited {
			state[e] = onStack
			stack = append(stack, e)
			if e.ParentID == "" {
				break
			}
			e = get(e.ParentID)
		}
		if e != nil && state[e] == onStack && e.ParentID != "" && get(e.ParentID) != nil {
			return &FileError{File: file, Line: e.Line, EntryID: e.ID,
				Err: fmt.Errorf("%w: following parentId from entry %s comes back to it; Pi would loop forever on this file", ErrCycle, e.ID)}
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
