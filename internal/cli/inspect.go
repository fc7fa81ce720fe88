package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/compactor-dev/compactor/sessionio/picontext"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/internal/cli/command"
	"github.com/compactor-dev/compactor/sessionio"
)

func init() {
	command.Register(&command.Command{Name: "inspect", Summary: "show a session's tree, tokens, budget and where the cut falls", Run: runInspect})
}

func runInspect(ctx context.Context, env *Env) error {
	fs := command.NewFlagSet(env, "inspect", "FILE [--json] [--around N] [--policy pi|turn|nearest] [--counter tiktoken|estimate] [--keep-recent-tokens N] [--reserve-tokens N] [--context-window N] [--leaf ID] [--path-only]",
		`Show a session for a person: the tree of entries (branches indented, labels, compactions,
the current path marked with *), each entry's tokens, the context's size against the
model's budget, and where a compaction would cut and why. Path entries carry a column:
S summarized, P turn prefix (summarized separately), K kept verbatim, - before the range.
--around N shows only the current path near the range start and the cut (N entries on
each side). --json prints the plan and the entries as JSON (docs/json-output.md).

The context's size is Pi's measure (see compactor plan --help): the usage the last answer
reported plus the counts of the messages after it; the per-entry tokens are counted one by
one, so they need not add up to it.`)
	f := addPlanFlags(fs.FlagSet, env.Getenv)
	pathOnly := fs.Bool("path-only", false, "show only the current path, not the other branches")
	around := fs.Int("around", -1, "show only the current path's entries within N of the range start and the cut")
	asJSON := fs.Bool("json", false, "print the plan and the entries as JSON")
	args, err := fs.ParseArgs(env.Args)
	if err != nil {
		return err
	}
	file, err := command.OneFile(args)
	if err != nil {
		return err
	}
	if *around < -1 {
		return command.Usagef("--around %d: must not be negative", *around)
	}
	r, err := f.run(file, env.Stderr)
	if err != nil {
		return err
	}
	in := newInspector(r)
	var rows []inspectRow
	switch {
	case *around >= 0:
		rows = in.around(*around)
	case *pathOnly:
		for _, e := range r.Path {
			rows = append(rows, inspectRow{entry: e})
		}
	default:
		s := r.Session
		for _, e := range s.Entries {
			if s.Get(e.ID) != e || !isRoot(s, e) {
				continue
			}
			rows = in.walk(rows, e, 0)
		}
	}
	if *asJSON {
		return in.writeJSON(env.Stdout, rows)
	}
	w := env.Stdout
	s := r.Session
	fmt.Fprintf(w, "session %s: version %d, id %s, %d entries", r.File, s.Version(), s.Header.ID, len(s.Entries))
	if n := s.Name(); n != "" {
		fmt.Fprintf(w, ", name %q", n)
	}
	fmt.Fprintln(w)
	for _, d := range s.Diagnostics {
		fmt.Fprintf(w, "  note: line %d %s: %s\n", d.Line, d.Kind, d.Message)
	}
	fmt.Fprint(w, r.summary())
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Tree (* on the current path; tokens by %s):\n", r.Counter.Name())
	for _, row := range rows {
		in.print(w, row)
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, cutpoint.Explain(r.Path, r.Plan, r.Settings, r.Counter))
	return nil
}

func isRoot(s *sessionio.Session, e *sessionio.Entry) bool {
	return e.ParentID == "" || e.ParentID == e.ID || s.Get(e.ParentID) == nil
}

type inspector struct {
	r      *planRun
	onPath map[*sessionio.Entry]int // entry -> index on the path
	status map[int]byte             // path index -> S, P, K or -
	labels map[string]string
}

func newInspector(r *planRun) *inspector {
	in := &inspector{r: r, onPath: map[*sessionio.Entry]int{}, status: map[int]byte{}, labels: r.Session.Labels()}
	for i, e := range r.Path {
		in.onPath[e] = i
	}
	p := r.Plan
	if p.Prepared {
		for i := range r.Path {
			switch {
			case i < p.BoundaryStartIndex:
				in.status[i] = '-'
			case i >= p.FirstKeptEntryIndex:
				in.status[i] = 'K'
			case p.IsSplitTurn && i >= p.TurnStartIndex:
				in.status[i] = 'P'
			default:
				in.status[i] = 'S'
			}
		}
	}
	return in
}

// inspectRow is one line of the tree: an entry at a depth, or (entry nil) a fork header or
// a gap of skipped entries.
type inspectRow struct {
	entry *sessionio.Entry
	depth int
	text  string // for a header or a gap
}

// walk adds e and its descendants: a chain of single children stays at one depth, each
// child of a fork is indented one level further.
func (in *inspector) walk(rows []inspectRow, e *sessionio.Entry, depth int) []inspectRow {
	s := in.r.Session
	for e != nil {
		rows = append(rows, inspectRow{entry: e, depth: depth})
		var kids []*sessionio.Entry
		for _, c := range s.Children(e.ID) {
			if s.Get(c.ID) == c && c.ID != e.ID {
				kids = append(kids, c)
			}
		}
		if len(kids) == 1 {
			e = kids[0]
			continue
		}
		for k, c := range kids {
			rows = append(rows, inspectRow{depth: depth, text: fmt.Sprintf("+-- branch %d of %d from %s", k+1, len(kids), e.ID)})
			rows = in.walk(rows, c, depth+1)
		}
		return rows
	}
	return rows
}

