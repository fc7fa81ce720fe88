package summarize

// Items: one line of the summary is an item with a kind (what the omission note counts
// it as), a section, and a priority (what the budget drops first). This file defines those
// and turns the span's facts into items.

import (
	"fmt"
	"slices"
	"strings"
)

// Item kinds, as the omission notes name them (singular, plural).
var kindNames = map[string][2]string{
	kRequest:    {"request", "requests"},
	kConstraint: {"constraint", "constraints"},
	kPassed:     {"command that passed", "commands that passed"},
	kFailed:     {"failed command", "failed commands"},
	kFixed:      {"fixed failure", "fixed failures"},
	kToolError:  {"failed tool call", "failed tool calls"},
	kPending:    {"open item", "open items"},
	kDecision:   {"decision", "decisions"},
	kContext:    {"note", "notes"},
	kWork:       {"work item", "work items"},
	kOther:      {"item", "items"},
}

const (
	kRequest    = "request"
	kConstraint = "constraint"
	kPassed     = "passed"
	kFailed     = "failed"
	kFixed      = "fixed"
	kToolError  = "toolError"
	kPending    = "pending"
	kDecision   = "decision"
	kContext    = "context"
	kWork       = "work"
	kOther      = "other"
)

// Section titles.
const (
	secGoal        = "## Goal"
	secConstraints = "## Constraints & Preferences"
	secProgress    = "## Progress"
	secDone        = "### Done"
	secInProgress  = "### In Progress"
	secBlocked     = "### Blocked"
	secDecisions   = "## Key Decisions"
	secNext        = "## Next Steps"
	secCritical    = "## Critical Context"
	secOrigRequest = "## Original Request"
	secEarly       = "## Early Progress"
	secSuffix      = "## Context for Suffix"
)

// item is one line of the summary.
type item struct {
	sec  string
	text string
	kind string
	prio int // higher is kept longer
	seq  int // higher is newer
	cost int // tokens, with its list marker and line break
}

// Priorities: what an agent can least afford to lose is kept longest. Items carried from
// the previous summary rank below the span's own of the same kind.
const (
	pConstraint     = 100
	pFailed         = 95
	pLatest         = 92
	pFirstRequest   = 90
	pPrevConstraint = 88 // a rule the user stated once holds until they lift it
	pPrevGoal       = 87 // the session's original goal
	pRequest        = 85
	pFixed          = 80
	pPrevFailed     = 75
	pToolError      = 60
	pPending        = 58
	pPrevRequest    = 55
	pWork           = 50
	pPrevFixed      = 45
	pDecision       = 35
	pPassed         = 30
	pPrevOther      = 20
	pPrevPassed     = 10
)

// items are the summary's items from the span, filed under titles: a history, update or
// branch summary's sections, or a split turn's prefix summary's (Original Request, Early
// Progress, Context for Suffix), where the same items go into fewer sections (place).
func (f *facts) items(titles []string) []item {
	var out []item
	seq := 0
	add := func(sec, kind, text string, prio int) {
		if sec = place(sec, text, titles); sec != "" {
			seq++
			out = append(out, item{sec: sec, kind: kind, text: text, prio: prio, seq: seq})
		}
	}
	for _, g := range f.goalFromSum {
		add(secGoal, kRequest, g, pPrevRequest)
	}
	for i, r := range f.requests {
		if f.firstIsRule[i] {
			continue // its constraint item carries it, verbatim
		}
		p := pRequest
		if i == 0 && len(f.goalFromSum) == 0 {
			p = pFirstRequest
		}
		add(secGoal, kRequest, r, p)
	}
	for _, c := range f.constraints {
		add(secConstraints, kConstraint, c, pConstraint)
	}
	if w := f.workLine(); w != "" {
		add(secDone, kWork, w, pWork)
	}
	for _, c := range f.commands {
		f.commandItems(c, add)
	}
	for _, p := range f.pending {
		add(secInProgress, kPending, "[ ] "+p, pPending)
	}
	for _, e := range f.toolErrors {
		add(secBlocked, kToolError, e, pToolError)
	}
	for _, d := range f.decisions {
		add(secDecisions, kDecision, d, pDecision)
	}
	switch {
	case slices.Contains(titles, secSuffix): // the turn goes on after the prefix
		if f.lastAnswer != "" {
			add(secNext, kContext, "Latest assistant text: "+f.lastAnswer, pLatest)
		}
	case f.lastUser != "" && f.lastAnswer == "":
		add(secInProgress, kPending, "[ ] Answer the latest request: "+f.lastUser, pLatest)
		add(secNext, kContext, "Answer the latest request: "+f.lastUser, pLatest)
	case f.lastAnswer != "":
		add(secNext, kContext, "Continue from the latest answer: "+f.lastAnswer, pLatest)
	}
	if f.lastUser != "" && !slices.Contains(titles, secSuffix) {
		add(secCritical, kContext, "Latest user request: "+f.lastUser, pLatest)
	}
	return out
}

// commandItems files one command: blocked when its last run failed (each distinct failure
// with its error line), done otherwise (a failure fixed later says so, with its error).
func (f *facts) commandItems(c *command, add func(sec, kind, text string, prio int)) {
	times := ""
	if c.runs > 1 {
		times = fmt.Sprintf(" (%d runs)", c.runs)
	}
	name := "`" + c.text + "`"
	switch {
	case c.pending:
		add(secInProgress, kPending, "[ ] "+name+" is running (no result yet)", pPending)
	case len(c.failures) == 0:
		add(secDone, kPassed, "[x] "+name+times, pPassed)
		return
	case c.lastOK:
		for _, fl := range c.failures {
			add(secDone, kFixed, "[x] "+name+" passes now; it failed before ("+fl.status+")"+errSuffix(fl.line), pFixed)
		}
		return
	}
	for i, fl := range c.failures {
		what := " failed (" + fl.status + ")"
		if i == len(c.failures)-1 && len(c.failures) > 1 {
			what = " still fails (" + fl.status + ")"
		}
		add(secBlocked, kFailed, name+what+errSuffix(fl.line), pFailed)
	}
}

func errSuffix(line string) string {
	if line == "" {
		return ""
	}
	return ": " + line
}

// workLine sums up the reads, searches and file changes (the file lists follow the summary).
func (f *facts) workLine() string {
	var parts []string
	if n := len(f.edits); n > 0 {
		parts = append(parts, plural(n, "file", "files")+" edited")
	}
	if n := len(f.writes); n > 0 {
		parts = append(parts, plural(n, "file", "files")+" written")
	}
	if f.reads > 0 {
		parts = append(parts, plural(f.reads, "read", "reads"))
	}
	if f.searches > 0 {
		parts = append(parts, plural(f.searches, "search", "searches"))
	}
	if len(parts) == 0 {
		return ""
	}
	return "[x] " + strings.Join(parts, ", ")
}
