package summarize

// Gathering: the extractive summarizer reads the span once, in order, and keeps only the
// facts its sections are made of. Commands are keyed by their shown text so that repeated
// runs of one command collapse into one fact with its history (passed, failed, fixed).

import (
	"slices"
	"strings"

	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/jsjson"
)

// facts is what the extractive summarizer takes from a span, in span order.
type facts struct {
	requests    []string // first sentences of user messages
	constraints []string
	firstIsRule []bool // requests[i] is also a constraint (not repeated under Goal)
	commands    []*command
	toolErrors  []string
	pending     []string
	decisions   []string
	reads       int
	searches    int
	edits       map[string]bool
	writes      map[string]bool
	lastUser    string
	lastAnswer  string
	goalFromSum []string // the Goal of a summary inside the span
}

// command is one distinct command of the span and what became of its runs.
type command struct {
	text     string
	runs     int
	passed   int
	lastOK   bool
	pending  bool
	failures []failure // distinct failures, in order
	seq      int       // the last run
}

type failure struct {
	status string // "exit 2", "cancelled", "timed out", "error"
	line   string // the first error line ("" when the output has none)
}

// gather reads the span once.
func gather(msgs []*sessionio.Message, clip func(int) int) *facts {
	f := &facts{edits: map[string]bool{}, writes: map[string]bool{}}
	results := map[string]*sessionio.Message{}
	for _, m := range msgs {
		if m != nil && m.Role == sessionio.RoleToolResult {
			results[m.ToolCallID] = m
		}
	}
	byText := map[string]*command{}
	run := func(cmdText string, fail *failure, pending bool, seq int) {
		key := commandText(cmdText, clip(160))
		if key == "" {
			return
		}
		c := byText[key]
		if c == nil {
			c = &command{text: key}
			byText[key] = c
			f.commands = append(f.commands, c)
		}
		c.runs++
		c.seq = seq
		c.pending = pending
		switch {
		case pending:
		case fail == nil:
			c.passed++
			c.lastOK = true
		default:
			c.lastOK = false
			if !slices.Contains(c.failures, *fail) {
				c.failures = append(c.failures, *fail)
			}
		}
	}
	// Failed non-bash tool calls stay blocked unless a later call of the same tool on the
	// same target succeeded.
	type toolCall struct{ name, target string }
	failedTools := map[toolCall]string{}
	var failedOrder []toolCall
	for seq, m := range msgs {
		if m == nil {
			continue
		}
		switch m.Role {
		case sessionio.RoleUser:
			t := MessageText(m.Content)
			if strings.TrimSpace(t) == "" {
				continue
			}
			ss := userSentences(t)
			if len(ss) == 0 {
				continue
			}
			first := clipWords(ss[0], clip(200))
			rule := false
			for _, s := range ss {
				if isRule(s) {
					f.constraints = append(f.constraints, clipWords(s, clip(300)))
					rule = rule || s == ss[0]
				}
			}
			// "ok", "thanks!", "yo": acknowledgements, not requests.
			if len(strings.Fields(first)) >= 3 || rule {
				f.requests = append(f.requests, first)
				f.firstIsRule = append(f.firstIsRule, rule)
			}
			f.lastUser = clipWords(oneLine(t), clip(300))
			f.lastAnswer = ""
		case sessionio.RoleBashExecution:
			if m.ExcludeFromContext {
				continue
			}
			var fail *failure
			switch {
			case m.Cancelled:
				fail = &failure{status: "cancelled", line: errorLineOf(m.Output, clip(200))}
			case m.ExitCode != nil && *m.ExitCode != 0:
				fail = &failure{status: "exit " + string(jsjson.AppendNumber(nil, *m.ExitCode)), line: errorLineOf(m.Output, clip(200))}
			}
			run(m.Command, fail, false, seq)
		case sessionio.RoleBranchSummary, sessionio.RoleCompactionSummary:
			for _, s := range parseSections(m.Summary) {
				if s.title == secGoal {
					f.goalFromSum = append(f.goalFromSum, s.items...)
				}
			}
		case sessionio.RoleAssistant:
			var texts []string
			for _, b := range m.Content.Blocks {
				switch b.Type {
				case sessionio.BlockText:
					texts = append(texts, b.Text)
				case sessionio.BlockToolCall:
					r, ok := results[b.ID]
					if b.Name == "bash" {
						cmd := ToolArgument(b.Arguments, "command")
						if !ok {
							run(cmd, nil, true, seq)
							continue
						}
						out := MessageText(r.Content)
						run(cmd, bashFailure(r.IsError, out, clip(200)), false, seq)
						continue
					}
					target := callTarget(b)
					switch b.Name {
					case "read":
						f.reads++
					case "grep", "find", "ls":
						f.searches++
					case "edit":
						f.edits[target] = true
					case "write":
						f.writes[target] = true
					}
					tc := toolCall{b.Name, target}
					switch {
					case !ok:
						f.pending = append(f.pending, describeCall(b, clip(160))+" (no result yet)")
					case r.IsError:
						if _, seen := failedTools[tc]; !seen {
							failedOrder = append(failedOrder, tc)
						}
						failedTools[tc] = describeCall(b, clip(160)) + " failed: " + clipWords(firstNonEmptyLine(MessageText(r.Content)), clip(200))
					default:
						delete(failedTools, tc)
					}
				}
			}
			if t := oneLine(strings.Join(texts, " ")); t != "" {
				f.lastAnswer = clipWords(t, clip(300))
				for _, line := range strings.Split(strings.Join(texts, "\n"), "\n") {
					line = strings.TrimLeft(strings.TrimSpace(line), "#>*-0123456789. ")
					for _, s := range sentences(oneLine(line)) {
						// A decision is a whole sentence, not a heading or a list's lead-in.
						if len(strings.Fields(s)) >= 5 && !strings.HasSuffix(s, ":") && hasAny(s, decisionWords) {
							f.decisions = append(f.decisions, clipWords(s, clip(240)))
						}
					}
				}
			}
		}
	}
	for _, tc := range failedOrder {
		if s, ok := failedTools[tc]; ok {
			f.toolErrors = append(f.toolErrors, s)
		}
	}
	return f
}
