package summarize

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/jsjson"
)

// DefaultExtractiveBudget is the extractive summarizer's default size in tokens (the
// summary text; Pi's file lists are appended after it). It is below the mean extractive
// summary of the corpus before the budget existed (docs/quality.md).
const DefaultExtractiveBudget = 1500

// Extractive is a Summarizer that needs no model: it fills the summary sections with what
// an agent loses when its context is compacted, taken verbatim from the span: the user's
// requests and the rules they stated, every command that failed with its error line
// (and whether it passed later), the commands that passed, the tool calls still open,
// the decisions, and the latest request and answer.
//
// It classifies messages by what they are: a user question is a request, not a
// constraint; a command is blocked only if its last run failed (a non-zero exit, an
// error result, a cancelled or timed-out run), and a failure fixed later is reported as
// fixed, with its error. The summary stays within a token budget: when everything does
// not fit, the least important items go first (the previous summary's before the span's,
// the oldest before the newest; passed commands and decisions before requests, failures
// and constraints), and each section says how many items of each kind it left out. Its
// output is deterministic (same input, same bytes). It is the fallback when no endpoint
// is configured and the summarizer of policy experiments.
type Extractive struct {
	// Budget is the summary's size limit in tokens, as Counter counts them (default
	// DefaultExtractiveBudget). A request's MaxTokens lowers it further.
	Budget int
	// Counter counts tokens for Budget (nil: Pi's chars/4 estimate, EstimateText).
	Counter TextCounter
	// MaxItems, when set, also caps the items of one section (the most important kept).
	MaxItems int
	// MaxItemChars, when set, lowers the length limit of one item, in characters.
	MaxItemChars int
	// MaxChars, when set, also caps the whole summary, in characters.
	MaxChars int
}

// NewExtractive returns an extractive summarizer with the default budget.
func NewExtractive() *Extractive { return &Extractive{} }

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

// Summarize implements Summarizer. It makes no call and reports no token usage.
func (x *Extractive) Summarize(ctx context.Context, req Request) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, ctxError(err, 0)
	}
	budget := x.Budget
	if budget <= 0 {
		budget = DefaultExtractiveBudget
	}
	if req.MaxTokens > 0 && req.MaxTokens < budget {
		budget = req.MaxTokens
	}
	count := textCounter(x.Counter)
	clip := func(n int) int {
		if x.MaxItemChars > 0 && x.MaxItemChars < n {
			return x.MaxItemChars
		}
		return n
	}
	f := gather(req.Messages, clip)

	var titles []string
	switch req.Task {
	case TaskTurnPrefix:
		titles = []string{secOrigRequest, secEarly, secSuffix}
	default:
		titles = []string{secGoal, secConstraints, secProgress, secDone, secInProgress, secBlocked, secDecisions, secNext}
		if req.Task != TaskBranch {
			titles = append(titles, secCritical)
		}
	}
	items := f.items(titles)
	omitted := map[string]map[string]int{} // section -> kind -> count
	if req.PreviousSummary != "" {
		prev, prevOmitted := previousItems(req.PreviousSummary, f, titles)
		items = append(prev, items...)
		for sec, kinds := range prevOmitted {
			for k, n := range kinds {
				addOmitted(omitted, sec, k, n)
			}
		}
	}
	items = dedupe(items)
	for i := range items {
		items[i].cost = count(items[i].text) + 2
	}
	text := fit(titles, items, omitted, budget, x.MaxItems, count)
	if x.MaxChars > 0 && utf8.RuneCountInString(text) > x.MaxChars {
		text = clipChars(text, x.MaxChars)
	}
	return Result{Text: text}, nil
}

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

// omissionNote matches the note a section ends with when items were left out:
// "(left out for space: 12 requests, 1 constraint)", and the older "(6 earlier items
// omitted)".
var (
	omissionNote    = regexp.MustCompile(`^\(left out for space: (.+)\)$`)
	oldOmissionNote = regexp.MustCompile(`^\((\d+) earlier items omitted\)$`)
	omissionPart    = regexp.MustCompile(`^(\d+) (.+)$`)
)

