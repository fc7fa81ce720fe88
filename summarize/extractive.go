package summarize

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/jsjson"
)

// Extractive is a Summarizer that needs no model: it fills the summary sections with
// material taken verbatim (clipped) from the span — the user's requests and stated
// constraints, the tool calls and their outcomes, the errors, the files touched, and the
// latest request and answer. Its output is deterministic (same input, same bytes) and
// bounded, so compacting with it always shrinks the context. It is the fallback when no
// endpoint is configured and the summarizer for policy experiments.
type Extractive struct {
	// MaxItems caps the items of one section (default 12; the newest are kept).
	MaxItems int
	// MaxItemChars caps one item, in characters (default 240).
	MaxItemChars int
	// MaxChars caps the whole summary, in characters (default 8000). The request's
	// MaxTokens lowers it further (4 characters per token).
	MaxChars int
}

// NewExtractive returns an extractive summarizer with the default bounds.
func NewExtractive() *Extractive { return &Extractive{} }

// section is one "## Title" (or "### Title") block and its lines.
type section struct {
	title string
	items []string
}

// Summarize implements Summarizer. It makes no call and reports no token usage.
func (x *Extractive) Summarize(ctx context.Context, req Request) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, ctxError(err, 0)
	}
	maxItems, itemChars, maxChars := x.MaxItems, x.MaxItemChars, x.MaxChars
	if maxItems <= 0 {
		maxItems = 12
	}
	if itemChars <= 0 {
		itemChars = 240
	}
	if maxChars <= 0 {
		maxChars = 8000
	}
	if req.MaxTokens > 0 && req.MaxTokens*4 < maxChars {
		maxChars = req.MaxTokens * 4
	}
	f := x.facts(req.Messages, itemChars)

	var secs []section
	switch req.Task {
	case TaskTurnPrefix:
		secs = []section{
			{"## Original Request", orNone(firstN(f.requests, 1))},
			{"## Early Progress", orNone(append(append([]string{}, f.done...), f.errors...))},
			{"## Context for Suffix", orNone(append(f.filesLines(), f.latest()...))},
		}
	default:
		secs = []section{
			{"## Goal", orNone(firstN(f.requests, 3))},
			{"## Constraints & Preferences", orNone(f.constraints)},
			{"## Progress", nil},
			{"### Done", orNone(prefixAll(f.done, "[x] "))},
			{"### In Progress", orNone(prefixAll(f.pending, "[ ] "))},
			{"### Blocked", orNone(f.errors)},
			{"## Key Decisions", orNone(f.decisions)},
			{"## Next Steps", orNone(f.next)},
		}
		if req.Task != TaskBranch {
			secs = append(secs, section{"## Critical Context", orNone(append(f.filesLines(), f.latest()...))})
		}
	}
	if req.PreviousSummary != "" {
		secs = mergeSections(parseSections(req.PreviousSummary), secs)
	}
	return Result{Text: render(secs, maxItems, maxChars), Calls: 0}, nil
}

// facts is what the extractive summarizer takes from a span.
type facts struct {
	requests    []string // user requests, oldest first
	constraints []string
	done        []string // tool calls that succeeded, bash commands that passed
	pending     []string // tool calls without a result, the open request
	errors      []string
	decisions   []string
	next        []string
	read, mod   []string
	lastUser    string
	lastAnswer  string
}

func (f *facts) filesLines() []string {
	var out []string
	if len(f.read) > 0 {
		out = append(out, "Files read: "+strings.Join(f.read, ", "))
	}
	if len(f.mod) > 0 {
		out = append(out, "Files modified: "+strings.Join(f.mod, ", "))
	}
	return out
}

func (f *facts) latest() []string {
	var out []string
	if f.lastUser != "" {
		out = append(out, "Latest user request: "+f.lastUser)
	}
	if f.lastAnswer != "" {
		out = append(out, "Latest assistant answer: "+f.lastAnswer)
	}
	return out
}

