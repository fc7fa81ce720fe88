package sessionio

import (
	"encoding/json"
	"fmt"
	"github.com/compactor-dev/compactor/sessionio/jsonscan"
	"unicode/utf8"
)

// A line of a session file becomes an entry here, for both readers: the full read (read.go)
// takes the lines in file order, the tail read takes them from the end. The scanner (package jsonscan)
// validates a line and locates its members in one pass; the decoder (decode.go) builds the
// entry from them (and words the diagnostics about its fields). What a line that is no entry
// is, white space as Pi's trim sees it, and the words of the diagnostics about lines and the
// tree, are written once, here.

// lineKind is what a line of a session file is.
type lineKind uint8

const (
	lineBlank     lineKind = iota // JavaScript white space only: skipped without a word, as Pi does
	lineMalformed                 // not valid JSON
	lineNotObject                 // valid JSON, but not an object
	lineHeader                    // an object whose type is "session"
	lineEntry                     // any other object
)

// isBlank reports whether a line is JavaScript white space only (Pi skips such lines).
func isBlank(line []byte) bool {
	t, _ := jsTrim(line)
	return len(t) == 0
}

// jsTrim trims JavaScript white space (String.prototype.trim: ASCII space and controls
// \t\n\v\f\r, U+00A0, U+FEFF (BOM), U+1680, U+2000–U+200A, U+2028, U+2029, U+202F, U+205F,
// U+3000). It returns the trimmed bytes and the 1-based line number of their first byte.
func jsTrim(b []byte) ([]byte, int) {
	b, line := jsTrimStart(b)
	for len(b) > 0 {
		r, n := utf8.DecodeLastRune(b)
		if !isJSSpace(r) {
			break
		}
		b = b[:len(b)-n]
	}
	return b, line
}

