package experiment

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
)

// Probe kinds: what a compacted context should still know about a summarized span.
const (
	ProbeFileRead      = "fileRead"      // a path the agent read (and did not modify) in the span
	ProbeFileModified  = "fileModified"  // a path it wrote or edited
	ProbeCommand       = "command"       // a command that ran without failing (or whose outcome is not in the span)
	ProbeFailedCommand = "failedCommand" // a command that failed: the command and its first error line
	ProbeRequest       = "request"       // the first sentence of a user message
	ProbeConstraint    = "constraint"    // a user sentence that states a rule ("always", "never", "don't", "must", ...)
	ProbeNumber        = "number"        // a version, port, count with its unit, error code or id from the user or a tool result
)

// ProbeKinds lists the kinds in report order.
func ProbeKinds() []string {
	return []string{ProbeFileRead, ProbeFileModified, ProbeCommand, ProbeFailedCommand, ProbeRequest, ProbeConstraint, ProbeNumber}
}

// Key lengths. A key is clipped at a word boundary so that a summary that quotes the
// start of a long line still matches, and is dropped when it is so short that it would
// match unrelated text.
const (
	commandKeyRunes    = 80
	errorKeyRunes      = 80
	requestKeyRunes    = 80
	constraintKeyRunes = 100
	minKeyRunes        = 4
	// numbersPerMessage caps the number probes one message gives, so that one long
	// listing (a dependency tree, a log) does not outweigh the rest of the span.
	numbersPerMessage = 5
)

// probeKey is one string the context must contain. open marks a key clipped inside a word:
// its end is not a word boundary.
type probeKey struct {
	s    string
	open bool
}

// probe is one fact of a span: recalled when the context contains every key.
type probe struct {
	kind string
	keys []probeKey
}

func (p probe) id() string {
	var b strings.Builder
	b.WriteString(p.kind)
	for _, k := range p.keys {
		b.WriteByte(0)
		b.WriteString(k.s)
	}
	return b.String()
}

// probeSet collects a span's probes without duplicates.
type probeSet struct {
	list []probe
	seen map[string]bool
}

func (s *probeSet) add(kind string, keys ...probeKey) {
	for _, k := range keys {
		if utf8.RuneCountInString(k.s) < minKeyRunes {
			return
		}
	}
	p := probe{kind: kind, keys: keys}
	id := p.id()
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	if s.seen[id] {
		return
	}
	s.seen[id] = true
	s.list = append(s.list, p)
}