// constraintWords mark a user sentence as a constraint or preference.
var constraintWords = []string{"must", "don't", "do not", "never", "always", "prefer", "should", "avoid", "without", "only ", "keep ", "make sure", "no "}

// decisionWords mark an assistant sentence as a decision.
var decisionWords = []string{"decided", "i'll use", "i will use", "instead of", "chose", "switch to", "going with", "the fix is", "root cause", "because"}

func (x *Extractive) facts(msgs []*sessionio.Message, itemChars int) *facts {
	f := &facts{}
	results := map[string]*sessionio.Message{}
	for _, m := range msgs {
		if m != nil && m.Role == sessionio.RoleToolResult {
			results[m.ToolCallID] = m
		}
	}
	ops := sessionio.NewFileOps()
	for _, m := range msgs {
		if m == nil {
			continue
		}
		ops.AddFromMessage(m)
		switch m.Role {
		case sessionio.RoleUser, sessionio.RoleCustom:
			t := oneLine(contentText(m.Content))
			if t == "" {
				continue
			}
			f.requests = append(f.requests, clipChars(t, itemChars))
			f.lastUser = clipChars(t, itemChars)
			f.lastAnswer = ""
			for _, s := range sentences(t) {
				if hasAny(s, constraintWords) {
					f.constraints = append(f.constraints, clipChars(s, itemChars))
				}
			}
		case sessionio.RoleBashExecution:
			if m.ExcludeFromContext {
				continue
			}
			item := fmt.Sprintf("ran `%s`", clipChars(oneLine(m.Command), itemChars/2))
			switch {
			case m.Cancelled:
				f.errors = append(f.errors, item+" (cancelled)")
			case m.ExitCode != nil && *m.ExitCode != 0:
				f.errors = append(f.errors, fmt.Sprintf("%s (exit code %s): %s", item,
					string(jsjson.AppendNumber(nil, *m.ExitCode)), clipChars(lastLine(m.Output), itemChars/2)))
			default:
				f.done = append(f.done, item)
			}
		case sessionio.RoleBranchSummary, sessionio.RoleCompactionSummary:
			// An earlier summary's goal is still the goal.
			if g := parseSections(m.Summary); len(g) > 0 {
				for _, s := range g {
					if s.title == "## Goal" {
						f.requests = append(f.requests, s.items...)
					}
				}
			}
		case sessionio.RoleAssistant:
			var texts []string
			for _, b := range m.Content.Blocks {
				switch b.Type {
				case sessionio.BlockText:
					texts = append(texts, b.Text)
				case sessionio.BlockToolCall:
					desc := describeCall(b, itemChars/2)
					r, ok := results[b.ID]
					switch {
					case !ok:
						f.pending = append(f.pending, desc+" (no result yet)")
					case r.IsError:
						f.errors = append(f.errors, desc+" failed: "+clipChars(oneLine(blocksText(r.Content.Blocks)), itemChars/2))
					default:
						f.done = append(f.done, desc)
					}
				}
			}
			if m.StopReason == "error" || m.StopReason == "aborted" {
				f.errors = append(f.errors, "assistant turn ended with "+m.StopReason)
			}
			if t := oneLine(strings.Join(texts, " ")); t != "" {
				f.lastAnswer = clipChars(t, itemChars)
				for _, s := range sentences(t) {
					if hasAny(s, decisionWords) {
						f.decisions = append(f.decisions, clipChars(s, itemChars))
					}
				}
			}
		}
	}
	f.read, f.mod = ops.Lists()
	if f.lastUser != "" {
		if f.lastAnswer == "" {
			f.pending = append(f.pending, "answer the latest request: "+f.lastUser)
			f.next = append(f.next, "Answer the latest request: "+f.lastUser)
		} else {
			f.next = append(f.next, "Continue from the latest answer: "+f.lastAnswer)
		}
	}
	return f
}

