package jsjson

import (
	"encoding/binary"
	"fmt"
	"slices"
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

// member is one object member already parsed.
type member struct {
	kStart, kEnd int   // canonical key, quotes included, in out
	vEnd         int   // end of the canonical value in out (emit mode)
	vLen         int   // UTF-16 length of the value (count mode)
	index        int64 // the key's array index, or -1
	src          int   // member (relative) whose value wins; -1 for a later duplicate
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

// number parses a JSON number and writes it as JSON.stringify(Number(literal)) would.
func (p *parser) number() error {
	start := p.pos
	d := p.data
	i := p.pos
	if d[i] == '-' {
		i++
	}
	intStart := i
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	default:
		p.pos = i
		return p.unexpected("a digit")
	}
	intDigits := i - intStart
	simple := true
	if i < len(d) && d[i] == '.' {
		simple = false
		i++
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			p.pos = i
			return p.unexpected("a digit after '.'")
		}
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		simple = false
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			p.pos = i
			return p.unexpected("a digit in the exponent")
		}
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	}
	p.pos = i
	lit := d[start:i]
	// Integers of up to 15 digits are exact in float64 and print as written; "-0" is
	// the one such literal JSON.stringify changes.
	if simple && intDigits <= 15 && !(intDigits == 1 && d[intStart] == '0' && intStart > start) {
		p.out = append(p.out, lit...)
		return nil
	}
	// ParseFloat rounds correctly, as JavaScript does; out of range gives ±Inf (written
	// as null, like Infinity) or 0.
	f, _ := strconv.ParseFloat(string(lit), 64)
	p.out = AppendNumber(p.out, f)
	return nil
}

// str parses a string literal at pos and appends its canonical form.
func (p *parser) str() error {
	d := p.data
	i := p.pos + 1
	p.out = append(p.out, '"')
	start := i
	for {
		// Plain bytes are copied in one run, found eight at a time where possible.
		for i+8 <= len(d) && plainWord(binary.LittleEndian.Uint64(d[i:])) {
			i += 8
		}
		for i < len(d) && byteClass[d[i]] == classPlain {
			i++
		}
		if i >= len(d) {
			return p.errorf(len(d), "unterminated string starting at offset %d", p.pos)
		}
		switch byteClass[d[i]] {
		case classQuote:
			p.out = append(p.out, d[start:i]...)
			p.out = append(p.out, '"')
			p.pos = i + 1
			return nil
		case classHigh:
			r, size := decode(d, i, false)
			if r == invalid {
				p.out = append(p.out, d[start:i]...)
				p.out = append(p.out, replacement...)
				i += size
				start = i
			} else {
				i += size
			}
		case classControl:
			return p.errorf(i, "control character %#02x in string", d[i])
		case classBackslash:
			p.out = append(p.out, d[start:i]...)
			if i+1 >= len(d) {
				return p.errorf(len(d), "unterminated string starting at offset %d", p.pos)
			}
			switch e := d[i+1]; e {
			case '"', '\\', 'b', 'f', 'n', 'r', 't':
				p.out = append(p.out, '\\', e)
				i += 2
			case '/':
				p.out = append(p.out, '/')
				i += 2
			case 'u':
				r, ok := hex4(d, i+2)
				if !ok {
					return p.errorf(i, "invalid \\u escape")
				}
				i += 6
				if r >= surrHiMin && r <= surrHiMax {
					if lo, ok := lowSurrogateEscape(d, i); ok {
						r = 0x10000 + (r-surrHiMin)<<10 + (lo - surrLoMin)
						i += 6
					}
				}
				p.out = appendJSRune(p.out, r)
			default:
				return p.errorf(i, "invalid escape '\\%c'", e)
			}
			start = i
		}
	}
}

