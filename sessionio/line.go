package sessionio

import "fmt"

// A line of a session file becomes an entry here, for both readers: the full read (read.go)
// takes the lines in file order, the tail read takes them from the end. The scanner (scan.go)
// validates a line and locates its members in one pass; the decoder (decode.go) builds the
// entry from them (and words the diagnostics about its fields). What a line that is no entry
// is, and the words of the diagnostics about lines and the tree, are written once, here.

// lineKind is what a line of a session file is.
type lineKind uint8

const (
	lineBlank     lineKind = iota // JavaScript white space only: skipped without a word, as Pi does
	lineMalformed                 // not valid JSON
	lineNotObject                 // valid JSON, but not an object
	lineHeader                    // an object whose type is "session"
	lineEntry                     // any other object
)

// lineParser turns lines into entries: one per goroutine (its decoder, the scanner's scratch,
// the fields of the line last scanned).
type lineParser struct {
	dec          decoder
	members, msg []member
	fields       fields // of the line last scanned: sub-slices of it
	msgVal       []byte // its "message" object, as scanEntry found it (nil if none)
}

// scan validates line and, for an object, picks its fields.
func (p *lineParser) scan(line []byte) lineKind {
	if isBlank(line) {
		return lineBlank
	}
	var notObject bool
	var err error
	p.members, p.msg, p.msgVal, notObject, err = scanEntry(line, p.members[:0], p.msg[:0])
	switch {
	case err != nil:
		return lineMalformed
	case notObject:
		return lineNotObject
	}
	p.fields = fields{}
	p.fields.pick(p.members)
	if string(p.fields.typ) == `"session"` {
		return lineHeader
	}
	return lineEntry
}

// entry decodes the entry of the line last scanned (line is that line, or a copy of it that
// p.fields, p.msg and p.msgVal were moved to); n is its line number, 0 while unknown.
func (p *lineParser) entry(line []byte, n int) *Entry {
	return p.dec.entry(&p.fields, line, n, p.msg, p.msgVal)
}

// skipped is the diagnostic of line n (0 while unknown) that is no entry: a lineMalformed,
// a lineNotObject, or a lineHeader other than the first line.
func skipped(kind lineKind, n int) Diagnostic {
	switch kind {
	case lineMalformed:
		return Diagnostic{Line: n, Kind: DiagMalformedLine, Message: "line is not valid JSON; skipped (Pi skips it too)"}
	case lineNotObject:
		// Valid JSON that is not an object (a number, a string, an array...): Pi would keep
		// it as an entry and fail on it later; compactor skips it and says so.
		return Diagnostic{Line: n, Kind: DiagMalformedLine, Message: "line is JSON but not an entry object; skipped"}
	}
	return Diagnostic{Line: n, Kind: DiagExtraHeader, Message: "another session header inside the file; ignored (Pi ignores it too)"}
}

// duplicateID is the diagnostic of line n, whose id was used on line earlier too.
func duplicateID(n int, id string, earlier int) Diagnostic {
	return Diagnostic{Line: n, EntryID: id, Kind: DiagDuplicateID,
		Message: fmt.Sprintf("id also used on line %d; the later line wins (as in Pi)", earlier)}
}

// orphan is the diagnostic of line n, whose parent no line of the file has.
func orphan(n int, id, parent string) Diagnostic {
	return Diagnostic{Line: n, EntryID: id, Kind: DiagOrphan,
		Message: fmt.Sprintf("parent %q not found; the entry is a root and paths through it stop here (as in Pi)", parent)}
}
