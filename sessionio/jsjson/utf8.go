package jsjson

import (
	"encoding/binary"
	"math/bits"
)

const (
	surrHiMin = 0xD800
	surrHiMax = 0xDBFF
	surrLoMin = 0xDC00
	surrLoMax = 0xDFFF
)

// bytesOrString lets the decoder run directly over raw input ([]byte) and over Go
// strings without copying either.
type bytesOrString interface{ ~string | ~[]byte }

// invalid is what decode returns for an invalid byte sequence. It is distinct from
// utf8.RuneError so that a genuine U+FFFD in the input stays raw bytes.
const invalid rune = -1

// decode reads one character starting at s[i], where s[i] >= 0x80.
//
// It follows the WHATWG UTF-8 decoder: an invalid sequence yields invalid (read as
// U+FFFD) for its maximal subpart (a valid prefix of some sequence, or one byte), so the number of U+FFFD
// characters equals what Node produces when it decodes the same bytes.
//
// With wtf set, the 3-byte forms of surrogates (ED A0..BF xx) are accepted and returned as
// the surrogate value, and a high-surrogate form immediately followed by a low-surrogate
// form is returned as the supplementary code point they denote (size 6).
func decode[T bytesOrString](s T, i int, wtf bool) (r rune, size int) {
	b0 := s[i]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case b0 >= 0xC2 && b0 <= 0xDF:
		need = 1
	case b0 == 0xE0:
		need, lo = 2, 0xA0
	case b0 == 0xED:
		need = 2
		if !wtf {
			hi = 0x9F
		}
	case b0 >= 0xE1 && b0 <= 0xEF:
		need = 2
	case b0 == 0xF0:
		need, lo = 3, 0x90
	case b0 >= 0xF1 && b0 <= 0xF3:
		need = 3
	case b0 == 0xF4:
		need, hi = 3, 0x8F
	default:
		return invalid, 1
	}
	n := len(s)
	if i+1 >= n || s[i+1] < lo || s[i+1] > hi {
		return invalid, 1
	}
	for k := 2; k <= need; k++ {
		if i+k >= n || s[i+k] < 0x80 || s[i+k] > 0xBF {
			return invalid, k
		}
	}
	switch need {
	case 1:
		return rune(b0&0x1F)<<6 | rune(s[i+1]&0x3F), 2
	case 2:
		r = rune(b0&0x0F)<<12 | rune(s[i+1]&0x3F)<<6 | rune(s[i+2]&0x3F)
		if wtf && r >= surrHiMin && r <= surrHiMax && i+5 < n && s[i+3] == 0xED &&
			s[i+4] >= 0xB0 && s[i+4] <= 0xBF && s[i+5] >= 0x80 && s[i+5] <= 0xBF {
			lo := rune(0xD)<<12 | rune(s[i+4]&0x3F)<<6 | rune(s[i+5]&0x3F)
			return 0x10000 + (r-surrHiMin)<<10 + (lo - surrLoMin), 6
		}
		return r, 3
	default:
		return rune(b0&0x07)<<18 | rune(s[i+1]&0x3F)<<12 | rune(s[i+2]&0x3F)<<6 | rune(s[i+3]&0x3F), 4
	}
}

// utf16Units is the number of UTF-16 code units a decoded rune takes.
func utf16Units(r rune) int {
	if r >= 0x10000 {
		return 2
	}
	return 1
}

// UTF16Len returns the JavaScript length (UTF-16 code units) of the WTF-8 string s:
// a supplementary character counts 2, a lone surrogate 1, and each maximal invalid byte
// sequence 1 (it reads as U+FFFD).
func UTF16Len(s string) int {
	n := 0
	for i := 0; i < len(s); {
		// ASCII runs dominate real sessions; count them 8 bytes at a time.
		for i+8 <= len(s) && asciiWord(s[i:i+8]) {
			i += 8
			n += 8
		}
		if i >= len(s) {
			break
		}
		if s[i] < 0x80 {
			i++
			n++
			continue
		}
		r, size := decode(s, i, true)
		i += size
		n += utf16Units(r)
	}
	return n
}