// deriveProbes derives the probes of a summarized span deterministically (same messages,
// same probes, same order):
//
//   - every path read or modified through the read, write and edit tools (a path both read
//     and modified is a modified file, as in Pi's file lists);
//   - every bash command (tool call or user `!cmd`), keyed by its first line; a failure
//     (an error result, a non-zero exit, a cancelled or timed-out run) is a failedCommand
//     probe whose keys are the command and its first error line;
//   - the first sentence of every user message (a request), and every user sentence that
//     states a constraint and is not a question;
//   - numbers with what they measure, from user messages and from tool results other than
//     file contents: versions, ports, counts with their unit, error codes, ids (commit
//     hashes, uuids, issue numbers); at most numbersPerMessage per message, from the first
//     and last numberWindow bytes of a long one. Durations and sizes are left out: they
//     change with every run.
//
// Tool calls whose result is not in the span count as commands that did not fail.
//
// numbers memoizes the number keys of each message (nil: none); a session's messages are
// probed once per policy, setting and summarizer.
func deriveProbes(msgs []*sessionio.Message, numbers map[*sessionio.Message][]string) []probe {
	var set probeSet
	addNumbers := func(m *sessionio.Message, text string) {
		keys, ok := numbers[m]
		if !ok {
			keys = numberKeys(text)
			if numbers != nil {
				numbers[m] = keys
			}
		}
		for _, k := range keys {
			set.add(ProbeNumber, probeKey{s: k})
		}
	}
	results := map[string]*sessionio.Message{}
	for _, m := range msgs {
		if m != nil && m.Role == sessionio.RoleToolResult {
			results[m.ToolCallID] = m
		}
	}
	ops := sessionio.NewFileOps()
	for _, m := range msgs {
		if m != nil {
			ops.AddFromMessage(m)
		}
	}
	read, modified := ops.Lists()
	for _, p := range modified {
		set.add(ProbeFileModified, probeKey{s: p})
	}
	for _, p := range read {
		set.add(ProbeFileRead, probeKey{s: p})
	}
	for _, m := range msgs {
		if m == nil {
			continue
		}
		switch m.Role {
		case sessionio.RoleUser:
			t := summarize.MessageText(m.Content)
			if t == "" {
				continue
			}
			ss := splitSentences(t)
			if len(ss) > 0 && words(ss[0]) >= 3 {
				set.add(ProbeRequest, clipKey(ss[0], requestKeyRunes))
			}
			for _, s := range ss {
				if isConstraintSentence(s) {
					set.add(ProbeConstraint, clipKey(s, constraintKeyRunes))
				}
			}
			addNumbers(m, t)
		case sessionio.RoleBashExecution:
			if m.ExcludeFromContext {
				continue
			}
			failed := m.Cancelled || (m.ExitCode != nil && *m.ExitCode != 0)
			addCommand(&set, m.Command, m.Output, failed)
			addNumbers(m, m.Output)
		case sessionio.RoleAssistant:
			for _, b := range m.Content.Blocks {
				if b.Type != sessionio.BlockToolCall || b.Name != "bash" {
					continue
				}
				cmd := summarize.ToolArgument(b.Arguments, "command")
				if cmd == "" {
					continue
				}
				r := results[b.ID]
				out, failed := "", false
				if r != nil {
					out = summarize.MessageText(r.Content)
					failed = r.IsError || bashFailed(out)
				}
				addCommand(&set, cmd, out, failed)
			}
		case sessionio.RoleToolResult:
			switch m.ToolName {
			case "read", "write", "edit":
				// File contents and write confirmations: their numbers are code, not
				// measurements.
			default:
				addNumbers(m, summarize.MessageText(m.Content))
			}
		}
	}
	return set.list
}

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

// Recall counts probes and how many the context still held.
type Recall struct {
	Probes int `json:"probes"`
	Found  int `json:"found"`
}

func (r *Recall) add(o Recall) { r.Probes += o.Probes; r.Found += o.Found }

// Percent is Found/Probes in percent, rounded down to a tenth (0 with no probes).
func (r Recall) Percent() float64 {
	if r.Probes == 0 {
		return 0
	}
	return float64(r.Found*1000/r.Probes) / 10
}

// ProbeRecall is the recall of each probe kind.
type ProbeRecall struct {
	FileRead      Recall `json:"fileRead"`
	FileModified  Recall `json:"fileModified"`
	Command       Recall `json:"command"`
	FailedCommand Recall `json:"failedCommand"`
	Request       Recall `json:"request"`
	Constraint    Recall `json:"constraint"`
	Number        Recall `json:"number"`
}

// Kind returns the counter of one kind (nil for an unknown kind).
func (p *ProbeRecall) Kind(kind string) *Recall {
	switch kind {
	case ProbeFileRead:
		return &p.FileRead
	case ProbeFileModified:
		return &p.FileModified
	case ProbeCommand:
		return &p.Command
	case ProbeFailedCommand:
		return &p.FailedCommand
	case ProbeRequest:
		return &p.Request
	case ProbeConstraint:
		return &p.Constraint
	case ProbeNumber:
		return &p.Number
	}
	return nil
}

func (p *ProbeRecall) add(o ProbeRecall) {
	for _, k := range ProbeKinds() {
		p.Kind(k).add(*o.Kind(k))
	}
}

// Total sums every kind.
func (p ProbeRecall) Total() Recall {
	var t Recall
	for _, k := range ProbeKinds() {
		t.add(*p.Kind(k))
	}
	return t
}

// Facts sums every kind but the file lists (which Pi's summary format carries whole
// unless they were capped): what the summary text itself must keep.
func (p ProbeRecall) Facts() Recall {
	var t Recall
	for _, k := range ProbeKinds() {
		if k != ProbeFileRead && k != ProbeFileModified {
			t.add(*p.Kind(k))
		}
	}
	return t
}