// jsTrimStart is the first half of jsTrim: the white space at the start only.
func jsTrimStart(b []byte) ([]byte, int) {
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

// lineParser turns lines into entries: one per goroutine (its decoder, the scanner's scratch,
// the fields of the line last scanned).
type lineParser struct {
	dec          decoder
	members, msg []jsonscan.Member
	fields       fields // of the line last scanned: sub-slices of it
	msgVal       []byte // its "message" object, as jsonscan.ScanEntry found it (nil if none)
}

// scan validates line and, for an object, picks its fields.
func (p *lineParser) scan(line []byte) lineKind {
	if isBlank(line) {
		return lineBlank
	}
	var notObject bool
	var err error
	p.members, p.msg, p.msgVal, notObject, err = jsonscan.ScanEntry(line, p.members[:0], p.msg[:0])
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

// tailParser is the tail read's lineParser. Lines come from the end of the file, so a line's
// number is known only once the whole file is read: until then it is counted from the end
// (fromEnd). How much of its line an entry keeps depends on what the read has settled so far
// (see known).
type tailParser struct {
	lineParser
	onDisk   bool       // TailOptions.LeaveMessagesOnDisk
	content  bool       // TailOptions.DecodeContent
	facts    bool       // the whole-file facts are kept: the lines' problems are reported
	diags    []tailDiag // the problems of the lines it parsed
	fromEnd  int        // of the line being decoded
	skeleton bool       // leave messages undecoded (known.skeleton)
	quiet    bool       // report nothing (a line of a checkpoint's history, reported already)
	arena    []byte     // the chunk the kept lines are copied into (keepLine)
}

// newTailParser returns a parser for the lines of file that leaves messages on disk (onDisk),
// decodes their content (content) and reports the lines' problems (facts) as the read's
// options say.
func newTailParser(file string, onDisk, content, facts bool) *tailParser {
	p := &tailParser{onDisk: onDisk, content: content, facts: facts}
	p.dec = decoder{file: file, light: true, diag: func(d Diagnostic) { p.diag(p.fromEnd, d) }}
	return p
}

// another is a parser with p's options, for another goroutine.
func (p *tailParser) another() *tailParser {
	return newTailParser(p.dec.file, p.onDisk, p.content, p.facts)
}

// tailDiag is a diagnostic whose line numbers are known only once the whole file is read:
// fromEnd counts lines from the end, phase orders them as the full read does (line problems,
// then duplicate ids, then orphans), seq keeps their order within a line.
type tailDiag struct {
	d              Diagnostic
	phase, fromEnd int
	seq            int
	earlierFromEnd int // duplicate ids: the earlier line with the id
}

// parse decodes a line read fromEnd lines from the end that starts at lineAt in the file;
// nil when it is no entry. With keepBytes (the context's lines) the entry keeps a copy of its
// line; without it the entry keeps none.
func (p *tailParser) parse(line []byte, fromEnd int, lineAt int64, keepBytes bool) *Entry {
	switch kind := p.scan(line); kind {
	case lineBlank:
		return nil
	case lineMalformed, lineNotObject, lineHeader:
		p.diag(fromEnd, skipped(kind, 0))
		return nil
	}
	onDisk := p.onDisk && string(p.fields.typ) == `"message"`
	if keepBytes && !onDisk { // the entry points into a copy of the line: move what was found there
		kept := p.keepLine(line)
		rebase(p.members, line, kept)
		rebase(p.msg, line, kept)
		if p.msgVal != nil {
			p.msgVal = moved(p.msgVal, line, kept)
		}
		line = kept
		p.fields = fields{}
		p.fields.pick(p.members)
	}
	if p.skeleton && !keepBytes {
		p.fields.message = nil // a position on the path, no more (see known.skeleton)
	}
	p.fromEnd = fromEnd
	e := p.entry(line, 0)
	e.fromEnd = fromEnd
	e.at = Span{Off: lineAt, Len: int64(len(line))}
	if onDisk {
		if m := e.Message; m != nil {
			m.At = Span{Off: lineAt + int64(cap(line)-cap(m.Raw)), Len: int64(len(m.Raw))}
			if keepBytes && p.content {
				decodeContentNow(m, p.msg, p.msgVal)
			}
		}
	}
	if !keepBytes {
		// Pi 1.x's members point into the line too; only the context's entries need them.
		e.Usage, e.Replacement, e.SystemMessage = nil, nil, nil
	}
	if !keepBytes || onDisk {
		e.Raw, e.Details, e.Content, e.Display = nil, nil, nil, nil
		if e.Message != nil {
			e.Message.Raw = nil
		}
	}
	return e
}

// diag reports a problem of the line fromEnd (numbered once the whole file is read).
func (p *tailParser) diag(fromEnd int, d Diagnostic) {
	if !p.facts || p.quiet {
		return
	}
	seq := 0
	if n := len(p.diags); n > 0 && p.diags[n-1].fromEnd == fromEnd {
		seq = p.diags[n-1].seq + 1
	}
	p.diags = append(p.diags, tailDiag{d: d, fromEnd: fromEnd, seq: seq})
}

// keepLine copies a line out of the reader's reused buffer, for an entry that keeps its
// bytes: small lines into shared chunks, large ones on their own, so that what stays in
// memory is about the context's own bytes.
func (p *tailParser) keepLine(line []byte) []byte {
	const chunk, large = 256 << 10, 32 << 10
	if len(line) >= large {
		return append([]byte(nil), line...)
	}
	if cap(p.arena)-len(p.arena) < len(line) {
		p.arena = make([]byte, 0, chunk)
	}
	start := len(p.arena)
	p.arena = append(p.arena, line...)
	return p.arena[start:len(p.arena):len(p.arena)]
}

// moved returns the part of to at the place sub has in from (sub is a sub-slice of from).
func moved(sub, from, to []byte) []byte {
	at := cap(from) - cap(sub)
	return to[at : at+len(sub)]
}

// rebase moves members found in from to the same places in to, a copy of from.
func rebase(ms []jsonscan.Member, from, to []byte) {
	for i := range ms {
		ms[i].Key = moved(ms[i].Key, from, to)
		ms[i].Val = moved(ms[i].Val, from, to)
	}
}

// decodeContentNow decodes the content of a message whose line is about to be reused (the
// last "content" member, as the full decoding takes), and a Pi 1.x message's sections, tools
// and nested calls, and copies what points into the line: the tool calls' arguments. Problems in the content are not reported, as with light reads.
func decodeContentNow(m *Message, ms []jsonscan.Member, msgVal []byte) {
	if !sameBytes(m.Raw, msgVal) || ms == nil {
		ms = jsonscan.TrustedMembers(m.Raw, nil)
	}
	for i := len(ms) - 1; i >= 0; i-- {
		if jsonscan.Key(ms[i].Key) == "content" {
			m.Content, _ = decodeContent(ms[i].Val)
			break
		}
	}
	// Pi 1.x's system messages and tool results: what decodeMessageInto keeps of them, copied.
	var fe fieldErr
	for _, mb := range ms {
		switch jsonscan.Key(mb.Key) {
		case "sections":
			m.Sections = decodeSections(mb.Val, &fe)
		case "toolsAdded":
			m.ToolsAdded = copyRaw(mb.Val)
		case "toolsRemoved":
			m.ToolsRemoved = copyRaw(mb.Val)
		case "nestedCalls":
			m.NestedCalls = copyRaw(mb.Val)
		}
	}
	for i := range m.Content.Blocks {
		if b := &m.Content.Blocks[i]; b.Arguments != nil {
			b.Arguments = append(json.RawMessage(nil), b.Arguments...)
		}
	}
}

// known is what a tail read has established so far; it decides how much of a line its entry
// keeps. The walk (walk.go) sets context, model and thinking as it goes; the sources of
// entries (backward.go, checkpointread.go) set assistant.
type known struct {
	context   bool // the walk reached the context's first entry: later lines keep no bytes
	model     bool // the walk met the entry that settles the model
	thinking  bool // the walk met the entry that settles the thinking level
	assistant bool // a line read (or the checkpoint's history) holds an assistant message
	facts     bool // the whole-file facts are kept (NeedFile, FileLater): every message is decoded, for its diagnostics
}

// skeleton reports whether lines from here on are needed for their place on the path only:
// the context's lines are behind, the model is settled (the entry that set it is closer to the
// leaf than any still to read, so picontext.Build's answer cannot change), an assistant is known
// to exist and no whole-file fact is asked for. Their messages are then not decoded (a
// quarter of the time of a long history): such entries have a nil Message.
func (k *known) skeleton() bool {
	return k.context && k.model && k.assistant && !k.facts
}

// needsLine reports whether an entry of a checkpoint's history, of type typ (an assistant
// message: assistant), must be read from its line rather than made from its record: the
// context reaches back into the history, or the model or thinking level is not settled and
// this entry may settle it.
func (k *known) needsLine(typ string, assistant bool) bool {
	return !k.context ||
		!k.model && (typ == TypeModelChange || assistant) ||
		!k.thinking && typ == TypeThinkingLevelChange
}
