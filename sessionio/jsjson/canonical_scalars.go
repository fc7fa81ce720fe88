package jsjson

// Scalars of the canonical parser: a number is rewritten as JavaScript prints it, a string
// re-escaped as JSON.stringify escapes it. strLen is str without the writing (CanonicalLen's
// hot path): it counts UTF-16 units and builds nothing.

import (
	"encoding/binary"
	"strconv"
)

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
