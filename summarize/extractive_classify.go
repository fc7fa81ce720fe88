package summarize

// Classification: the rules that decide what a piece of a message is (a user's rule or a
// question, a decision, a failed command and its error line, a tool call's target). They
// are kept apart from the gathering loop because each is a pure function of text, and
// they are what decides the summary's recall (docs/quality.md).

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/compactor-dev/compactor/sessionio"
)

// constraintWords mark a user sentence as a rule the agent must keep.
var constraintWords = regexp.MustCompile(`(?i)\b(always|never|don'?t|do not|must|mustn'?t|should not|shouldn'?t|avoid|make sure|ensure|only|prefer|instead of|no more)\b`)

// questionStart marks a sentence as a question even without its question mark: a
// question word, or a verb before its subject ("can we", "do you"; not "do not").
var questionStart = regexp.MustCompile(`(?i)^(?:(?:what|why|how|when|where|which|who|whose)\b|(?:is|are|was|were|can|could|would|should|shall|will|do|does|did|have|has)\s+(?:you|we|i|it|this|that|these|those|there|they|he|she)\b)`)

// isRule reports whether a user sentence states a constraint or preference: it has a
// constraint word and is not a question.
func isRule(s string) bool {
	s = strings.TrimSpace(s)
	if strings.HasSuffix(s, "?") || questionStart.MatchString(s) || len(strings.Fields(s)) < 3 {
		return false
	}
	return constraintWords.MatchString(s)
}

// decisionWords mark an assistant sentence as a decision.
var decisionWords = []string{"decided", "i'll use", "i will use", "instead of", "chose", "switch to", "going with", "the fix is", "root cause", "because"}

// userSentences splits a user message into sentences: at line breaks, and after ".", "!",
// "?" or ";" followed by a space.
func userSentences(t string) []string {
	var out []string
	for _, line := range strings.Split(t, "\n") {
		out = append(out, sentences(oneLine(line))...)
	}
	return out
}

// bashExit is the line Pi's bash tool ends the output of a command that did not exit 0
// with.
var bashExit = regexp.MustCompile(`^Command (?:exited with code (\d+)|(aborted)|(timed out)\b.*)$`)

// bashFailure classifies a bash tool result: nil when the command passed.
func bashFailure(isError bool, out string, n int) *failure {
	last := ""
	lines := strings.Split(strings.TrimRight(out, " \t\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if t := strings.TrimSpace(lines[i]); t != "" {
			last = t
			break
		}
	}
	status := ""
	if m := bashExit.FindStringSubmatch(last); m != nil {
		switch {
		case m[1] != "" && m[1] != "0":
			status = "exit " + m[1]
		case m[2] != "":
			status = "cancelled"
		case m[3] != "":
			status = "timed out"
		}
	}
	if status == "" && isError {
		status = "error"
	}
	if status == "" {
		return nil
	}
	return &failure{status: status, line: errorLineOf(out, n)}
}

var (
	ansiEscape = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)
	// errorMark marks the line of an output that says what went wrong.
	errorMark = regexp.MustCompile(`(?i)(\berr(or)?s?\b|\berr!|\bfail(ed|ure|ures|s)?\b|\bfatal\b|\bpanic\b|exception|traceback|\bcannot\b|can't|could not|couldn't|not found|no such|denied|refused|undefined|\binvalid\b|unexpected|\bmissing\b|[×✗✘])`)
)

// errorLineOf picks a failed command's error line: the first line of its output that
// names an error, else its last line, without Pi's "Command exited with code N";
// clipped to n characters.
func errorLineOf(out string, n int) string {
	if strings.Contains(out, "\x1b") {
		out = ansiEscape.ReplaceAllString(out, "")
	}
	last := ""
	for _, l := range strings.Split(out, "\n") {
		l = oneLine(l)
		if l == "" || bashExit.MatchString(l) {
			continue
		}
		if errorMark.MatchString(l) {
			return clipWords(l, n)
		}
		last = l
	}
	return clipWords(last, n)
}

// cdLead is a leading "cd DIR &&": where a command ran, left out to keep it short.
var cdLead = regexp.MustCompile(`^cd\s+("[^"]*"|'[^']*'|\S+)\s*(&&|;)\s*`)

// commandText is how a command is shown: its first line (continuation lines joined),
// without a leading cd, clipped to n characters.
func commandText(cmd string, n int) string {
	cmd = strings.ReplaceAll(cmd, "\\\n", " ")
	if i := strings.IndexByte(strings.TrimSpace(cmd), '\n'); i >= 0 {
		cmd = strings.TrimSpace(cmd)[:i]
	}
	cmd = oneLine(cmd)
	for {
		loc := cdLead.FindStringIndex(cmd)
		if loc == nil || loc[1] == len(cmd) {
			break
		}
		cmd = cmd[loc[1]:]
	}
	return strings.ReplaceAll(clipWords(cmd, n), "`", "'")
}

// callTarget is the path or pattern a tool call works on.
func callTarget(b sessionio.Block) string {
	for _, k := range []string{"path", "file", "pattern", "query", "url"} {
		if s := ToolArgument(b.Arguments, k); s != "" {
			return s
		}
	}
	return ""
}

// describeCall names a tool call by its most telling argument.
func describeCall(b sessionio.Block, n int) string {
	if t := callTarget(b); t != "" {
		return fmt.Sprintf("%s `%s`", b.Name, clipChars(oneLine(t), n))
	}
	return b.Name
}

// ToolArgument is a tool call's string argument key ("" when the arguments are not an
// object or the value is not a string).
func ToolArgument(raw json.RawMessage, key string) string {
	var args map[string]json.RawMessage
	if json.Unmarshal(raw, &args) != nil {
		return ""
	}
	var s string
	if json.Unmarshal(args[key], &s) != nil {
		return ""
	}
	return s
}

// MessageText is a message's text: its string content, or its text blocks joined by
// newlines (Pi's own serialization joins them with nothing; a reader of sentences and
// lines needs the breaks).
func MessageText(c sessionio.Content) string {
	if c.IsString {
		return c.Text
	}
	var parts []string
	for _, b := range c.Blocks {
		if b.Type == sessionio.BlockText {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}
