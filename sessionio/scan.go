package sessionio

import (
	"errors"
	"fmt"
)

// member is one top-level key of a JSON object and the raw bytes of its value.
type member struct {
	key []byte // the key's bytes between the quotes (escapes not decoded)
	val []byte
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
}

// scanObject validates b as a single JSON value that must be an object, surrounded by
// optional whitespace, and appends its members to dst. notObject reports valid JSON that is
// not an object.
func scanObject(b []byte, dst []member) (members []member, notObject bool, err error) {
	s := scanner{b: b}
	s.ws()
	if s.i >= len(b) {
		return dst, false, errScan
	}
	if b[s.i] != '{' {
		if err := s.value(); err != nil {
			return dst, false, err
		}
		s.ws()
		if s.i != len(b) {
			return dst, false, errScan
		}
		return dst, true, nil
	}
	s.i++
	s.ws()
	if s.i < len(b) && b[s.i] == '}' {
		s.i++
	} else {
		for {
			s.ws()
			ks := s.i
			if err := s.str(); err != nil {
				return dst, false, err
			}
			key := b[ks+1 : s.i-1]
			s.ws()
			if s.i >= len(b) || b[s.i] != ':' {
				return dst, false, errScan
			}
			s.i++
			s.ws()
			vs := s.i
			if err := s.value(); err != nil {
				return dst, false, err
			}
			dst = append(dst, member{key: key, val: b[vs:s.i]})
			s.ws()
			if s.i >= len(b) {
				return dst, false, errScan
			}
			if b[s.i] == ',' {
				s.i++
				continue
			}
			if b[s.i] == '}' {
				s.i++
				break
			}
			return dst, false, errScan
		}
	}
	s.ws()
	if s.i != len(b) {
		return dst, false, errScan
	}
	return dst, false, nil
}

// get returns the value of the last member named key (JSON.parse keeps the last duplicate).
func get(ms []member, key string) []byte {
	for i := len(ms) - 1; i >= 0; i-- {
		if string(ms[i].key) == key {
			return ms[i].val
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
		if err := s.str(); err != nil {
			return err
		}
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return errScan
		}
		s.i++
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
	for i < len(b) {
		c := b[i]
		switch {
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
		case c < 0x20:
			return errScan
		default:
			i++
		}
	}
	return errScan
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
