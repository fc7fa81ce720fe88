package sessionio

import "fmt"

// Activity is what a session file alone says about its agent at the leaf. Pi keeps its
// leaf in memory and appends every entry under it; an entry another process appends while
// a turn is in progress always ends on a side branch at Pi's next write, so compactor
// never appends then (docs/live-agents.md).
type Activity struct {
	// TurnInProgress: the agent is between a prompt and the end of its run, either waiting
	// for the model (the newest message is a user, custom, bashExecution or toolResult
	// message) or running tools (the newest message is an assistant message whose tool
	// calls have no results yet). Reason says which, naming the entry.
	TurnInProgress bool
	Reason         string
	EntryID        string
	// TornLine is the line number of an incomplete last line (no final newline and not
	// JSON), 0 if none: a write in progress, or the trace of a crash mid-write. Pi skips
	// such a line on load.
	TornLine int
}

// Activity classifies the current leaf's path (see Activity).
func (s *Session) Activity() Activity {
	var a Activity
	a.TornLine = s.tornLine()
	path, err := s.Path("")
	if err != nil {
		return a
	}
	a.TurnInProgress, a.Reason, a.EntryID = TurnInProgress(path)
	return a
}

// tornLine returns the line of a malformed last line when the file does not end with a
// newline, else 0.
func (s *Session) tornLine() int {
	if s.EndsWithNewline || len(s.Diagnostics) == 0 {
		return 0
	}
	last := 0
	for _, d := range s.Diagnostics {
		if d.Kind == DiagMalformedLine && d.Line > last {
			last = d.Line
		}
	}
	for _, e := range s.Entries {
		if e.Line > last {
			return 0
		}
	}
	return last
}

// TurnInProgress reports whether the newest message of path (root first) leaves the
// agent in the middle of a turn, with a reason naming the entry. Entries that are not
// messages (settings changes, labels, names, extension state) are passed over; a
// compaction or a branch summary ends the search: Pi writes them between runs.
//
//   - user, custom, bashExecution message, custom_message entry: waiting for the model;
//   - toolResult: the results go back to the model, which answers next;
//   - assistant with tool calls (not aborted, not an error): the tools are running;
//   - any other assistant message: the run is over.
func TurnInProgress(path []*Entry) (inProgress bool, reason, entryID string) {
	for i := len(path) - 1; i >= 0; i-- {
		e := path[i]
		switch e.Type {
		case TypeCompaction, TypeBranchSummary:
			return false, "", ""
		case TypeCustomMessage:
			return true, fmt.Sprintf("extension message %s is waiting for the model", e.ID), e.ID
		case TypeMessage:
		default:
			continue
		}
		m := e.Message
		if m == nil {
			continue
		}
		switch m.Role {
		case RoleUser:
			return true, fmt.Sprintf("user message %s is waiting for the model", e.ID), e.ID
		case RoleCustom:
			return true, fmt.Sprintf("custom message %s is waiting for the model", e.ID), e.ID
		case RoleBashExecution:
			return true, fmt.Sprintf("bash execution %s has no answer yet", e.ID), e.ID
		case RoleToolResult:
			return true, fmt.Sprintf("tool result %s is going back to the model", e.ID), e.ID
		case RoleAssistant:
			if m.StopReason == "aborted" || m.StopReason == "error" {
				return false, "", ""
			}
			if hasToolCalls(m) {
				return true, fmt.Sprintf("assistant message %s is running tool calls that have no results yet", e.ID), e.ID
			}
			return false, "", ""
		default:
			return false, "", ""
		}
	}
	return false, "", ""
}

// hasToolCalls reports whether an assistant message calls tools. A light read leaves the
// content undecoded; then the stop reason Pi gives a tool-calling answer ("toolUse")
// stands in.
func hasToolCalls(m *Message) bool {
	if len(m.Content.Blocks) == 0 {
		return m.StopReason == "toolUse"
	}
	return len(m.ToolCalls()) > 0
}
