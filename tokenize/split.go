package tokenize

import (
	"unicode"
	"unicode/utf8"
)

// The pre-tokenizer: tiktoken splits text into pieces with a regular expression (see
// splitPatterns) before byte-pair encoding each piece. Running that expression through a
// backtracking engine (regexp2, as tiktoken-go does) is most of the cost of counting, so
// split.go implements the two expressions directly, as the backtracking engine resolves
// them: alternatives are tried in order at each position, quantifiers greedily, with the
// same character classes (Go's unicode tables, \s = unicode.IsSpace, case-insensitive
// letters compared through unicode.ToLower, exactly as regexp2 does). TestSplitMatchesRegexp
// compares every piece boundary with regexp2 on generated text.

// Character class bits.
const (
	cU    uint8 = 1 << iota // \p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}: may start or continue a capitalized word
	cW                      // \p{Ll}\p{Lm}\p{Lo}\p{M}: lower-case word characters
	cL                      // \p{L}
	cN                      // \p{N}
	cS                      // \s
	cCRLF                   // \r or \n
)

var asciiClass [utf8.RuneSelf]uint8

func init() {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		asciiClass[r] = classify(r)
	}
}

func classify(r rune) uint8 {
	var c uint8
	switch {
	case unicode.IsLetter(r):
		c = cL
		switch {
		case unicode.Is(unicode.Ll, r):
			c |= cW
		case unicode.Is(unicode.Lu, r), unicode.Is(unicode.Lt, r):
			c |= cU
		default: // Lm, Lo
			c |= cU | cW
		}
	case unicode.Is(unicode.M, r):
		c = cU | cW
	case unicode.IsNumber(r):
		c = cN
	case unicode.IsSpace(r):
		c = cS
		if r == '\r' || r == '\n' {
			c |= cCRLF
		}
	}
	return c
}

// at returns the class and byte size of the rune at s[i]; size 0 past the end.
func at(s string, i int) (uint8, int) {
	if i >= len(s) {
		return 0, 0
	}
	if b := s[i]; b < utf8.RuneSelf {
		return asciiClass[b], 1
	}
	r, z := utf8.DecodeRuneInString(s[i:])
	return classify(r), z
}

// isP is [^\r\n\p{L}\p{N}] (the optional one-character prefix of a word).
func isP(c uint8) bool { return c&(cCRLF|cL|cN) == 0 }

// isQ is [^\s\p{L}\p{N}] (punctuation and symbols).
func isQ(c uint8) bool { return c&(cS|cL|cN) == 0 }

// run returns the end of the run of characters having any of the bits in mask, from i.
func run(s string, i int, mask uint8) int {
	for {
		c, z := at(s, i)
		if z == 0 || c&mask == 0 {
			return i
		}
		i += z
	}
}

// runQ returns the end of the run of isQ characters from i.
func runQ(s string, i int) int {
	for {
		c, z := at(s, i)
		if z == 0 || !isQ(c) {
			return i
		}
		i += z
	}
}

// contraction is (?i:'s|'t|'re|'ve|'m|'ll|'d)? at i: the end of the contraction, or i.
func contraction(s string, i int) int {
	if i >= len(s) || s[i] != '\'' {
		return i
	}
	lower := func(j int) (rune, int) {
		if j >= len(s) {
			return -1, 0
		}
		r, z := utf8.DecodeRuneInString(s[j:])
		return unicode.ToLower(r), z
	}
	r1, z1 := lower(i + 1)
	switch r1 {
	case 's', 't', 'm', 'd':
		return i + 1 + z1
	case 'r', 'v':
		if r2, z2 := lower(i + 1 + z1); r2 == 'e' {
			return i + 1 + z1 + z2
		}
	case 'l':
		if r2, z2 := lower(i + 1 + z1); r2 == 'l' {
			return i + 1 + z1 + z2
		}
	}
	return i
}

// digits is \p{N}{1,3} at i (i holds a digit).
func digits(s string, i int) int {
	for k := 0; k < 3; k++ {
		c, z := at(s, i)
		if z == 0 || c&cN == 0 {
			break
		}
		i += z
	}
	return i
}