func parseOmission(it string) (map[string]int, bool) {
	if m := oldOmissionNote.FindStringSubmatch(it); m != nil {
		n, _ := strconv.Atoi(m[1])
		return map[string]int{kOther: n}, true
	}
	m := omissionNote.FindStringSubmatch(it)
	if m == nil {
		return nil, false
	}
	out := map[string]int{}
	for _, part := range strings.Split(m[1], ", ") {
		pm := omissionPart.FindStringSubmatch(part)
		if pm == nil {
			return nil, false
		}
		n, _ := strconv.Atoi(pm[1])
		kind := kOther
		for k, names := range kindNames {
			if pm[2] == names[0] || pm[2] == names[1] {
				kind = k
			}
		}
		out[kind] += n
	}
	return out, true
}

func addOmitted(m map[string]map[string]int, sec, kind string, n int) {
	if m[sec] == nil {
		m[sec] = map[string]int{}
	}
	m[sec][kind] += n
}

// fit renders the sections with as many items as the budget allows: it drops the least
// important item (lowest priority, then oldest) until the text fits, and notes in each
// section how many items of each kind were left out.
func fit(titles []string, items []item, omitted map[string]map[string]int, budget, maxItems int, count func(string) int) string {
	// Drop order: lowest priority first, oldest first.
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if items[a].prio != items[b].prio {
			return items[a].prio - items[b].prio
		}
		return items[a].seq - items[b].seq
	})
	kept := make([]bool, len(items))
	for i := range kept {
		kept[i] = true
	}
	drop := func(i int) {
		kept[i] = false
		addOmitted(omitted, items[i].sec, items[i].kind, 1)
	}
	if maxItems > 0 {
		perSec := map[string]int{}
		for k := len(order) - 1; k >= 0; k-- { // most important first
			i := order[k]
			if perSec[items[i].sec]++; perSec[items[i].sec] > maxItems {
				drop(i)
			}
		}
	}
	size := 0
	for _, t := range titles {
		size += count(t) + 2
	}
	for i, it := range items {
		if kept[i] {
			size += it.cost
		}
	}
	notes := func() int {
		n := 0
		for sec, kinds := range omitted {
			if len(kinds) > 0 && slices.Contains(titles, sec) {
				n += count(omissionText(kinds)) + 2
			}
		}
		return n
	}
	for _, i := range order {
		if size+notes() <= budget {
			break
		}
		if kept[i] {
			drop(i)
			size -= items[i].cost
		}
	}
	return render(titles, items, kept, omitted)
}

func omissionText(kinds map[string]int) string {
	keys := make([]string, 0, len(kinds))
	for k := range kinds {
		keys = append(keys, k)
	}
	// Most important kinds first.
	rank := []string{kConstraint, kFailed, kRequest, kFixed, kToolError, kPending, kWork, kDecision, kPassed, kContext, kOther}
	slices.SortFunc(keys, func(a, b string) int { return slices.Index(rank, a) - slices.Index(rank, b) })
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		names := kindNames[k]
		parts = append(parts, plural(kinds[k], names[0], names[1]))
	}
	return "(left out for space: " + strings.Join(parts, ", ") + ")"
}

func render(titles []string, items []item, kept []bool, omitted map[string]map[string]int) string {
	var sb strings.Builder
	for i, t := range titles {
		if i > 0 {
			sb.WriteString("\n\n")
		}
		sb.WriteString(t)
		if t == secProgress {
			continue
		}
		n := 0
		line := func(s string) {
			n++
			sb.WriteString("\n")
			if t == secNext {
				fmt.Fprintf(&sb, "%d. %s", n, s)
			} else {
				sb.WriteString("- " + s)
			}
		}
		if kinds := omitted[t]; len(kinds) > 0 {
			line(omissionText(kinds))
		}
		for k, it := range items {
			if kept[k] && it.sec == t {
				line(it.text)
			}
		}
		if n == 0 {
			line("(none)")
		}
	}
	return sb.String()
}

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

func firstNonEmptyLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if t := oneLine(l); t != "" {
			return t
		}
	}
	return ""
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

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// oneLine collapses all whitespace runs to single spaces.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

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

// clipWords shortens s to at most n characters, at a word boundary when there is one in
// its second half, marking the cut with "…": a quoted start stays a verbatim prefix.
func clipWords(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)[:n-1]
	if i := strings.LastIndexByte(string(r), ' '); i > len(string(r))/2 {
		return strings.TrimRight(string(r)[:i], " ") + " …"
	}
	return string(r) + "…"
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
