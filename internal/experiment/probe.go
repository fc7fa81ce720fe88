package experiment

// Probes measure what a compacted context still knows (docs/quality.md), in four files:
//
//   probe.go          the probe kinds and deriveProbes: the facts of a summarized span
//   probe_keys.go     the keys a fact is looked up by (commands, error lines, rules, numbers)
//   probe_context.go  the context text the keys are looked up in, normalized alike
//   probe_recall.go   the lookup and its counts (Recall, ProbeRecall)
//
// The probes classify text with rules of their own (probe_keys.go); the extractive
// summarizer's rules, which look alike, are in summarize/extractive_classify.go.

import (
	"strings"
	"unicode/utf8"

	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/fileops"
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
	pr := &prober{numbers: numbers, results: map[string]*sessionio.Message{}}
	for _, m := range msgs {
		if m != nil && m.Role == sessionio.RoleToolResult {
			pr.results[m.ToolCallID] = m
		}
	}
	ops := fileops.New()
	for _, m := range msgs {
		if m != nil {
			ops.AddFromMessage(m)
		}
	}
	read, modified := ops.Lists()
	for _, p := range modified {
		pr.set.add(ProbeFileModified, probeKey{s: p})
	}
	for _, p := range read {
		pr.set.add(ProbeFileRead, probeKey{s: p})
	}
	for _, m := range msgs {
		if m != nil {
			pr.message(m)
		}
	}
	return pr.set.list
}

// prober gathers the probes of a span's messages.
type prober struct {
	set     probeSet
	numbers map[*sessionio.Message][]string // memo of each message's number keys
	results map[string]*sessionio.Message   // tool results by their call's id
}

// message adds the probes of one message: a user's request, constraints and numbers; a
// command and its failure; a tool result's numbers.
func (pr *prober) message(m *sessionio.Message) {
	switch m.Role {
	case sessionio.RoleUser:
		pr.user(m)
	case sessionio.RoleBashExecution:
		if m.ExcludeFromContext {
			return
		}
		failed := m.Cancelled || (m.ExitCode != nil && *m.ExitCode != 0)
		addCommand(&pr.set, m.Command, m.Output, failed)
		pr.addNumbers(m, m.Output)
	case sessionio.RoleAssistant:
		pr.bashCalls(m)
	case sessionio.RoleToolResult:
		switch m.ToolName {
		case "read", "write", "edit":
			// File contents and write confirmations: their numbers are code, not
			// measurements.
		default:
			pr.addNumbers(m, summarize.MessageText(m.Content))
		}
	}
}

// user adds a user message's request (its first sentence), constraints and numbers.
func (pr *prober) user(m *sessionio.Message) {
	t := summarize.MessageText(m.Content)
	if t == "" {
		return
	}
	ss := splitSentences(t)
	if len(ss) > 0 && words(ss[0]) >= 3 {
		pr.set.add(ProbeRequest, clipKey(ss[0], requestKeyRunes))
	}
	for _, s := range ss {
		if isConstraintSentence(s) {
			pr.set.add(ProbeConstraint, clipKey(s, constraintKeyRunes))
		}
	}
	pr.addNumbers(m, t)
}

// bashCalls adds the commands of an assistant's bash tool calls, failed when their result
// is an error or reads as a failure.
func (pr *prober) bashCalls(m *sessionio.Message) {
	for _, b := range m.Content.Blocks {
		if b.Type != sessionio.BlockToolCall || b.Name != "bash" {
			continue
		}
		cmd := summarize.ToolArgument(b.Arguments, "command")
		if cmd == "" {
			continue
		}
		r := pr.results[b.ID]
		out, failed := "", false
		if r != nil {
			out = summarize.MessageText(r.Content)
			failed = r.IsError || bashFailed(out)
		}
		addCommand(&pr.set, cmd, out, failed)
	}
}

// addNumbers adds the number keys of text, m's, memoized per message.
func (pr *prober) addNumbers(m *sessionio.Message, text string) {
	keys, ok := pr.numbers[m]
	if !ok {
		keys = numberKeys(text)
		if pr.numbers != nil {
			pr.numbers[m] = keys
		}
	}
	for _, k := range keys {
		pr.set.add(ProbeNumber, probeKey{s: k})
	}
}
