package summarize

// Merging: an update folds the previous summary into the new one. Its sections are read
// back into items ranked below the span's own (so the budget drops old before new), moved
// between the history and the split-turn section sets, and de-duplicated.

import (
	"regexp"
	"slices"
	"strings"
)

// previousItems are the previous summary's items for the sections of this summary, ranked
// below the span's own, and the omission counts its notes carried. Pi's file lists and
// the lines that described the state at that time (the latest request and answer, the
// next steps) are not carried; an open item the span finished is dropped.
func previousItems(prev string, f *facts, titles []string) ([]item, map[string]map[string]int) {
	done := map[string]bool{}
	for _, c := range f.commands {
		if !c.pending {
			done["`"+c.text+"` is running (no result yet)"] = true
		}
	}
	omitted := map[string]map[string]int{}
	var out []item
	goalSeen := false
	seq := -1_000_000 // older than every item of the span
	for _, s := range parseSections(prev) {
		if s.title == secNext || s.title == secProgress {
			continue
		}
		for _, it := range s.items {
			sec := place(s.title, it, titles)
			if sec == "" {
				continue
			}
			if counts, ok := parseOmission(it); ok {
				for k, n := range counts {
					addOmitted(omitted, sec, k, n)
				}
				continue
			}
			if strings.HasPrefix(it, "Latest user request: ") || strings.HasPrefix(it, "Latest assistant answer: ") ||
				strings.HasPrefix(it, "Latest assistant text: ") || strings.HasPrefix(it, "[ ] Answer the latest request: ") {
				continue
			}
			if sec == secInProgress && done[strings.TrimPrefix(it, "[ ] ")] {
				continue
			}
			kind, prio := prevKind(sec, it)
			if kind == kRequest && !goalSeen {
				prio, goalSeen = pPrevGoal, true
			}
			seq++
			out = append(out, item{sec: sec, kind: kind, text: it, prio: prio, seq: seq})
		}
	}
	return out, omitted
}

// place files an item of a previous summary under a section of this one: the sections
// of a split turn's prefix summary (Original Request, Early Progress, Context for Suffix)
// go where a history summary keeps the same kind of item, and back. "" drops it.
func place(title, it string, titles []string) string {
	sec := title
	switch title {
	case secOrigRequest:
		sec = secGoal
		if isRule(it) {
			sec = secConstraints
		}
	case secEarly:
		switch {
		case strings.HasPrefix(it, "[x] "):
			sec = secDone
		case strings.HasPrefix(it, "[ ] "):
			sec = secInProgress
		case strings.Contains(it, " failed (") || strings.Contains(it, " failed: ") || strings.Contains(it, " still fails ("):
			sec = secBlocked
		case isRule(it):
			sec = secConstraints
		default:
			sec = secDecisions
		}
	case secSuffix:
		sec = secCritical
	}
	if slices.Contains(titles, sec) {
		return sec
	}
	switch sec { // into a turn prefix summary's sections
	case secGoal:
		sec = secOrigRequest
	case secConstraints, secDone, secInProgress, secBlocked, secDecisions:
		sec = secEarly
	case secCritical, secNext:
		sec = secSuffix
	}
	if slices.Contains(titles, sec) {
		return sec
	}
	return ""
}

// dedupe keeps one of items with the same section and text: the most important, then the
// newest.
func dedupe(items []item) []item {
	best := map[[2]string]int{}
	for i, it := range items {
		k := [2]string{it.sec, it.text}
		if j, ok := best[k]; !ok || it.prio > items[j].prio || it.prio == items[j].prio && it.seq > items[j].seq {
			best[k] = i
		}
	}
	out := items[:0:0]
	for i, it := range items {
		if best[[2]string{it.sec, it.text}] == i {
			out = append(out, it)
		}
	}
	return out
}

func prevKind(sec, it string) (string, int) {
	switch sec {
	case secGoal, secOrigRequest:
		return kRequest, pPrevRequest
	case secConstraints:
		return kConstraint, pPrevConstraint
	case secBlocked:
		if strings.HasPrefix(it, "`") {
			return kFailed, pPrevFailed
		}
		return kToolError, pPrevOther
	case secDone:
		switch {
		case strings.Contains(it, " passes now; it failed before"):
			return kFixed, pPrevFixed
		case strings.HasPrefix(it, "[x] `"):
			return kPassed, pPrevPassed
		}
		return kWork, pPrevOther
	case secInProgress:
		return kPending, pPrevOther
	case secDecisions:
		return kDecision, pPrevOther
	}
	return kOther, pPrevOther
}

// parseSections splits a markdown summary into "## "/"### " sections and their
// non-empty lines (list markers removed). Pi's file lists (<read-files>, <modified-files>)
// and everything after a split turn's separator line are not sections' items.
func parseSections(s string) []section {
	var out []section
	inTag := false
	for _, line := range strings.Split(s, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case t == "<read-files>" || t == "<modified-files>":
			inTag = true
			continue
		case t == "</read-files>" || t == "</modified-files>":
			inTag = false
			continue
		case inTag:
			continue
		}
		if strings.HasPrefix(t, "## ") || strings.HasPrefix(t, "### ") {
			out = append(out, section{title: t})
			continue
		}
		if t == "" || len(out) == 0 || strings.HasPrefix(t, "<") || t == "---" {
			continue
		}
		t = strings.TrimSpace(listMarker.ReplaceAllString(t, ""))
		if t == "" || t == "(none)" {
			continue
		}
		out[len(out)-1].items = append(out[len(out)-1].items, t)
	}
	return out
}

// listMarker is a markdown list marker: "- ", "* ", "12. ".
var listMarker = regexp.MustCompile(`^(?:[-*]|\d+\.)\s+`)

// section is one "## Title" (or "### Title") block and its lines.
type section struct {
	title string
	items []string
}
