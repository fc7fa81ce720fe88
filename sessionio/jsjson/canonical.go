package jsjson

// Canonical and CanonicalLen: JSON.stringify(JSON.parse(raw)) in one pass, as three files:
//
//   canonical.go             the API, the pooled parser and its dispatch on the next value
//   canonical_scalars.go     string and number literals (the emitting and the counting reader)
//   canonical_containers.go  arrays and objects: JavaScript property order, repeated keys
//
// Object handling is apart because it is the one place where the output is not written in
// input order (keys are reordered or dropped in place when an object closes).

import (
	"fmt"
	"strconv"
	"sync"
)

// MaxDepth is the deepest nesting of arrays and objects Canonical accepts. It matches
// encoding/json's limit; deeper input is rejected rather than risking the stack. (Node 20's
// JSON.stringify already fails with a RangeError somewhere between 1000 and 5000 levels.)
const MaxDepth = 10000

// SyntaxError reports input that JSON.parse would reject, with the byte offset of the
// problem in the raw input.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("jsjson: %s at offset %d", e.Msg, e.Offset)
}

// Canonical appends JSON.stringify(JSON.parse(raw)) to dst: the compact form, with
// strings re-escaped as AppendString does, numbers read as float64 and re-formatted by
// AppendNumber (1.0 → 1, 1E2 → 100), and object members in JavaScript property order:
// keys that are array indices ("0".."4294967294" in canonical form) first in ascending
// numeric order, then the other keys in insertion order; a repeated key keeps the
// position of its first occurrence and the value of its last, as JSON.parse does.
//
// raw is read as Node reads a UTF-8 file (see the package doc). Input that JSON.parse
// would reject returns a *SyntaxError carrying the byte offset, and dst unchanged.
//
// The parser makes one pass and writes straight into dst; only an object whose keys
// actually need reordering or de-duplicating is rewritten, in place, when it closes.
// dst must not overlap raw.
func Canonical(dst, raw []byte) ([]byte, error) {
	p := getParser(raw, dst, false)
	defer putParser(p)
	if _, err := p.top(); err != nil {
		return dst, err
	}
	out := p.out
	p.out = nil
	return out, nil
}

// CanonicalLen returns the JavaScript length (UTF-16 code units) of Canonical's output,
// i.e. JSON.stringify(JSON.parse(raw)).length, which is what Pi's token estimate uses for
// tool-call arguments. It does not build the output: only the keys of the objects being
// parsed are held, in a pooled buffer.
func CanonicalLen(raw []byte) (int, error) {
	p := getParser(raw, nil, true)
	defer putParser(p)
	return p.top()
}

var parserPool = sync.Pool{New: func() any { return new(parser) }}

func getParser(raw, dst []byte, count bool) *parser {
	p := parserPool.Get().(*parser)
	p.data, p.pos, p.depth, p.count = raw, 0, 0, count
	if count {
		p.out = p.keys[:0]
	} else {
		p.out = dst
	}
	return p
}

func putParser(p *parser) {
	if p.count {
		p.keys = p.out[:0]
	}
	p.data, p.out = nil, nil
	p.members = p.members[:0]
	if cap(p.scratch) > 1<<20 {
		p.scratch = nil // do not pin a huge buffer in the pool
	}
	if cap(p.keys) > 1<<20 {
		p.keys = nil
	}
	parserPool.Put(p)
}

// parser is a recursive-descent JSON parser that writes the canonical form as it goes.
//
// In count mode (CanonicalLen) every value is still written to out, measured, and cut
// off again, so out only ever holds the keys of the objects currently open.
type parser struct {
	data  []byte
	pos   int
	out   []byte
	count bool
	depth int

	members []member // members of all objects being parsed, innermost last
	scratch []byte   // reordering buffer
	order   []int    // reordering permutation
	keys    []byte   // out buffer kept for count mode
}

func (p *parser) errorf(off int, format string, args ...any) error {
	return &SyntaxError{Offset: off, Msg: fmt.Sprintf(format, args...)}
}

// unexpected describes the byte at pos (or the end of input) for an error.
func (p *parser) unexpected(what string) error {
	if p.pos >= len(p.data) {
		return p.errorf(p.pos, "unexpected end of input, expected %s", what)
	}
	return p.errorf(p.pos, "unexpected %s, expected %s", strconv.QuoteRune(rune(p.data[p.pos])), what)
}

func (p *parser) top() (int, error) {
	n, err := p.value()
	if err != nil {
		return 0, err
	}
	p.skipWS()
	if p.pos != len(p.data) {
		return 0, p.unexpected("end of input after top-level value")
	}
	return n, nil
}

// skipWS skips the four JSON whitespace characters (nothing else, not even a BOM).
func (p *parser) skipWS() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// value parses one value. In count mode it returns the value's UTF-16 length and
// leaves out as it found it; in emit mode it appends the value and returns 0.
func (p *parser) value() (int, error) {
	p.skipWS()
	if p.pos >= len(p.data) {
		return 0, p.unexpected("a value")
	}
	switch c := p.data[p.pos]; c {
	case '{':
		return p.object()
	case '[':
		return p.array()
	case '"':
		if p.count {
			return p.strLen()
		}
		return 0, p.str()
	case 't':
		return p.literal("true")
	case 'f':
		return p.literal("false")
	case 'n':
		return p.literal("null")
	default:
		if c == '-' || c >= '0' && c <= '9' {
			mark := len(p.out)
			if err := p.number(); err != nil {
				return 0, err
			}
			if p.count {
				n := len(p.out) - mark // numbers are ASCII
				p.out = p.out[:mark]
				return n, nil
			}
			return 0, nil
		}
		return 0, p.unexpected("a value")
	}
}

func (p *parser) literal(word string) (int, error) {
	if len(p.data)-p.pos < len(word) || string(p.data[p.pos:p.pos+len(word)]) != word {
		for i := range len(word) {
			if p.pos+i >= len(p.data) || p.data[p.pos+i] != word[i] {
				p.pos += i
				return 0, p.unexpected(strconv.Quote(word))
			}
		}
	}
	p.pos += len(word)
	if p.count {
		return len(word), nil
	}
	p.out = append(p.out, word...)
	return 0, nil
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > MaxDepth {
		return p.errorf(p.pos, "nesting deeper than %d", MaxDepth)
	}
	return nil
}
