package jsjson

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// replacement is U+FFFD in UTF-8, written for every invalid byte sequence.
const replacement = "\uFFFD"

// Byte classes used by the string scanners. Everything that is not classPlain needs a
// look before it can be copied.
const (
	classPlain = iota
	classQuote
	classBackslash
	classControl
	classHigh
)

var byteClass = func() (t [256]uint8) {
	for c := range 0x20 {
		t[c] = classControl
	}
	t['"'] = classQuote
	t['\\'] = classBackslash
	for c := 0x80; c < 0x100; c++ {
		t[c] = classHigh
	}
	return t
}()

// shortEscape maps the control characters JSON.stringify writes with a two-character
// escape to the letter after the backslash.
var shortEscape = [0x20]byte{'\b': 'b', '\f': 'f', '\n': 'n', '\r': 'r', '\t': 't'}

// appendUnitEscape appends \uXXXX for a code unit, lowercase hex as JSON.stringify does.
func appendUnitEscape(dst []byte, u rune) []byte {
	return append(dst, '\\', 'u', hexDigits[u>>12&0xF], hexDigits[u>>8&0xF], hexDigits[u>>4&0xF], hexDigits[u&0xF])
}

// appendControl appends the escape JSON.stringify uses for a character below U+0020.
func appendControl(dst []byte, c byte) []byte {
	if e := shortEscape[c]; e != 0 {
		return append(dst, '\\', e)
	}
	return appendUnitEscape(dst, rune(c))
}

// appendJSRune appends one code point (or lone surrogate) as it appears inside a
// JSON.stringify string literal.
func appendJSRune(dst []byte, r rune) []byte {
	switch {
	case r < 0x20:
		return appendControl(dst, byte(r))
	case r == '"' || r == '\\':
		return append(dst, '\\', byte(r))
	case r >= surrHiMin && r <= surrLoMax:
		return appendUnitEscape(dst, r)
	default:
		return utf8.AppendRune(dst, r)
	}
}

// AppendString appends the JSON.stringify form of the WTF-8 string s, quotes included:
// `"` and `\` are backslash-escaped; \b \f \n \r \t use short escapes; other characters
// below U+0020 become \u00xx (lowercase hex); lone surrogates become \udxxx; everything
// else, including / < > & U+007F U+2028 U+2029, is written as raw UTF-8. Invalid byte
// sequences are written as U+FFFD.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		switch byteClass[c] {
		case classPlain:
			i++
			continue
		case classHigh:
			r, size := decode(s, i, true)
			switch {
			case r == invalid:
				dst = append(dst, s[start:i]...)
				dst = append(dst, replacement...)
			case size == 6: // surrogate pair stored as two 3-byte forms
				dst = append(dst, s[start:i]...)
				dst = utf8.AppendRune(dst, r)
			case r >= surrHiMin && r <= surrLoMax:
				dst = append(dst, s[start:i]...)
				dst = appendUnitEscape(dst, r)
			default:
				i += size
				continue // valid UTF-8 stays in the raw run
			}
			i += size
			start = i
		default: // quote, backslash, control
			dst = append(dst, s[start:i]...)
			dst = appendJSRune(dst, rune(c))
			i++
			start = i
		}
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// hex4 decodes the four hex digits of a \u escape. ok is false if they are not hex.
func hex4[T bytesOrString](s T, i int) (r rune, ok bool) {
	if i+4 > len(s) {
		return 0, false
	}
	for k := range 4 {
		c := s[i+k]
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = c - '0'
		case c >= 'a' && c <= 'f':
			v = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(v)
	}
	return r, true
}

// lowSurrogateEscape returns the low surrogate if s[i:] starts with a \uDC00..\uDFFF
// escape.
func lowSurrogateEscape(s []byte, i int) (rune, bool) {
	if i+6 > len(s) || s[i] != '\\' || s[i+1] != 'u' {
		return 0, false
	}
	lo, ok := hex4(s, i+2)
	if !ok || lo < surrLoMin || lo > surrLoMax {
		return 0, false
	}
	return lo, true
}

// simpleEscapes maps the character after a backslash to what it stands for, for the
// escapes other than \u.
var simpleEscapes = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// errUnterminated is wrapped into a SyntaxError when a string literal has no closing quote.
var errUnterminated = errors.New("unterminated string")

// Unquote decodes one JSON string literal (quotes included, nothing around it) to the
// WTF-8 form of the JavaScript string JSON.parse would return: escaped surrogate pairs
// are combined, lone surrogate escapes are kept (as 3-byte forms), raw bytes are read as
// Node reads a UTF-8 file (invalid sequences, raw surrogate bytes included, become
// U+FFFD). Raw control characters and malformed escapes are errors, as in JSON.parse.
func Unquote(lit []byte) (string, error) {
	if len(lit) < 2 || lit[0] != '"' {
		return "", &SyntaxError{Offset: 0, Msg: "string literal must start with '\"'"}
	}
	// Fast path: nothing to decode, the bytes are the string.
	i := 1
	for i < len(lit) {
		c := lit[i]
		if cl := byteClass[c]; cl == classPlain {
			i++
		} else if cl == classHigh {
			r, size := decode(lit, i, false)
			if r == invalid {
				break
			}
			i += size
		} else {
			break
		}
	}
	if i == len(lit)-1 && lit[i] == '"' {
		return string(lit[1:i]), nil
	}
	out := make([]byte, 0, len(lit))
	out = append(out, lit[1:i]...)
	for i < len(lit) {
		c := lit[i]
		switch byteClass[c] {
		case classPlain:
			out = append(out, c)
			i++
		case classHigh:
			r, size := decode(lit, i, false)
			if r == invalid {
				out = append(out, replacement...)
			} else {
				out = append(out, lit[i:i+size]...)
			}
			i += size
		case classControl:
			return "", &SyntaxError{Offset: i, Msg: fmt.Sprintf("control character %#02x in string literal", c)}
		case classQuote:
			if i != len(lit)-1 {
				return "", &SyntaxError{Offset: i + 1, Msg: "unexpected data after string literal"}
			}
			return string(out), nil
		case classBackslash:
			if i+1 >= len(lit) {
				return "", &SyntaxError{Offset: i, Msg: errUnterminated.Error()}
			}
			e := lit[i+1]
			if e != 'u' {
				v := simpleEscapes[e]
				if v == 0 {
					return "", &SyntaxError{Offset: i, Msg: fmt.Sprintf("invalid escape '\\%c'", e)}
				}
				out = append(out, v)
				i += 2
				continue
			}
			r, ok := hex4(lit, i+2)
			if !ok {
				return "", &SyntaxError{Offset: i, Msg: "invalid \\u escape"}
			}
			i += 6
			if r >= surrHiMin && r <= surrHiMax {
				if lo, ok := lowSurrogateEscape(lit, i); ok {
					r = 0x10000 + (r-surrHiMin)<<10 + (lo - surrLoMin)
					i += 6
				}
			}
			out = appendWTF8(out, r)
		}
	}
	return "", &SyntaxError{Offset: len(lit), Msg: errUnterminated.Error()}
}

// appendWTF8 appends r in generalized UTF-8, which unlike utf8.AppendRune keeps
// surrogates as their own 3-byte form instead of replacing them with U+FFFD.
func appendWTF8(dst []byte, r rune) []byte {
	if r >= surrHiMin && r <= surrLoMax {
		return append(dst, 0xED, byte(0x80|(r>>6)&0x3F), byte(0x80|r&0x3F))
	}
	return utf8.AppendRune(dst, r)
}