// asciiWord reports whether all 8 bytes of s are ASCII.
func asciiWord(s string) bool {
	w := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
	return w&0x8080808080808080 == 0
}

// validUTF16Len counts UTF-16 units of text known to be valid UTF-8 (Canonical's
// output): every byte that is not a continuation byte starts a character, and 4-byte
// leads start a surrogate pair. Eight bytes are classified at a time.
func validUTF16Len(b []byte) int {
	const hi = 0x8080808080808080
	n := 0
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		if x&hi == 0 {
			n += 8
			continue
		}
		// Per byte, bit 7 of x<<k is bit 7-k of the byte itself.
		cont := x &^ (x << 1) & hi                       // 10xxxxxx
		lead4 := x & (x << 1) & (x << 2) & (x << 3) & hi // 1111xxxx
		n += 8 - bits.OnesCount64(cont) + bits.OnesCount64(lead4)
	}
	for _, c := range b[i:] {
		if c < 0x80 || c >= 0xC0 {
			n++
			if c >= 0xF0 {
				n++
			}
		}
	}
	return n
}

// plainWord reports whether none of the 8 bytes in x needs attention inside a string
// literal (control, '"', '\\' or non-ASCII). The zero-byte tests are exact for "any".
func plainWord(x uint64) bool {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	ctl := (x - lo*0x20) &^ x & hi // some byte < 0x20 (or >= 0x80)
	q := x ^ (lo * '"')
	quote := (q - lo) &^ q & hi
	bs := x ^ (lo * '\\')
	bslash := (bs - lo) &^ bs & hi
	return (ctl | quote | bslash | x&hi) == 0
}

// unitReader yields the UTF-16 code units of a WTF-8 string one at a time.
type unitReader struct {
	s       string
	i       int
	pending rune // low surrogate still to be returned, or 0
}

func (u *unitReader) next() (rune, bool) {
	if u.pending != 0 {
		c := u.pending
		u.pending = 0
		return c, true
	}
	if u.i >= len(u.s) {
		return 0, false
	}
	if c := u.s[u.i]; c < 0x80 {
		u.i++
		return rune(c), true
	}
	r, size := decode(u.s, u.i, true)
	u.i += size
	if r == invalid {
		return 0xFFFD, true
	}
	if r >= 0x10000 {
		r -= 0x10000
		u.pending = surrLoMin + r&0x3FF
		return surrHiMin + r>>10, true
	}
	return r, true
}

// CompareUTF16 compares a and b the way JavaScript compares strings (and the way
// Array.prototype.sort orders them without a comparator): by UTF-16 code units. It
// returns -1, 0 or +1. This differs from byte order when a supplementary character
// (U+10000 and up, UTF-16 0xD800..0xDBFF) meets one in U+E000..U+FFFF.
func CompareUTF16(a, b string) int {
	// Skip the common byte prefix, then back up to a character boundary: every byte
	// that is not a continuation byte starts a decoding step, so decoding from there
	// sees exactly what decoding from the start would.
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == len(a) && i == len(b) {
		return 0
	}
	for i > 0 && !(boundary(a, i) && boundary(b, i)) {
		i--
	}
	ra := unitReader{s: a, i: i}
	rb := unitReader{s: b, i: i}
	for {
		ca, oka := ra.next()
		cb, okb := rb.next()
		switch {
		case !oka && !okb:
			return 0
		case !oka:
			return -1
		case !okb:
			return 1
		case ca < cb:
			return -1
		case ca > cb:
			return 1
		}
	}
}

// boundary reports whether a decoding step of s can be sure to start at i: the end of
// the string or any byte that is not a continuation byte.
func boundary(s string, i int) bool {
	return i >= len(s) || s[i]&0xC0 != 0x80
}
