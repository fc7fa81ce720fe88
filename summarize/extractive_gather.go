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
	g := &gatherer{
		f:    &facts{edits: map[string]bool{}, writes: map[string]bool{}},
		clip: clip, results: map[string]*sessionio.Message{}, byText: map[string]*command{},
		failedTools: map[toolCall]string{},
	}
	for _, m := range msgs {
		if m != nil && m.Role == sessionio.RoleToolResult {
			g.results[m.ToolCallID] = m
		}
	}
	for seq, m := range msgs {
		if m == nil {
			continue
		}
		switch m.Role {
		case sessionio.RoleUser:
			g.user(m)
		case sessionio.RoleBashExecution:
			g.bash(m, seq)
		case sessionio.RoleBranchSummary, sessionio.RoleCompactionSummary:
			for _, s := range parseSections(m.Summary) {
				if s.title == secGoal {
					g.f.goalFromSum = append(g.f.goalFromSum, s.items...)
				}
			}
		case sessionio.RoleAssistant:
			g.assistant(m, seq)
		}
	}
	for _, tc := range g.failedOrder {
		if s, ok := g.failedTools[tc]; ok {
			g.f.toolErrors = append(g.f.toolErrors, s)
		}
	}
	return g.f
}

// toolCall is a non-bash tool call by what it did: the tool and its target.
type toolCall struct{ name, target string }

// gatherer is one gather's reading state.
type gatherer struct {
	f       *facts
	clip    func(int) int
	results map[string]*sessionio.Message // tool results by call id
	byText  map[string]*command           // the span's commands by shown text
	// Failed non-bash tool calls stay blocked unless a later call of the same tool on the
	// same target succeeded.
	failedTools map[toolCall]string
	failedOrder []toolCall
}

// run records a run of the command cmdText (at seq): failed (fail), still without a result
// (pending), or passed.
func (g *gatherer) run(cmdText string, fail *failure, pending bool, seq int) {
	key := commandText(cmdText, g.clip(160))
	if key == "" {
		return
	}
	c := g.byText[key]
	if c == nil {
		c = &command{text: key}
		g.byText[key] = c
		g.f.commands = append(g.f.commands, c)
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

// user takes a user message's request (its first sentence, unless an acknowledgement) and
// constraints.
func (g *gatherer) user(m *sessionio.Message) {
	f, clip := g.f, g.clip
	t := MessageText(m.Content)
	if strings.TrimSpace(t) == "" {
		return
	}
	ss := userSentences(t)
	if len(ss) == 0 {
		return
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
}

// bash records a user's ! command (a bash execution message) as a run.
func (g *gatherer) bash(m *sessionio.Message, seq int) {
	if m.ExcludeFromContext {
		return
	}
	var fail *failure
	switch {
	case m.Cancelled:
		fail = &failure{status: "cancelled", line: errorLineOf(m.Output, g.clip(200))}
	case m.ExitCode != nil && *m.ExitCode != 0:
		fail = &failure{status: "exit " + string(jsjson.AppendNumber(nil, *m.ExitCode)), line: errorLineOf(m.Output, g.clip(200))}
	}
	g.run(m.Command, fail, false, seq)
}

// assistant takes an assistant message's tool calls and, from its text, the last answer
// and the decisions.
func (g *gatherer) assistant(m *sessionio.Message, seq int) {
	var texts []string
	for _, b := range m.Content.Blocks {
		switch b.Type {
		case sessionio.BlockText:
			texts = append(texts, b.Text)
		case sessionio.BlockToolCall:
			g.toolCall(b, seq)
		}
	}
	t := oneLine(strings.Join(texts, " "))
	if t == "" {
		return
	}
	g.f.lastAnswer = clipWords(t, g.clip(300))
	for _, line := range strings.Split(strings.Join(texts, "\n"), "\n") {
		line = strings.TrimLeft(strings.TrimSpace(line), "#>*-0123456789. ")
		for _, s := range sentences(oneLine(line)) {
			// A decision is a whole sentence, not a heading or a list's lead-in.
			if len(strings.Fields(s)) >= 5 && !strings.HasSuffix(s, ":") && hasAny(s, decisionWords) {
				g.f.decisions = append(g.f.decisions, clipWords(s, g.clip(240)))
			}
		}
	}
}

// toolCall records a tool call: a bash call as a run, any other by what it did and whether
// it failed or is pending.
func (g *gatherer) toolCall(b sessionio.Block, seq int) {
	f, clip := g.f, g.clip
	r, ok := g.results[b.ID]
	if b.Name == "bash" {
		cmd := ToolArgument(b.Arguments, "command")
		if !ok {
			g.run(cmd, nil, true, seq)
			return
		}
		out := MessageText(r.Content)
		g.run(cmd, bashFailure(r.IsError, out, clip(200)), false, seq)
		return
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
		if _, seen := g.failedTools[tc]; !seen {
			g.failedOrder = append(g.failedOrder, tc)
		}
		g.failedTools[tc] = describeCall(b, clip(160)) + " failed: " + clipWords(firstNonEmptyLine(MessageText(r.Content)), clip(200))
	default:
		delete(g.failedTools, tc)
	}
}
