package experiment

// Probe keys: the strings a fact must appear as in the context. A key is normalized and
// clipped at a word so that a summary quoting the start of a long line still matches; the
// classification of commands, error lines, rules and numbers lives here.

import (
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// cdPrefix is a leading "cd DIR &&" (or "cd DIR;"), which says where a command ran rather
// than what it was: a summary that writes "npm run check" has kept the command.
var cdPrefix = regexp.MustCompile(`^cd\s+("[^"]*"|'[^']*'|\S+)\s*(&&|;)\s*`)

// commandKey is a command's key: its first line (continuation lines joined), without a
// leading cd, clipped.
func commandKey(cmd string) probeKey {
	cmd = strings.ReplaceAll(stripANSI(cmd), "\\\n", " ")
	line := strings.TrimSpace(firstLine(strings.TrimSpace(cmd)))
	for {
		loc := cdPrefix.FindStringIndex(line)
		if loc == nil || loc[1] == len(line) {
			break
		}
		line = line[loc[1]:]
	}
	return clipKey(line, commandKeyRunes)
}

func addCommand(set *probeSet, cmd, output string, failed bool) {
	key := commandKey(cmd)
	if !failed {
		set.add(ProbeCommand, key)
		return
	}
	if e := errorLine(output); e != "" {
		set.add(ProbeFailedCommand, key, clipKey(e, errorKeyRunes))
		return
	}
	set.add(ProbeFailedCommand, key)
}

// exitLine matches the line Pi's bash tool appends to the output of a command that did not
// exit 0 ("Command exited with code 2", "Command aborted", "Command timed out after 30
// seconds").
var exitLine = regexp.MustCompile(`^Command (exited with code (\d+)|aborted|timed out\b.*)$`)

// bashFailed reports whether a bash tool result's text ends with Pi's line for a command
// that did not exit 0.
func bashFailed(out string) bool {
	last := lastNonEmptyLine(out)
	if m := exitLine.FindStringSubmatch(last); m != nil {
		return m[2] != "0"
	}
	return false
}

// errorWords mark a line of a failed command's output as its error.
var errorWords = regexp.MustCompile(`(?i)(\berr(or)?s?\b|\berr!|\bfail(ed|ure|ures|s)?\b|\bfatal\b|\bpanic\b|exception|traceback|\bcannot\b|can't|could not|couldn't|not found|no such|denied|refused|undefined|\binvalid\b|unexpected|\bmissing\b|[×✗✘])`)

// errorLine is the first line of a failed command's output that says what went wrong: the
// first line with an error word, else the last non-empty line; never Pi's own "Command
// exited with code N" line. ANSI escapes are removed and whitespace collapsed; "" when the
// output says nothing more than the exit status.
func errorLine(output string) string {
	lines := strings.Split(stripANSI(output), "\n")
	var last string
	for _, l := range lines {
		l = oneLine(l)
		if l == "" || exitLine.MatchString(l) {
			continue
		}
		if errorWords.MatchString(l) {
			return l
		}
		last = l
	}
	return last
}

// constraintMarkers mark a user sentence as a rule the agent must keep.
var constraintMarkers = regexp.MustCompile(`(?i)\b(always|never|don'?t|do not|must|mustn'?t|should not|shouldn'?t|avoid|make sure|ensure|only|prefer|instead of|no more)\b`)

// isConstraintSentence: a sentence with a constraint marker that is not a question and has
// at least three words.
func isConstraintSentence(s string) bool {
	s = strings.TrimSpace(s)
	return words(s) >= 3 && !strings.HasSuffix(s, "?") && constraintMarkers.MatchString(s)
}

// numberPattern finds numbers together with what they are, in one pass (Go's regexp
// takes the first alternative that matches at a position, so the more specific come
// first). Each match is a key as it stands in the text.
var numberPattern = regexp.MustCompile(strings.Join([]string{
	`[A-Za-z@][\w./-]*@v?\d+\.\d+\.\d+[\w.+-]*`,                               // name@1.2.3
	`\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`,        // uuid
	`\bv?(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)(?:-[0-9A-Za-z.]+)?\b`, // 1.2.3, v0.14.2-rc.1 (not 01.27.21)
	`(?i:\b(?:localhost|127\.0\.0\.1|0\.0\.0\.0|\[::1?\]):\d{2,5}\b)`,         // localhost:8080
	`(?i:\bport\s+\d{2,5}\b)`,                                                 // port 5432
	`\b\d{1,5}\s+(?:errors?|warnings?|tests?|failures?|failed|passed|passing|skipped|files?|packages?|problems?|issues?|vulnerabilit(?:y|ies)|commits?|retries|workers?)\b`, // 49 errors
	`(?i:\b(?:HTTP/\d(?:\.\d)?|status(?: code)?:?)\s+[1-5]\d\d\b)`, // HTTP/1.1 503
	`\b[A-Z]{1,4}\d{3,5}\b`, // TS2353, E0308
	`\bE[A-Z]{3,}\b`,        // ENOENT, ECONNREFUSED
	`#\d{2,5}\b`,            // #1234 (not a colour #283228)
	`\b[0-9a-f]{7,40}\b`,    // a commit hash (checked below)
}, "|"))

// numberWindow is how much of the start and of the end of a long text numbers are taken
// from.
const numberWindow = 4096

// maxNumberMatches bounds the matches looked at per message (duplicates and hex words
// that are not ids are skipped, so it is larger than numbersPerMessage).
const maxNumberMatches = 8 * numbersPerMessage

// numberKeys are the first numbersPerMessage distinct number keys of a text.
func numberKeys(text string) []string {
	if text == "" {
		return nil
	}
	// A long output says its numbers at its start (versions, counts) and its end (the
	// summary line, the exit): the middle is not read.
	if len(text) > 2*numberWindow {
		head, tail := text[:numberWindow], text[len(text)-numberWindow:]
		text = strings.ToValidUTF8(head, "") + "\n" + strings.ToValidUTF8(tail, "")
	}
	text = oneLine(stripANSI(text))
	var keys []string
	for _, loc := range numberPattern.FindAllStringIndex(text, maxNumberMatches) {
		k := text[loc[0]:loc[1]]
		// A hex word is an id only when it mixes digits and letters (not "deadbeef" or
		// "1234567").
		if isHex(k) && (!strings.ContainsAny(k, "0123456789") || !strings.ContainsAny(k, "abcdef")) {
			continue
		}
		if utf8.RuneCountInString(k) < minKeyRunes || slices.Contains(keys, k) {
			continue
		}
		if keys = append(keys, k); len(keys) == numbersPerMessage {
			break
		}
	}
	return keys
}

func isHex(s string) bool {
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func words(s string) int { return len(strings.Fields(s)) }

// clipKey normalizes s and clips it to at most n runes at a word boundary (inside a word
// only when its first word is longer than n).
func clipKey(s string, n int) probeKey {
	s = normText(s)
	if utf8.RuneCountInString(s) <= n {
		return probeKey{s: s}
	}
	r := []rune(s)[:n+1]
	if r[n] == ' ' {
		return probeKey{s: strings.TrimRight(string(r[:n]), " ")}
	}
	cut := strings.LastIndexByte(string(r[:n]), ' ')
	if cut <= 0 {
		return probeKey{s: string(r[:n]), open: true}
	}
	return probeKey{s: strings.TrimRight(string(r[:n])[:cut], " ")}
}

// splitSentences splits a user message into sentences: at line breaks, and after ".",
// "!", "?" or ";" followed by a space. Each sentence is normalized.
func splitSentences(t string) []string {
	var out []string
	for _, line := range strings.Split(stripANSI(t), "\n") {
		line = oneLine(line)
		start := 0
		for i := 0; i+1 < len(line); i++ {
			if (line[i] == '.' || line[i] == '!' || line[i] == '?' || line[i] == ';') && line[i+1] == ' ' {
				if s := strings.TrimSpace(line[start : i+1]); s != "" {
					out = append(out, s)
				}
				start = i + 2
			}
		}
		if s := strings.TrimSpace(line[min(start, len(line)):]); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func lastNonEmptyLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n \t"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if t := strings.TrimSpace(lines[i]); t != "" {
			return t
		}
	}
	return ""
}