// describeCall names a tool call by its most telling argument.
func describeCall(b sessionio.Block, n int) string {
	var args map[string]json.RawMessage
	_ = json.Unmarshal(b.Arguments, &args)
	for _, k := range []string{"path", "command", "file", "pattern", "query", "url"} {
		if raw, ok := args[k]; ok {
			var s string
			if json.Unmarshal(raw, &s) == nil && s != "" {
				return fmt.Sprintf("%s `%s`", b.Name, clipChars(oneLine(s), n))
			}
		}
	}
	return b.Name
}

// parseSections splits a markdown summary into "## "/"### " sections and their
// non-empty lines (list markers removed).
func parseSections(s string) []section {
	var out []section
	for _, line := range strings.Split(s, "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "## ") || strings.HasPrefix(t, "### ") {
			out = append(out, section{title: t})
			continue
		}
		if t == "" || len(out) == 0 || strings.HasPrefix(t, "<") {
			continue
		}
		t = strings.TrimLeft(t, "-*0123456789. ")
		if t == "" || t == "(none)" {
			continue
		}
		out[len(out)-1].items = append(out[len(out)-1].items, t)
	}
	return out
}

// mergeSections puts the previous summary's items before the new ones, section by
// section (the new summary's section order wins; a previous "In Progress" item that the
// new span lists as done is dropped there), without duplicates.
func mergeSections(prev, cur []section) []section {
	prevItems := map[string][]string{}
	for _, s := range prev {
		prevItems[s.title] = append(prevItems[s.title], s.items...)
	}
	doneNow := map[string]bool{}
	for _, s := range cur {
		if s.title == "### Done" {
			for _, it := range s.items {
				doneNow[strings.TrimPrefix(it, "[x] ")] = true
			}
		}
	}
	out := make([]section, len(cur))
	for i, s := range cur {
		seen := map[string]bool{}
		var items []string
		add := func(it string) {
			if it == "(none)" || seen[it] {
				return
			}
			seen[it] = true
			items = append(items, it)
		}
		if s.title != "## Next Steps" { // next steps describe the current state only
			for _, it := range prevItems[s.title] {
				if s.title == "### In Progress" && doneNow[strings.TrimPrefix(it, "[ ] ")] {
					continue
				}
				add(it)
			}
		}
		for _, it := range s.items {
			add(it)
		}
		if len(items) == 0 && s.items != nil {
			items = []string{"(none)"}
		}
		out[i] = section{title: s.title, items: items}
	}
	return out
}

// render writes the sections, keeping the newest maxItems of each, within maxChars.
func render(secs []section, maxItems, maxChars int) string {
	// Shrink the per-section item count until the text fits.
	for n := maxItems; ; n = n * 2 / 3 {
		text := renderN(secs, n)
		if len(text) <= maxChars || n <= 1 {
			if len(text) > maxChars {
				text = clipChars(text, maxChars)
			}
			return text
		}
	}
}

func renderN(secs []section, n int) string {
	var sb strings.Builder
	for i, s := range secs {
		if i > 0 {
			sb.WriteString("\n\n")
		}
		sb.WriteString(s.title)
		items := s.items
		if len(items) > n {
			items = append([]string{fmt.Sprintf("(%d earlier items omitted)", len(items)-n)}, items[len(items)-n:]...)
		}
		for k, it := range items {
			sb.WriteString("\n")
			if s.title == "## Next Steps" {
				fmt.Fprintf(&sb, "%d. %s", k+1, it)
			} else {
				sb.WriteString("- ")
				sb.WriteString(it)
			}
		}
	}
	return sb.String()
}

func orNone(items []string) []string {
	if len(items) == 0 {
		return []string{"(none)"}
	}
	return items
}

func firstN(items []string, n int) []string {
	if len(items) > n {
		return items[:n]
	}
	return items
}

func prefixAll(items []string, p string) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = p + it
	}
	return out
}

// oneLine collapses all whitespace runs to single spaces.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n ")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return oneLine(s)
}

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
