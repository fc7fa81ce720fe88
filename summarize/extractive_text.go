package summarize

// Text helpers of the extractive summarizer: whitespace, clipping at a word, sentences.

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

func firstNonEmptyLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if t := oneLine(l); t != "" {
			return t
		}
	}
	return ""
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// oneLine collapses all whitespace runs to single spaces.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// clipChars shortens s to at most n characters (runes), marking the cut with "…".
func clipChars(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// clipWords shortens s to at most n characters, at a word boundary when there is one in
// its second half, marking the cut with "…": a quoted start stays a verbatim prefix.
func clipWords(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)[:n-1]
	if i := strings.LastIndexByte(string(r), ' '); i > len(string(r))/2 {
		return strings.TrimRight(string(r)[:i], " ") + " …"
	}
	return string(r) + "…"
}

// sentences splits a one-line text at ". ", "! ", "? " and "; ".
func sentences(s string) []string {
	var out []string
	start := 0
	for i := 0; i+1 < len(s); i++ {
		if (s[i] == '.' || s[i] == '!' || s[i] == '?' || s[i] == ';') && s[i+1] == ' ' {
			out = append(out, strings.TrimSpace(s[start:i+1]))
			start = i + 2
		}
	}
	if t := strings.TrimSpace(s[min(start, len(s)):]); t != "" {
		out = append(out, t)
	}
	return out
}

func hasAny(s string, words []string) bool {
	low := strings.ToLower(s)
	for _, w := range words {
		if strings.Contains(low, w) {
			return true
		}
	}
	return false
}
