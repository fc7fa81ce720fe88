// Package visible writes text that someone else wrote so that a person reads what is
// there. Much of what compactor's operator commands and console print comes from records
// a store's key may write (a dead letter's reason, path and error, an event, a hook
// report, a worker's beat, a queued job), and those records can carry terminal escape
// sequences (ESC [ ... to recolour or clear, OSC 8 links, a carriage return that
// overwrites the line), or Unicode formatting characters that reorder or hide text (the
// bidirectional overrides and isolates, zero-width characters). Printed raw, they act on
// the operator's terminal or mislead their eyes.
//
// Every such character is written as an escape in Go's notation, so that it shows and
// does nothing: control characters as \r, \n, \t, \a, \b, \f, \v or \xHH (C0 and DEL),
// \u0080 to \u009f (C1), formatting characters (Unicode's Cf: bidi controls, zero-width
// characters, the byte-order mark, tags) and the line and paragraph separators as \uXXXX
// or \UXXXXXXXX, and a byte that is not UTF-8 as \xHH. Everything else (letters of any
// script, punctuation, emoji without joiners, the backslash) is kept as it is.
package visible

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Hidden reports whether r is written as an escape: a control character, a formatting
// character (Cf) or a line or paragraph separator.
func Hidden(r rune) bool {
	switch {
	case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
		return true
	case r < 0xad:
		return false
	}
	return r == 0x2028 || r == 0x2029 || unicode.Is(unicode.Cf, r)
}

// Line is s for one line of a terminal or a table's cell: every hidden character
// escaped, tab and newline included.
func Line(s string) string { return escape(s, false) }

// Text is s for a block of lines: tab and newline kept, every other hidden character
// escaped (a carriage return included: it would overwrite the line).
func Text(s string) string { return escape(s, true) }

// Clean reports whether s has nothing to escape for Line.
func Clean(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return cleanRunes(s[i:], false)
		}
	}
	return true
}

func cleanRunes(s string, block bool) bool {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n <= 1 {
				return false
			}
		}
		if Hidden(r) && !(block && (r == '\t' || r == '\n')) {
			return false
		}
	}
	return true
}

func escape(s string, block bool) string {
	if cleanRunes(s, block) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case block && (r == '\t' || r == '\n'):
			b.WriteRune(r)
		case Hidden(r):
			writeEscape(&b, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func writeEscape(b *strings.Builder, r rune) {
	switch r {
	case '\a':
		b.WriteString(`\a`)
	case '\b':
		b.WriteString(`\b`)
	case '\f':
		b.WriteString(`\f`)
	case '\n':
		b.WriteString(`\n`)
	case '\r':
		b.WriteString(`\r`)
	case '\t':
		b.WriteString(`\t`)
	case '\v':
		b.WriteString(`\v`)
	default:
		switch {
		case r < 0x80:
			fmt.Fprintf(b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			fmt.Fprintf(b, `\U%08x`, r)
		}
	}
}

// HTML escapes the hidden characters of an HTML document rendered by html/template (whose
// markup has none): tab, newline and carriage return are kept (HTML's white space, which
// a browser never acts on), every other one is written as its escape, in text and in
// attributes alike. The escapes are plain ASCII letters, digits and backslashes: inert
// in every context of a page. A document without any is returned as it is.
func HTML(doc []byte) []byte {
	return escapeDoc(doc, func(b *strings.Builder, r rune, bad byte) {
		if r == utf8.RuneError {
			fmt.Fprintf(b, `\x%02x`, bad)
			return
		}
		writeEscape(b, r)
	})
}

// JSON escapes the hidden characters of a JSON document (encoding/json's output: its
// strings hold no raw C0 control, its structure only spaces, tabs and newlines) as JSON
// escapes, \u202e, \u009b, \u007f, a surrogate pair beyond the BMP: the same strings to a
// JSON reader, nothing a terminal acts on. A byte that is not UTF-8 (which only a raw
// message passed through could hold) becomes \ufffd, as encoding/json writes it.
func JSON(doc []byte) []byte {
	return escapeDoc(doc, func(b *strings.Builder, r rune, _ byte) {
		switch {
		case r == utf8.RuneError:
			b.WriteString(`\ufffd`)
		case r > 0xffff:
			r -= 0x10000
			fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10)&0x3ff, 0xdc00+r&0x3ff)
		default:
			fmt.Fprintf(b, `\u%04x`, r)
		}
	})
}

// escapeDoc copies doc with each hidden character but tab, newline and carriage return,
// and each byte that is not UTF-8 (r: utf8.RuneError, bad: the byte), written by esc. A
// document without any is returned as it is.
func escapeDoc(doc []byte, esc func(b *strings.Builder, r rune, bad byte)) []byte {
	i := 0
	for ; i < len(doc); i++ {
		if c := doc[i]; (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c >= 0x7f {
			break
		}
	}
	if i == len(doc) || cleanDoc(doc[i:]) {
		return doc
	}
	var b strings.Builder
	b.Grow(len(doc) + 64)
	b.Write(doc[:i])
	for i < len(doc) {
		r, n := utf8.DecodeRune(doc[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			esc(&b, utf8.RuneError, doc[i])
		case r == '\t' || r == '\n' || r == '\r' || !Hidden(r):
			b.Write(doc[i : i+n])
		default:
			esc(&b, r, 0)
		}
		i += n
	}
	return []byte(b.String())
}

func cleanDoc(doc []byte) bool {
	for i := 0; i < len(doc); {
		r, n := utf8.DecodeRune(doc[i:])
		if (r == utf8.RuneError && n <= 1) || (Hidden(r) && r != '\t' && r != '\n' && r != '\r') {
			return false
		}
		i += n
	}
	return true
}