// around is the current path near the places that matter: the range start, the split
// turn's start and the cut, n entries on each side; the rest is one gap line each.
func (in *inspector) around(n int) []inspectRow {
	path, p := in.r.Path, in.r.Plan
	show := make([]bool, len(path))
	mark := func(i int) {
		for j := max(0, i-n); j <= i+n && j < len(path); j++ {
			show[j] = true
		}
	}
	if p.Prepared {
		mark(p.BoundaryStartIndex)
		mark(p.FirstKeptEntryIndex)
		if p.IsSplitTurn && p.TurnStartIndex >= 0 {
			mark(p.TurnStartIndex)
		}
	} else if len(path) > 0 {
		mark(len(path) - 1) // nothing to plan: the leaf, where the reason is
	}
	var rows []inspectRow
	for i := 0; i < len(path); {
		if show[i] {
			rows = append(rows, inspectRow{entry: path[i]})
			i++
			continue
		}
		j := i
		for j < len(path) && !show[j] {
			j++
		}
		rows = append(rows, inspectRow{text: fmt.Sprintf("... %s (indices %d-%d) ...", command.Plural(j-i, "entry", "entries"), i, j-1)})
		i = j
	}
	return rows
}

func (in *inspector) print(w io.Writer, row inspectRow) {
	if row.entry == nil {
		fmt.Fprintf(w, "%s  %s\n", strings.Repeat("    ", row.depth), row.text)
		return
	}
	in.line(w, row.entry, row.depth)
}

func (in *inspector) line(w io.Writer, e *sessionio.Entry, depth int) {
	p := in.r.Plan
	mark, status := " ", byte(' ')
	if i, ok := in.onPath[e]; ok {
		mark = "*"
		if st, ok := in.status[i]; ok {
			status = st
		}
		if p.Prepared {
			if i == p.BoundaryStartIndex && i > 0 {
				fmt.Fprintf(w, "%s  ---- range start (the previous compaction kept from here) ----\n", strings.Repeat("    ", depth))
			}
			if p.IsSplitTurn && i == p.TurnStartIndex && p.TurnStartIndex < p.FirstKeptEntryIndex {
				fmt.Fprintf(w, "%s  ---- split turn starts: prefix summarized on its own ----\n", strings.Repeat("    ", depth))
			}
			if i == p.FirstKeptEntryIndex {
				if len(p.MessagesToSummarize)+len(p.TurnPrefix) == 0 {
					fmt.Fprintf(w, "%s  ==== no cut (%s): nothing to summarize, everything below is kept ====\n", strings.Repeat("    ", depth), p.Policy)
				} else {
					fmt.Fprintf(w, "%s  ==== CUT (%s): summarized above, kept below ====\n", strings.Repeat("    ", depth), p.Policy)
				}
			}
		}
	}
	tok := ""
	if m := picontext.AsMessage(e); m != nil {
		tok = fmt.Sprintf("%7d", in.r.Counter.Count(m))
	}
	kind := e.Type
	if e.Type == sessionio.TypeMessage && e.Message != nil {
		kind = e.Message.Role
	}
	label := ""
	if l, ok := in.labels[e.ID]; ok {
		label = fmt.Sprintf(" [label %q]", l)
	}
	fmt.Fprintf(w, "%s%s %c %-10s %-22s %7s  %s%s\n", strings.Repeat("    ", depth), mark, status, e.ID, kind, tok, preview(e), label)
}

// preview is a one-line description of an entry.
func preview(e *sessionio.Entry) string {
	switch e.Type {
	case sessionio.TypeMessage:
		m := e.Message
		if m == nil {
			return "(unreadable message)"
		}
		var parts []string
		if t := contentText(m.Content); t != "" {
			parts = append(parts, quote(t))
		}
		switch m.Role {
		case sessionio.RoleAssistant:
			for _, c := range m.ToolCalls() {
				parts = append(parts, "call "+c.Name+"("+c.ID+")")
			}
			if m.StopReason == "error" || m.StopReason == "aborted" {
				parts = append(parts, "["+m.StopReason+"]")
			}
		case sessionio.RoleToolResult:
			parts = append([]string{"result of " + m.ToolName + "(" + m.ToolCallID + ")"}, parts...)
		case sessionio.RoleBashExecution:
			parts = append(parts, "$ "+quote(m.Command))
		}
		return strings.Join(parts, " ")
	case sessionio.TypeCompaction:
		return fmt.Sprintf("compaction: keeps from %s, tokensBefore %.0f", e.FirstKeptEntryID, e.TokensBefore)
	case sessionio.TypeBranchSummary:
		return "branch summary from " + e.FromID + " " + quote(e.Summary)
	case sessionio.TypeModelChange:
		return e.Provider + "/" + e.ModelID
	case sessionio.TypeThinkingLevelChange:
		return e.ThinkingLevel
	case sessionio.TypeLabel:
		if e.Label == "" {
			return "clears the label of " + e.TargetID
		}
		return fmt.Sprintf("labels %s %q", e.TargetID, e.Label)
	case sessionio.TypeSessionInfo:
		return fmt.Sprintf("name %q", e.Name)
	case sessionio.TypeCustom, sessionio.TypeCustomMessage:
		return e.CustomType
	}
	return ""
}

