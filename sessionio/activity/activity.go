package activity

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/compactor-dev/compactor/sessionio"
)

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
	// Retrying: the newest message is an assistant answer that ended in an error of the
	// kind Pi retries by itself (an overloaded or rate-limited provider, a 5xx, a dropped
	// connection, a timeout), with backoff, a few times within seconds: the run may not be
	// over. Reason and EntryID name it.
	Retrying bool
	// TornLine is the line number of an incomplete last line (no final newline and not
	// JSON), 0 if none: a write in progress, or the trace of a crash mid-write. Pi skips
	// such a line on load.
	TornLine int
}

// Of classifies the path of s's current leaf (see Activity).
func Of(s *sessionio.Session) Activity {
	path, err := s.Path("")
	if err != nil {
		return Activity{TornLine: tornLine(s)}
	}
	return OnPath(s, path)
}

// OnPath is Of for the current leaf's path when the caller has it already.
func OnPath(s *sessionio.Session, path []*sessionio.Entry) Activity {
	a := Activity{TornLine: tornLine(s)}
	a.TurnInProgress, a.Reason, a.EntryID = TurnInProgress(path)
	if !a.TurnInProgress {
		a.Retrying, a.Reason, a.EntryID = retryPending(path)
	}
	return a
}

// piRetries matches the error messages Pi 0.73.1 retries automatically (AgentSession's
// retryable-error test: overloaded and rate-limited providers, 429 and 5xx statuses,
// network and connection failures, timeouts, terminated streams), case-insensitively.
var piRetries = regexp.MustCompile(`(?i)` + strings.Join([]string{
	`overloaded`, `provider.?returned.?error`, `rate.?limit`, `too many requests`,
	`429`, `500`, `502`, `503`, `504`, `service.?unavailable`, `server.?error`, `internal.?error`,
	`network.?error`, `connection.?(?:error|refused|lost)`, `websocket.?(?:closed|error)`,
	`other side closed`, `fetch failed`, `upstream.?connect`, `reset before headers`,
	`socket hang up`, `ended without`, `http2 request did not get a response`,
	`timed? out`, `timeout`, `terminated`, `retry delay`,
}, "|"))

// retryPending reports whether the newest message on path is an assistant answer that
// ended in an error Pi retries by itself (see Activity.Retrying). Context-overflow errors
// are not retried but compacted by Pi, which then continues: they count too.
func retryPending(path []*sessionio.Entry) (bool, string, string) {
	for i := len(path) - 1; i >= 0; i-- {
		e := path[i]
		switch e.Type {
		case sessionio.TypeMessage:
		case sessionio.TypeCompaction, sessionio.TypeBranchSummary, sessionio.TypeCustomMessage:
			return false, "", ""
		default:
			continue
		}
		m := e.Message
		if m != nil && m.Role == sessionio.RoleSystem {
			continue // Pi 1.x's prompt state, written before a request: not an answer
		}
		if m == nil || m.Role != sessionio.RoleAssistant || m.StopReason != "error" {
			return false, "", ""
		}
		if m.ErrorMessage == "" || !piRetries.MatchString(m.ErrorMessage) && !overflowError(m.ErrorMessage) {
			return false, "", ""
		}
		return true, fmt.Sprintf("assistant message %s ended in an error Pi retries by itself (%.80q)", e.ID, m.ErrorMessage), e.ID
	}
	return false, "", ""
}

// overflowError is a rough test for a provider's context-overflow error, after which Pi
// compacts and continues the run.
func overflowError(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "context") && (strings.Contains(m, "length") || strings.Contains(m, "window") ||
		strings.Contains(m, "too long") || strings.Contains(m, "exceed") || strings.Contains(m, "maximum"))
}

// tornLine returns the line of a malformed last line when the file does not end with a
// newline, else 0.
func tornLine(s *sessionio.Session) int {
	if s.EndsWithNewline || len(s.Diagnostics) == 0 {
		return 0
	}
	last := 0
	for _, d := range s.Diagnostics {
		if d.Kind == sessionio.DiagMalformedLine && d.Line > last {
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
func TurnInProgress(path []*sessionio.Entry) (inProgress bool, reason, entryID string) {
	for i := len(path) - 1; i >= 0; i-- {
		e := path[i]
		switch e.Type {
		case sessionio.TypeCompaction, sessionio.TypeBranchSummary:
			return false, "", ""
		case sessionio.TypeCustomMessage:
			return true, fmt.Sprintf("extension message %s is waiting for the model", e.ID), e.ID
		case sessionio.TypeMessage:
		default:
			continue
		}
		m := e.Message
		if m == nil || m.Role == sessionio.RoleSystem {
			continue // Pi 1.x writes its prompt's changes just before the request they go with
		}
		switch m.Role {
		case sessionio.RoleUser:
			return true, fmt.Sprintf("user message %s is waiting for the model", e.ID), e.ID
		case sessionio.RoleCustom:
			return true, fmt.Sprintf("custom message %s is waiting for the model", e.ID), e.ID
		case sessionio.RoleBashExecution:
			return true, fmt.Sprintf("bash execution %s has no answer yet", e.ID), e.ID
		case sessionio.RoleToolResult:
			return true, fmt.Sprintf("tool result %s is going back to the model", e.ID), e.ID
		case sessionio.RoleAssistant:
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
func hasToolCalls(m *sessionio.Message) bool {
	if len(m.Content.Blocks) == 0 {
		return m.StopReason == "toolUse"
	}
	return len(m.ToolCalls()) > 0
}
