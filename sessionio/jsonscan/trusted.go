package jsonscan

import (
	"bytes"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// The functions of this file walk JSON that ScanObject has already validated, so they only look
// for structure: strings are skipped with IndexByte, containers by depth.

// skipTrusted returns the index just past the value that starts at b[i].
func skipTrusted(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	default: // number or literal
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

// skipString returns the index just past the string literal that starts at b[i].
func skipString(b []byte, i int) int {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return len(b)
		}
		j += k
		// The quote is escaped if an odd number of backslashes precede it.
		n := 0
		for p := j - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
		j++
	}
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// TrustedMembers lists the members of a validated object.
func TrustedMembers(b []byte, dst []Member) []Member {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return dst
	}
	i = skipWS(b, i+1)
	for i < len(b) && b[i] == '"' {
		ke := skipString(b, i)
		key := b[i+1 : ke-1]
		i = skipWS(b, ke)
		i = skipWS(b, i+1) // ':'
		ve := skipTrusted(b, i)
		dst = append(dst, Member{Key: key, Val: b[i:ve]})
		i = skipWS(b, ve)
		if i < len(b) && b[i] == ',' {
			i = skipWS(b, i+1)
		}
	}
	return dst
}

// TrustedElems lists the elements of a validated array.
func TrustedElems(b []byte, dst [][]byte) [][]byte {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '[' {
		return dst
	}
	i = skipWS(b, i+1)
	for i < len(b) && b[i] != ']' {
		ve := skipTrusted(b, i)
		dst = append(dst, b[i:ve])
		i = skipWS(b, ve)
		if i < len(b) && b[i] == ',' {
			i = skipWS(b, i+1)
		}
	}
	return dst
}

// Unquote decodes a validated JSON string literal exactly as encoding/json does: escapes
// decoded, surrogate pairs combined, lone surrogates and invalid UTF-8 bytes replaced by
// U+FFFD (each of which has the UTF-16 length of what it replaces, so chars/4 estimates
// match Pi's).
func Unquote(lit []byte) string {
	s := lit[1 : len(lit)-1]
	if bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s) {
		return string(s)
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		// A run up to the next escape is copied at once when it is valid UTF-8 (a backslash is
		// never part of a multi-byte sequence, so runs split no character).
		j := bytes.IndexByte(s[i:], '\\')
		if j < 0 {
			j = len(s) - i
		}
		if run := s[i : i+j]; utf8.Valid(run) {
			out = append(out, run...)
		} else {
			out = appendValidUTF8(out, run)
		}
		i += j
		if i >= len(s) {
			break
		}
		switch s[i+1] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := hex4(s[i+2 : i+6])
			i += 6
			if utf16.IsSurrogate(r) {
				if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
					if r2 := hex4(s[i+2 : i+6]); utf16.DecodeRune(r, r2) != utf8.RuneError {
						out = utf8.AppendRune(out, utf16.DecodeRune(r, r2))
						i += 6
						continue
					}
				}
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
			continue
		default: // " \ /
			out = append(out, s[i+1])
		}
		i += 2
	}
	return unsafe.String(unsafe.SliceData(out), len(out)) // out is never written again
}

// appendValidUTF8 appends b with each invalid byte replaced by U+FFFD.
func appendValidUTF8(out, b []byte) []byte {
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			out = append(out, b[i])
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, b[i:i+size]...)
		}
		i += size
	}
	return out
}

func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		default:
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}

// String decodes a validated value that is a string ("" and false for other types).
func String(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	return Unquote(raw), true
}

// Number decodes a validated JSON number literal; false for other values and for numbers
// a float64 cannot hold (encoding/json's range error).
func Number(raw []byte) (float64, bool) {
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

// Lookup is Get for keys written with escapes too: each key is compared as JSON.parse
// reads it ("\u0063ontent" is "content"), and the last member of that name wins.
func Lookup(ms []Member, key string) []byte {
	for i := len(ms) - 1; i >= 0; i-- {
		k := ms[i].Key
		if bytes.IndexByte(k, '\\') >= 0 {
			if Key(k) == key {
				return ms[i].Val
			}
		} else if string(k) == key {
			return ms[i].Val
		}
	}
	return nil
}

// Key returns a member's key, decoding escapes if it has any.
func Key(k []byte) string {
	if bytes.IndexByte(k, '\\') < 0 {
		return string(k)
	}
	lit := make([]byte, 0, len(k)+2)
	lit = append(append(append(lit, '"'), k...), '"')
	return Unquote(lit)
}