func contentText(c sessionio.Content) string {
	if c.IsString {
		return c.Text
	}
	for _, b := range c.Blocks {
		if b.Type == sessionio.BlockText && b.Text != "" {
			return b.Text
		}
	}
	return ""
}

func quote(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	const max = 48
	if utf8.RuneCountInString(s) > max {
		s = string([]rune(s)[:max]) + "..."
	}
	return fmt.Sprintf("%q", s)
}

// inspectJSON is `compactor inspect --json` (docs/json-output.md).
type inspectJSON struct {
	File        string                 `json:"file"`
	SessionID   string                 `json:"sessionId"`
	Version     int                    `json:"version"`
	EntryCount  int                    `json:"entryCount"`
	Name        *string                `json:"name"`
	Diagnostics []sessionio.Diagnostic `json:"diagnostics"`
	// Plan is the document `compactor plan --json` prints for the same flags.
	Plan    json.RawMessage `json:"plan"`
	Context contextJSONDoc  `json:"context"`
	// Entries are the tree's entries in the order shown (with --around, the current
	// path's entries near the range start and the cut).
	Entries     []inspectEntryJSON `json:"entries"`
	Explanation string             `json:"explanation"`
}

// contextJSONDoc splits the context's tokens as Pi's formula does (see plan --help).
type contextJSONDoc struct {
	Tokens int `json:"tokens"`
	// ReportedUsage is the usage the last answer (ReportedBy, an entry id, null when there
	// is none) reported; Counted the counter's count of the CountedMessages after it.
	ReportedUsage   int     `json:"reportedUsage"`
	ReportedBy      *string `json:"reportedBy"`
	Counted         int     `json:"counted"`
	CountedMessages int     `json:"countedMessages"`
	// ReportedBeforeCompaction is the compaction that came after that answer (null when
	// none did): the size is then the one from before it, as Pi computes it too.
	ReportedBeforeCompaction *string `json:"reportedBeforeCompaction"`
}

type inspectEntryJSON struct {
	ID       string  `json:"id"`
	ParentID *string `json:"parentId"`
	Type     string  `json:"type"`
	Role     string  `json:"role,omitempty"`
	// Tokens is the counter's count of the entry's message (null when it has none).
	Tokens *int `json:"tokens"`
	// PathIndex is the entry's index on the current path (null when it is not on it).
	PathIndex *int `json:"pathIndex"`
	// Status on the path: summarized, prefix, kept, before-range ("" off the path or
	// without a plan).
	Status  string `json:"status,omitempty"`
	Label   string `json:"label,omitempty"`
	Preview string `json:"preview"`
	Depth   int    `json:"depth"`
}

func (in *inspector) writeJSON(w io.Writer, rows []inspectRow) error {
	r := in.r
	s := r.Session
	plan, err := r.json()
	if err != nil {
		return err
	}
	doc := inspectJSON{File: r.File, SessionID: s.Header.ID, Version: s.Version(), EntryCount: len(s.Entries),
		Diagnostics: s.Diagnostics, Plan: plan, Entries: []inspectEntryJSON{},
		Explanation: cutpoint.Explain(r.Path, r.Plan, r.Settings, r.Counter)}
	if doc.Diagnostics == nil {
		doc.Diagnostics = []sessionio.Diagnostic{}
	}
	if n := s.Name(); n != "" {
		doc.Name = &n
	}
	cp := splitContext(r.Path, r.Release, r.Counter)
	doc.Context = contextJSONDoc{Tokens: r.Plan.TokensBefore, ReportedUsage: cp.usage, Counted: cp.counted, CountedMessages: cp.nCounted}
	if cp.usageFrom != "" {
		doc.Context.ReportedBy = &cp.usageFrom
	}
	if cp.before != "" {
		doc.Context.ReportedBeforeCompaction = &cp.before
	}
	status := map[byte]string{'S': "summarized", 'P': "prefix", 'K': "kept", '-': "before-range"}
	for _, row := range rows {
		e := row.entry
		if e == nil {
			continue
		}
		je := inspectEntryJSON{ID: e.ID, Type: e.Type, Label: in.labels[e.ID], Preview: preview(e), Depth: row.depth}
		if e.ParentID != "" {
			pid := e.ParentID
			je.ParentID = &pid
		}
		if e.Type == sessionio.TypeMessage && e.Message != nil {
			je.Role = e.Message.Role
		}
		if m := picontext.AsMessage(e); m != nil {
			n := r.Counter.Count(m)
			je.Tokens = &n
		}
		if i, ok := in.onPath[e]; ok {
			je.PathIndex = &i
			je.Status = status[in.status[i]]
		}
		doc.Entries = append(doc.Entries, je)
	}
	return command.WriteJSON(w, doc)
}
