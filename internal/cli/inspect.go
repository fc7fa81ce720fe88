package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/sessionio"
)

func init() {
	register(&Command{Name: "inspect", Summary: "show a session's tree, tokens, budget and where the cut falls", Run: runInspect})
}

func runInspect(ctx context.Context, env *Env) error {
	fs := newFlagSet(env, "inspect", "compactor inspect FILE [--policy pi|turn|nearest] [--counter tiktoken|estimate] [--keep-recent-tokens N] [--reserve-tokens N] [--context-window N] [--leaf ID] [--path-only]",
		`Show a session for a person: the tree of entries (branches indented, labels, compactions,
the current path marked with *), each entry's tokens, the context's size against the
model's budget, and where a compaction would cut and why. Path entries carry a column:
S summarized, P turn prefix (summarized separately), K kept verbatim, - before the range.`)
	f := addPlanFlags(fs)
	pathOnly := fs.Bool("path-only", false, "show only the current path, not the other branches")
	args, err := parseFlags(fs, env.Args)
	if err != nil {
		return err
	}
	if len(args) != 1 {
		return usageErrorf("expected one session FILE, got %d arguments (see --help)", len(args))
	}
	r, err := f.run(args[0])
	if err != nil {
		return err
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

	in := newInspector(r)
	fmt.Fprintf(w, "Tree (* on the current path; tokens by %s):\n", r.Counter.Name())
	if *pathOnly {
		for _, e := range r.Path {
			in.line(w, e, 0)
		}
	} else {
		for _, e := range s.Entries {
			if s.Get(e.ID) != e || !isRoot(s, e) {
				continue
			}
			in.walk(w, e, 0)
		}
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

// walk prints e and its descendants: a chain of single children stays at one depth, each
// child of a fork is indented one level further.
func (in *inspector) walk(w io.Writer, e *sessionio.Entry, depth int) {
	s := in.r.Session
	for e != nil {
		in.line(w, e, depth)
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
			fmt.Fprintf(w, "%s  +-- branch %d of %d from %s\n", strings.Repeat("    ", depth), k+1, len(kids), e.ID)
			in.walk(w, c, depth+1)
		}
		return
	}
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
	if m := sessionio.AsMessage(e); m != nil {
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