// strLen parses a string literal at pos like str, but only returns the UTF-16 length
// of its canonical form (CanonicalLen's hot path: nothing is written).
func (p *parser) strLen() (int, error) {
	d := p.data
	i := p.pos + 1
	n := 0
	for {
		start := i
		for i+8 <= len(d) && plainWord(binary.LittleEndian.Uint64(d[i:])) {
			i += 8
		}
		for i < len(d) && byteClass[d[i]] == classPlain {
			i++
		}
		n += i - start // plain bytes are ASCII: one unit each
		if i >= len(d) {
			return 0, p.errorf(len(d), "unterminated string starting at offset %d", p.pos)
		}
		switch byteClass[d[i]] {
		case classQuote:
			p.pos = i + 1
			return n + 2, nil
		case classHigh:
			r, size := decode(d, i, false)
			n += utf16Units(r) // invalid reads as U+FFFD: 1
			i += size
		case classControl:
			return 0, p.errorf(i, "control character %#02x in string", d[i])
		case classBackslash:
			if i+1 >= len(d) {
				return 0, p.errorf(len(d), "unterminated string starting at offset %d", p.pos)
			}
			switch e := d[i+1]; e {
			case '"', '\\', 'b', 'f', 'n', 'r', 't':
				n += 2
				i += 2
			case '/':
				n++
				i += 2
			case 'u':
				r, ok := hex4(d, i+2)
				if !ok {
					return 0, p.errorf(i, "invalid \\u escape")
				}
				i += 6
				switch {
				case r >= surrHiMin && r <= surrHiMax:
					if _, ok := lowSurrogateEscape(d, i); ok {
						n += 2 // raw pair
						i += 6
					} else {
						n += 6 // \udxxx
					}
				case r >= surrLoMin && r <= surrLoMax:
					n += 6
				case r < 0x20:
					if shortEscape[r] != 0 {
						n += 2
					} else {
						n += 6
					}
				case r == '"' || r == '\\':
					n += 2
				default:
					n++
				}
			default:
				return 0, p.errorf(i, "invalid escape '\\%c'", e)
			}
		}
	}
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > MaxDepth {
		return p.errorf(p.pos, "nesting deeper than %d", MaxDepth)
	}
	return nil
}

func (p *parser) array() (int, error) {
	if err := p.enter(); err != nil {
		return 0, err
	}
	p.pos++
	if !p.count {
		p.out = append(p.out, '[')
	}
	total := 2
	p.skipWS()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
	} else {
		for n := 0; ; n++ {
			if n > 0 {
				if p.count {
					total++
				} else {
					p.out = append(p.out, ',')
				}
			}
			v, err := p.value()
			if err != nil {
				return 0, err
			}
			total += v
			p.skipWS()
			if p.pos < len(p.data) && p.data[p.pos] == ',' {
				p.pos++
				continue
			}
			if p.pos < len(p.data) && p.data[p.pos] == ']' {
				p.pos++
				break
			}
			return 0, p.unexpected("',' or ']'")
		}
	}
	p.depth--
	if p.count {
		return total, nil
	}
	p.out = append(p.out, ']')
	return 0, nil
}

// linearDupLimit is how many members an object may have before duplicate keys are found
// through a map instead of by comparing against every earlier key.
const linearDupLimit = 16

func (p *parser) object() (int, error) {
	if err := p.enter(); err != nil {
		return 0, err
	}
	p.pos++
	objStart := len(p.out)
	if !p.count {
		p.out = append(p.out, '{')
	}
	base := len(p.members)
	reorder := false // keys need sorting or de-duplicating
	sawName := false // a non-index key has been seen
	lastIndex := int64(-1)
	var seen map[string]int // key → first member, once the object is large

	p.skipWS()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
	} else {
		for {
			p.skipWS()
			if p.pos >= len(p.data) || p.data[p.pos] != '"' {
				return 0, p.unexpected("a string key")
			}
			rel := len(p.members) - base
			if rel > 0 && !p.count {
				p.out = append(p.out, ',')
			}
			kStart := len(p.out)
			if err := p.str(); err != nil {
				return 0, err
			}
			m := member{kStart: kStart, kEnd: len(p.out), index: arrayIndex(p.out[kStart+1 : len(p.out)-1]), src: rel}
			if m.index >= 0 {
				if sawName || m.index < lastIndex {
					reorder = true
				}
				lastIndex = max(lastIndex, m.index)
			} else {
				sawName = true
			}
			first := findDup(p.out, p.members[base:], m, &seen)
			if first >= 0 {
				reorder = true
				p.members[base+first].src = rel
				m.src = -1
			}
			p.skipWS()
			if p.pos >= len(p.data) || p.data[p.pos] != ':' {
				return 0, p.unexpected("':'")
			}
			p.pos++
			if !p.count {
				p.out = append(p.out, ':')
			}
			v, err := p.value()
			if err != nil {
				return 0, err
			}
			m.vEnd, m.vLen = len(p.out), v
			p.members = append(p.members, m)
			p.skipWS()
			if p.pos < len(p.data) && p.data[p.pos] == ',' {
				p.pos++
				continue
			}
			if p.pos < len(p.data) && p.data[p.pos] == '}' {
				p.pos++
				break
			}
			return 0, p.unexpected("',' or '}'")
		}
	}
	p.depth--
	ms := p.members[base:]
	p.members = p.members[:base] // ms stays readable: nothing appends until we return
	if p.count {
		total, n := 2, 0
		for _, m := range ms {
			if m.src < 0 {
				continue
			}
			total += validUTF16Len(p.out[m.kStart:m.kEnd]) + 1 + ms[m.src].vLen
			n++
		}
		if n > 1 {
			total += n - 1
		}
		p.out = p.out[:objStart]
		return total, nil
	}
	if reorder {
		p.out, p.scratch, p.order = reorderMembers(p.out, objStart, ms, p.scratch, p.order)
	}
	p.out = append(p.out, '}')
	return 0, nil
}

