package jsonscan

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// Member is one top-level key of a JSON object and the raw bytes of its value.
type Member struct {
	Key []byte // the key's bytes between the quotes (escapes not decoded)
	Val []byte
}

// errScan is returned for bytes that are not one valid JSON value.
var errScan = errors.New("invalid JSON")

// maxDepth bounds nesting, as encoding/json does.
const maxDepth = 10000

// scanner validates JSON (RFC 8259, which is what JSON.parse accepts) in one pass and
// locates the members of the top-level object, so that an entry line is read once instead
// of three or four times by encoding/json's validate-then-decode passes over the entry and
// again over its message. Bytes ≥ 0x80 are accepted as they are, as Node's UTF-8 decoding
// turns invalid sequences into U+FFFD before JSON.parse sees them.
type scanner struct {
	b     []byte
	i     int
	depth int
	// collect makes the next object() (the top-level one) record its members; nested makes
	// it record them in msg instead (the "message" member of an entry, so that decoding the
	// message does not walk its bytes again).
	collect, nested bool
	members, msg    []Member
	msgVal          []byte
}

// ScanObject validates b as a single JSON value that must be an object, surrounded by
// optional whitespace, and appends its members to dst. notObject reports valid JSON that is
// not an object.
func ScanObject(b []byte, dst []Member) (members []Member, notObject bool, err error) {
	s := scanner{b: b, members: dst}
	return s.scan()
}

// ScanEntry is ScanObject for an entry line: it also finds the members of the last
// top-level "message" member whose value is an object (msgVal is that value; nil if none).
func ScanEntry(b []byte, dst, msgDst []Member) (members, msg []Member, msgVal []byte, notObject bool, err error) {
	s := scanner{b: b, members: dst, msg: msgDst}
	members, notObject, err = s.scan()
	if err != nil || notObject {
		return dst, msgDst, nil, notObject, err
	}
	return members, s.msg, s.msgVal, false, nil
}

func (s *scanner) scan() (members []Member, notObject bool, err error) {
	b, dst := s.b, s.members
	s.ws()
	if s.i >= len(b) {
		return dst, false, errScan
	}
	notObject = b[s.i] != '{'
	if notObject {
		err = s.value()
	} else {
		s.collect = true
		err = s.object()
	}
	if err != nil {
		return dst, false, err
	}
	s.ws()
	if s.i != len(b) {
		return dst, false, errScan
	}
	return s.members, notObject, nil
}

// Get returns the value of the last member named key (JSON.parse keeps the last duplicate).
func Get(ms []Member, key string) []byte {
	for i := len(ms) - 1; i >= 0; i-- {
		if string(ms[i].Key) == key {
			return ms[i].Val
		}
	}
	return nil
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) value() error {
	if s.i >= len(s.b) {
		return errScan
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object()
	case c == '[':
		return s.array()
	case c == '"':
		return s.str()
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	}
	return errScan
}

func (s *scanner) lit(w string) error {
	if len(s.b)-s.i < len(w) || string(s.b[s.i:s.i+len(w)]) != w {
		return errScan
	}
	s.i += len(w)
	return nil
}

func (s *scanner) enter() error {
	s.depth++
	if s.depth > maxDepth {
		return fmt.Errorf("%w: nested deeper than %d", errScan, maxDepth)
	}
	return nil
}

func (s *scanner) object() error {
	collect, nested := s.collect, s.nested
	s.collect, s.nested = false, false
	if err := s.enter(); err != nil {
		return err
	}
	s.i++ // {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		s.depth--
		return nil
	}
	for {
		s.ws()
		ks := s.i
		if err := s.str(); err != nil {
			return err
		}
		key := s.b[ks+1 : s.i-1]
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return errScan
		}
		s.i++
		s.ws()
		vs := s.i
		msg := collect && !nested && string(key) == "message" && vs < len(s.b) && s.b[vs] == '{'
		if msg {
			s.collect, s.nested = true, true
			s.msg = s.msg[:0]
		}
		if err := s.value(); err != nil {
			return err
		}
		switch {
		case msg:
			s.msgVal = s.b[vs:s.i]
			s.members = append(s.members, Member{Key: key, Val: s.msgVal})
		case nested:
			s.msg = append(s.msg, Member{Key: key, Val: s.b[vs:s.i]})
		case collect:
			s.members = append(s.members, Member{Key: key, Val: s.b[vs:s.i]})
		}
		s.ws()
		if s.i >= len(s.b) {
			return errScan
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			s.depth--
			return nil
		default:
			return errScan
		}
	}
}

func (s *scanner) array() error {
	if err := s.enter(); err != nil {
		return err
	}
	s.i++ // [
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		s.depth--
		return nil
	}
	for {
		s.ws()
		if err := s.value(); err != nil {
			return err
		}
		s.ws()
		if s.i >= len(s.b) {
			return errScan
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			s.depth--
			return nil
		default:
			return errScan
		}
	}
}

func (s *scanner) str() error {
	b := s.b
	if s.i >= len(b) || b[s.i] != '"' {
		return errScan
	}
	i := s.i + 1
	for {
		i = skipPlain(b, i)
		if i >= len(b) {
			return errScan
		}
		switch c := b[i]; {
		case c == '"':
			s.i = i + 1
			return nil
		case c == '\\':
			if i+1 >= len(b) {
				return errScan
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return errScan
				}
				i += 6
			default:
				return errScan
			}
		default: // a control character
			return errScan
		}
	}
}

// Bytes of a word, for the eight-at-a-time test in skipPlain.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// skipPlain returns the index of the first byte at or after i that ends or interrupts a
// string literal ('"', '\\' or a control character below 0x20), or len(b). Most of a session
// file's bytes are inside strings (tool output, base64 images), so this loop is where a
// full read spends its time; it tests eight bytes per step: for a word x, (x - n*ones) &^ x
// has the high bit of a byte set for the lowest byte below n (and possibly spurious bits
// above it, never below), which finds '"' and '\\' as zero bytes of x^'"' and x^'\\'.
func skipPlain(b []byte, i int) int {
	// Most strings are short (keys, ids, roles): eight bytes at a time first; a long run
	// (tool output, base64 data) goes on 16 bytes at a time where the CPU can.
	for end := min(i+16, len(b)); i+8 <= end; i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q := x ^ ('"' * ones)
		bs := x ^ ('\\' * ones)
		if m := ((q - ones) &^ q) | ((bs - ones) &^ bs) | ((x - 0x20*ones) &^ x); m&highs != 0 {
			return i + bits.TrailingZeros64(m&highs)>>3
		}
	}
	if hasSIMD && len(b)-i >= 16 {
		if i = skipPlainSIMD(b, i); len(b)-i >= 16 {
			return i // a special byte
		}
	}
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q := x ^ ('"' * ones)
		bs := x ^ ('\\' * ones)
		if m := ((q - ones) &^ q) | ((bs - ones) &^ bs) | ((x - 0x20*ones) &^ x); m&highs != 0 {
			return i + bits.TrailingZeros64(m&highs)>>3
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return i
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func (s *scanner) number() error {
	b, i := s.b, s.i
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return errScan
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return errScan
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return errScan
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	s.i = i
	return nil
}
