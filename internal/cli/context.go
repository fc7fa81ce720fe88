package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"

	"github.com/compactor-dev/compactor/sessionio"
)

func init() {
	register(&Command{Name: "context", Summary: "print the context Pi builds for a session (--json: as pi-oracle context prints it)", Run: runContext})
}

// contextOutput mirrors `pi-oracle context`: leafId, pathIds and context are the fields
// that must equal Pi's; the rest is for people.
type contextOutput struct {
	File            string                 `json:"file"`
	Version         int                    `json:"version"`
	LeafID          *string                `json:"leafId"`
	PathIDs         []string               `json:"pathIds"`
	Context         contextJSON            `json:"context"`
	EntryCount      int                    `json:"entryCount"`
	SessionName     *string                `json:"sessionName"`
	Labels          map[string]string      `json:"labels"`
	MessageEntryIDs []string               `json:"messageEntryIds"`
	Diagnostics     []sessionio.Diagnostic `json:"diagnostics"`
}

type contextJSON struct {
	Messages      []json.RawMessage   `json:"messages"`
	ThinkingLevel string              `json:"thinkingLevel"`
	Model         *sessionio.ModelRef `json:"model"`
}

func runContext(ctx context.Context, env *Env) error {
	fs := newFlagSet(env, "context", "FILE [--json] [--leaf ID]",
		`Print the context the real Pi builds from a session file: the messages sent to the model
(after the latest compaction on the path), the thinking level and the model. With --leaf,
build it for another entry instead of the file's leaf (the last entry line).`)
	asJSON := fs.Bool("json", false, "print JSON (the same fields as pi-oracle context)")
	leaf := fs.String("leaf", "", "build the context for this entry id instead of the current leaf")
	args, err := fs.parse(env.Args)
	if err != nil {
		return err
	}
	file, err := oneFile(args)
	if err != nil {
		return err
	}
	s, err := sessionio.ReadFileWith(file, sessionio.Options{Light: true})
	if err != nil {
		return inputError(err)
	}
	out := contextOutput{
		File: file, Version: s.Version(), EntryCount: len(s.Entries), Labels: s.Labels(),
		Diagnostics: s.Diagnostics, PathIDs: []string{}, MessageEntryIDs: []string{},
		Context: contextJSON{Messages: []json.RawMessage{}, ThinkingLevel: "off"},
	}
	if out.Diagnostics == nil {
		out.Diagnostics = []sessionio.Diagnostic{}
	}
	if name := s.Name(); name != "" {
		out.SessionName = &name
	}
	if *leaf != "null" { // --leaf null: Pi's resetLeaf state, an empty context
		path, err := s.Path(*leaf)
		if err != nil && *leaf != "" {
			return usageErrorf("--leaf %s: %w", *leaf, err)
		}
		if err != nil {
			return inputError(err)
		}
		if len(path) > 0 {
			id := path[len(path)-1].ID
			out.LeafID = &id
		}
		for _, e := range path {
			out.PathIDs = append(out.PathIDs, e.ID)
		}
		c := sessionio.BuildContext(path)
		for _, m := range c.Messages {
			out.Context.Messages = append(out.Context.Messages, m.Raw)
		}
		out.Context.ThinkingLevel = c.ThinkingLevel
		out.Context.Model = c.Model
		if c.EntryIDs != nil {
			out.MessageEntryIDs = c.EntryIDs
		}
	}
	if !*asJSON {
		return printContextText(env, s, &out)
	}
	return writeContextJSON(env.Stdout, &out)
}

// writeContextJSON streams the output: the messages are written as the raw bytes read from
// the file (already validated while reading), not re-encoded.
func writeContextJSON(stdout io.Writer, out *contextOutput) error {
	w := bufio.NewWriterSize(stdout, 64<<10)
	msgs := out.Context.Messages
	out.Context.Messages = nil
	head, err := json.Marshal(out)
	if err != nil {
		return err
	}
	// head ends with ...,"context":{"messages":null,"thinkingLevel":...}...: splice the
	// messages in where the null is.
	const marker = `"context":{"messages":null`
	i := bytes.Index(head, []byte(marker))
	if i < 0 {
		return fmt.Errorf("context output: marker not found")
	}
	w.Write(head[:i])
	w.WriteString(`"context":{"messages":[`)
	for j, m := range msgs {
		if j > 0 {
			w.WriteByte(',')
		}
		w.Write(m)
	}
	w.WriteByte(']')
	w.Write(head[i+len(marker):])
	w.WriteByte('\n')
	return w.Flush()
}

func printContextText(env *Env, s *sessionio.Session, out *contextOutput) error {
	w := env.Stdout
	leaf := "(none)"
	if out.LeafID != nil {
		leaf = *out.LeafID
	}
	fmt.Fprintf(w, "%s: session %s, format v%d, %d entries, leaf %s\n", out.File, s.Header.ID, out.Version, out.EntryCount, leaf)
	if out.SessionName != nil {
		fmt.Fprintf(w, "name: %s\n", *out.SessionName)
	}
	model := "(none)"
	if out.Context.Model != nil {
		model = out.Context.Model.Provider + "/" + out.Context.Model.ModelID
	}
	fmt.Fprintf(w, "path: %d entries; context: %d messages; model %s; thinking %s\n",
		len(out.PathIDs), len(out.Context.Messages), model, out.Context.ThinkingLevel)
	roles := map[string]int{}
	var order []string
	for _, raw := range out.Context.Messages {
		var r struct {
			Role string `json:"role"`
		}
		_ = json.Unmarshal(raw, &r)
		if roles[r.Role] == 0 {
			order = append(order, r.Role)
		}
		roles[r.Role]++
	}
	sort.Strings(order)
	for _, r := range order {
		fmt.Fprintf(w, "  %-18s %d\n", r, roles[r])
	}
	for _, d := range out.Diagnostics {
		fmt.Fprintf(w, "warning: line %d: %s: %s\n", d.Line, d.Kind, d.Message)
	}
	fmt.Fprintln(w, "(use --json for the messages)")
	return nil
}