// recall checks the probes against a context text (normalized with normText).
func recall(probes []probe, ctxText string) ProbeRecall {
	var out ProbeRecall
	for _, p := range probes {
		r := out.Kind(p.kind)
		r.Probes++
		ok := true
		for _, k := range p.keys {
			if !containsKey(ctxText, k) {
				ok = false
				break
			}
		}
		if ok {
			r.Found++
		}
	}
	return out
}

// containsKey reports whether text contains the key as whole words: where the key begins
// (ends) with a letter, digit or underscore, the text must not continue the word before
// (after) it. "8080" is not in "18080", "Run the tests" is not in "Run the testsuite".
func containsKey(text string, k probeKey) bool {
	first, _ := utf8.DecodeRuneInString(k.s)
	last, _ := utf8.DecodeLastRuneInString(k.s)
	for from := 0; from <= len(text); {
		i := strings.Index(text[from:], k.s)
		if i < 0 {
			return false
		}
		at := from + i
		end := at + len(k.s)
		okStart := !isWordRune(first) || at == 0 || !isWordRune(lastRune(text[:at]))
		okEnd := k.open || !isWordRune(last) || end == len(text) || !isWordRune(firstRune(text[end:]))
		if okStart && okEnd {
			return true
		}
		_, size := utf8.DecodeRuneInString(text[at:])
		from = at + size
	}
	return false
}

func isWordRune(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

func lastRune(s string) rune  { r, _ := utf8.DecodeLastRuneInString(s); return r }
func firstRune(s string) rune { r, _ := utf8.DecodeRuneInString(s); return r }

// contextText is the text of a context as the model reads it, normalized for key matching:
// user, custom and assistant text, thinking, tool calls (name and argument values), tool
// results, bash executions and summaries, whole (not clipped as in a summary prompt), one
// message after the other. memo (nil: none) keeps each message's normalized text: a
// session's messages are in many contexts.
func contextText(msgs []*sessionio.Message, memo map[*sessionio.Message]string) string {
	parts := make([]string, 0, len(msgs))
	for _, m := range msgs {
		if m == nil {
			continue
		}
		t, ok := memo[m]
		if !ok {
			t = messageContextText(m)
			if memo != nil {
				memo[m] = t
			}
		}
		if t != "" {
			parts = append(parts, t)
		}
	}
	return strings.Join(parts, " ")
}

// messageContextText is one message's part of contextText.
func messageContextText(m *sessionio.Message) string {
	var b strings.Builder
	switch m.Role {
	case sessionio.RoleUser, sessionio.RoleCustom, sessionio.RoleToolResult:
		b.WriteString(summarize.MessageText(m.Content))
	case sessionio.RoleBashExecution:
		if !m.ExcludeFromContext {
			b.WriteString(m.Command)
			b.WriteByte('\n')
			b.WriteString(m.Output)
		}
	case sessionio.RoleBranchSummary, sessionio.RoleCompactionSummary:
		b.WriteString(m.Summary)
	case sessionio.RoleAssistant:
		if m.Content.IsString {
			b.WriteString(m.Content.Text)
		}
		for _, bl := range m.Content.Blocks {
			switch bl.Type {
			case sessionio.BlockText:
				b.WriteString(bl.Text)
			case sessionio.BlockThinking:
				b.WriteString(bl.Thinking)
			case sessionio.BlockToolCall:
				b.WriteString(bl.Name)
				b.WriteByte(' ')
				writeJSONValues(&b, bl.Arguments)
			}
			b.WriteByte('\n')
		}
	}
	return normText(b.String())
}

// writeJSONValues writes the strings and numbers of a JSON value, decoded (a command with
// quotes reads as it was typed, not escaped).
func writeJSONValues(b *strings.Builder, raw json.RawMessage) {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		b.Write(raw)
		return
	}
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			b.WriteString(x)
			b.WriteByte('\n')
		case float64:
			b.WriteString(strings.TrimSpace(jsonNumber(x)))
			b.WriteByte('\n')
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				walk(x[k])
			}
		}
	}
	walk(v)
}

func jsonNumber(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}

// normText removes ANSI escapes and collapses every whitespace run to one space.
func normText(s string) string { return oneLine(stripANSI(s)) }

var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)

func stripANSI(s string) string {
	if !strings.Contains(s, "\x1b") {
		return s
	}
	return ansi.ReplaceAllString(s, "")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

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