// findDup returns the (relative) index of the earlier member of ms whose key equals
// m's, or -1 and remembers m. Keys are compared as canonical bytes in buf, which is
// exact because the canonical encoding of a string is unique. Small objects compare
// linearly; from linearDupLimit members on, a map (created in *seen) is used.
func findDup(buf []byte, ms []member, m member, seen *map[string]int) int {
	key := buf[m.kStart:m.kEnd]
	if *seen == nil && len(ms) < linearDupLimit {
		for j, o := range ms {
			if o.src >= 0 && o.kEnd-o.kStart == len(key) && string(buf[o.kStart:o.kEnd]) == string(key) {
				return j
			}
		}
		return -1
	}
	if *seen == nil {
		*seen = make(map[string]int, 2*len(ms))
		for j, o := range ms {
			if o.src >= 0 {
				(*seen)[string(buf[o.kStart:o.kEnd])] = j
			}
		}
	}
	if j, ok := (*seen)[string(key)]; ok {
		return j
	}
	(*seen)[string(key)] = len(ms)
	return -1
}

// reorderMembers rewrites the members of the object whose '{' is at out[objStart] into
// JavaScript property order, dropping earlier values of repeated keys. ms describe the
// members as written. It returns out without the closing '}', and the grown buffers.
func reorderMembers(out []byte, objStart int, ms []member, scratch []byte, order []int) ([]byte, []byte, []int) {
	order = order[:0]
	for i, m := range ms {
		if m.src >= 0 && m.index >= 0 {
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(a, b int) int {
		switch ia, ib := ms[a].index, ms[b].index; {
		case ia < ib:
			return -1
		case ia > ib:
			return 1
		}
		return 0
	})
	for i, m := range ms {
		if m.src >= 0 && m.index < 0 {
			order = append(order, i)
		}
	}
	scratch = scratch[:0]
	for n, i := range order {
		if n > 0 {
			scratch = append(scratch, ',')
		}
		m := ms[i]
		v := ms[m.src]
		scratch = append(scratch, out[m.kStart:m.kEnd]...)
		scratch = append(scratch, out[v.kEnd:v.vEnd]...) // ':' and the value
	}
	out = append(out[:objStart+1], scratch...)
	return out, scratch, order
}

// arrayIndex returns the numeric value of key if it is an array index in canonical form
// ("0", or no leading zero, at most 4294967294), which JavaScript lists before other
// keys; otherwise -1.
func arrayIndex(key []byte) int64 {
	if len(key) == 0 || len(key) > 10 || key[0] < '0' || key[0] > '9' || key[0] == '0' && len(key) > 1 {
		return -1
	}
	var v int64
	for _, c := range key {
		if c < '0' || c > '9' {
			return -1
		}
		v = v*10 + int64(c-'0')
	}
	if v > 4294967294 {
		return -1
	}
	return v
}