// whitespace is the last three alternatives of both expressions at i (i holds \s):
// \s*[\r\n]+ | \s+(?!\S) | \s+ .
func whitespace(s string, i int) int {
	j, lastNL, lastStart := i, -1, -1
	for {
		c, z := at(s, j)
		if z == 0 || c&cS == 0 {
			break
		}
		if c&cCRLF != 0 {
			lastNL = j
		}
		lastStart = j
		j += z
	}
	switch {
	case lastNL >= 0: // \s*[\r\n]+ backtracks to the last line break of the run
		return lastNL + 1
	case j == len(s): // \s+(?!\S) at the end of the text
		return j
	case lastStart > i: // \s+(?!\S) leaves the last space for the next word
		return lastStart
	default: // \s+
		return j
	}
}

// punct is " ?[^\s\p{L}\p{N}]+" followed by a run of \r and \n (and '/' when slash is
// set: o200k_base's [\r\n/]*), at i; -1 if it does not match.
func punct(s string, i int, c0 uint8, slash bool) int {
	j := i
	if s[i] == ' ' {
		c1, z1 := at(s, i+1)
		if z1 == 0 || !isQ(c1) {
			return -1
		}
		j = i + 1
	} else if !isQ(c0) {
		return -1
	}
	j = runQ(s, j)
	for j < len(s) && (s[j] == '\r' || s[j] == '\n' || (slash && s[j] == '/')) {
		j++
	}
	return j
}

// o200kWordTail is [U]*[W]+(?i:contraction)? at j after backtracking: -1 if no match.
// The greedy [U]* gives back characters until [W]+ can start, so the word ends either in
// the run of W characters right after the U run, or just after the last character of the
// U run that is also a W character (Lm, Lo, M).
func o200kWordTail(s string, j int) int {
	lastUW, lastUWSize := -1, 0
	p := j
	for {
		c, z := at(s, p)
		if z == 0 {
			break
		}
		if c&cU == 0 {
			if c&cW != 0 {
				return contraction(s, run(s, p+z, cW))
			}
			break
		}
		if c&cW != 0 {
			lastUW, lastUWSize = p, z
		}
		p += z
	}
	if lastUW < 0 {
		return -1
	}
	return contraction(s, lastUW+lastUWSize)
}

// o200kNext returns the end of the o200k_base piece starting at i, or -1 if no
// alternative matches there.
func o200kNext(s string, i int) int {
	c0, z0 := at(s, i)
	// [P]?[U]*[W]+'x?
	if isP(c0) {
		if e := o200kWordTail(s, i+z0); e >= 0 {
			return e
		}
	}
	if e := o200kWordTail(s, i); e >= 0 {
		return e
	}
	// [P]?[U]+[W]*'x?
	if isP(c0) {
		if c1, z1 := at(s, i+z0); z1 > 0 && c1&cU != 0 {
			return contraction(s, run(s, run(s, i+z0, cU), cW))
		}
	}
	if c0&cU != 0 {
		return contraction(s, run(s, run(s, i, cU), cW))
	}
	if c0&cN != 0 {
		return digits(s, i)
	}
	if e := punct(s, i, c0, true); e >= 0 {
		return e
	}
	if c0&cS != 0 {
		return whitespace(s, i)
	}
	return -1
}

// cl100kNext returns the end of the cl100k_base piece starting at i, or -1.
func cl100kNext(s string, i int) int {
	if e := contraction(s, i); e > i {
		return e
	}
	c0, z0 := at(s, i)
	if isP(c0) {
		if c1, z1 := at(s, i+z0); z1 > 0 && c1&cL != 0 {
			return run(s, i+z0, cL)
		}
	}
	if c0&cL != 0 {
		return run(s, i, cL)
	}
	if c0&cN != 0 {
		return digits(s, i)
	}
	if e := punct(s, i, c0, false); e >= 0 {
		return e
	}
	if c0&cS != 0 {
		return whitespace(s, i)
	}
	return -1
}

// eachPiece calls f with every piece of s (valid UTF-8) in order. Text at which no
// alternative matches is skipped, one character at a time, as the regular expression's
// scan would (neither expression leaves any character unmatched in practice).
func eachPiece(s string, next func(string, int) int, f func(piece string)) {
	for i := 0; i < len(s); {
		e := next(s, i)
		if e <= i {
			_, z := utf8.DecodeRuneInString(s[i:])
			i += z
			continue
		}
		f(s[i:e])
		i = e
	}
}
