package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/compactor-dev/compactor/sessionio/picontext"
	"io"
	"os"
	"sort"

	"github.com/compactor-dev/compactor/internal/cli/command"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
)

func init() {
	command.Register(&command.Command{Name: "context", Summary: "print the context Pi builds for a session (--json: as Pi's harness prints it)", Run: runContext})
}

// contextOutput mirrors `interop/pi/pi context`: leafId, pathIds and context are the fields
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
	fs := command.NewFlagSet(env, "context", "FILE [--json] [--leaf ID]",
		`Print the context the real Pi builds from a session file: the messages sent to the model
(after the latest compaction on the path), the thinking level and the model. With --leaf,
build it for another entry instead of the file's leaf (the last entry line).`)
	asJSON := fs.Bool("json", false, "print JSON (the same fields as Pi's harness prints: interop/pi)")
	var piv piFlags
	piVersionFlag(fs.FlagSet, &piv, env.Getenv)
	leaf := fs.String("leaf", "", "build the context for this entry id instead of the current leaf")
	var cks string
	checkpointFlag(fs.FlagSet, &cks, env)
	args, err := fs.ParseArgs(env.Args)
	if err != nil {
		return err
	}
	file, err := command.OneFile(args)
	if err != nil {
		return err
	}
	warning, err := piv.check()
	if err != nil {
		return err
	}
	warnTo(env.Stderr, warning)
	d, _ := pi.ParseRelease(piv.version)
	if err := sessionio.CheckLoads(file, d); err != nil {
		return inputError(err)
	}
	var t *sessionio.Tail
	if *leaf == "" {
		// The file's leaf: a tail read. It validates and indexes the whole file (pathIds,
		// entryCount, labels, sessionName and diagnostics are whole-file facts) but keeps no
		// message bytes: they are copied from the file to the output.
		// With a checkpoint of the file's history, only the lines after it are read.
		t, err = sessionio.ReadTailWith(file, sessionio.NeedContext|sessionio.NeedRoot|sessionio.NeedFile,
			sessionio.TailOptions{LeaveMessagesOnDisk: true, Checkpoints: checkpointsAt(cks)})
	} else {
		var s *sessionio.Session
		if s, err = sessionio.ReadFileWith(file, sessionio.Options{Light: true}); err == nil {
			if t, err = tailAt(s, *leaf); err != nil {
				return command.Usagef("--leaf %s: %w", *leaf, err)
			}
		}
	}
	if err != nil {
		return inputError(err)
	}
	out, msgs := newContextOutput(file, t, d)
	if !*asJSON {
		return printContextText(env, t.Header.ID, msgs, &out)
	}
	return writeContextJSON(env.Stdout, &out, msgs, t)
}

// newContextOutput is the context of t's path as Pi builds it under release d, and its
// messages.
func newContextOutput(file string, t *sessionio.Tail, d pi.Release) (contextOutput, []*sessionio.Message) {
	out := contextOutput{
		File: file, Version: t.Version(), EntryCount: t.EntryCount, Labels: t.Labels,
		Diagnostics: t.Diagnostics, PathIDs: []string{}, MessageEntryIDs: []string{},
		Context: contextJSON{Messages: []json.RawMessage{}, ThinkingLevel: "off"},
	}
	if out.Diagnostics == nil {
		out.Diagnostics = []sessionio.Diagnostic{}
	}
	if t.Name != "" {
		out.SessionName = &t.Name
	}
	var msgs []*sessionio.Message
	path := t.Path
	if len(path) > 0 {
		id := path[len(path)-1].ID
		out.LeafID = &id
	}
	for _, e := range path {
		out.PathIDs = append(out.PathIDs, e.ID)
	}
	c := picontext.Build(path, d)
	msgs = c.Messages
	out.Context.ThinkingLevel = c.ThinkingLevel
	out.Context.Model = c.Model
	if c.EntryIDs != nil {
		out.MessageEntryIDs = c.EntryIDs
	}
	return out, msgs
}

// writeContextJSON streams the output: the messages are written as the bytes of the file
// (validated while reading), never re-encoded: from memory, or copied from the file where
// the tail read left them. Pi only appends to a v3 file, so those bytes are still there; the
// file is checked to be the same and not shorter when they have been copied.
func writeContextJSON(stdout io.Writer, out *contextOutput, msgs []*sessionio.Message, t *sessionio.Tail) error {
	w := bufio.NewWriterSize(stdout, 64<<10)
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
	var f *os.File
	for j, m := range msgs {
		if j > 0 {
			w.WriteByte(',')
		}
		if m.Raw != nil || m.At.Len == 0 {
			w.Write(m.Raw)
			continue
		}
		if f == nil {
			if f, err = openSame(t); err != nil {
				return err
			}
			defer f.Close()
		}
		if m.ContentRaw != nil {
			// A Pi 1.x projection replaced the content: the message with the new one.
			raw := make([]byte, m.At.Len)
			if _, err := f.ReadAt(raw, m.At.Off); err != nil {
				return fmt.Errorf("%s: read a message: %w", t.File, err)
			}
			w.Write(picontext.ReplaceMember(raw, "content", m.ContentRaw))
			continue
		}
		if _, err := io.Copy(w, io.NewSectionReader(f, m.At.Off, m.At.Len)); err != nil {
			return fmt.Errorf("%s: copy a message: %w", t.File, err)
		}
	}
	if f != nil {
		if st, err := f.Stat(); err != nil || st.Size() < t.Size {
			return fmt.Errorf("%s: the file shrank while it was read", t.File)
		}
	}
	w.WriteByte(']')
	w.Write(head[i+len(marker):])
	w.WriteByte('\n')
	return w.Flush()
}

// checkpointFlag registers --checkpoints (context, plan).
func checkpointFlag(fs *flag.FlagSet, dir *string, env *Env) {
	fs.StringVar(dir, "checkpoints", sessionio.DefaultCheckpointDir(env.Getenv),
		`where checkpoints of sessions' history are kept, so that the next read of a session reads only what was appended (docs/performance.md); "off": none (env COMPACTOR_CHECKPOINTS; default ~/.cache/compactor/checkpoints)`)
}

// checkpointsAt is the checkpoint store of --checkpoints (nil: none).
func checkpointsAt(dir string) *sessionio.Checkpoints {
	if dir == "" || dir == "off" {
		return nil
	}
	return &sessionio.Checkpoints{Dir: dir}
}

// openSame opens the file a tail read read, checking that it is still that file (not
// replaced by another one with the same name) and not shorter.
func openSame(t *sessionio.Tail) (*os.File, error) {
	f, err := os.Open(t.File)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err == nil && (st.Size() < t.Size || t.Info != nil && !os.SameFile(st, t.Info)) {
		err = errors.New("the file was replaced or shrank while it was read")
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", t.File, err)
	}
	return f, nil
}

// tailAt is the Tail of a full read for another leaf than the file's (--leaf; "null" is Pi's
// resetLeaf state: no path).
func tailAt(s *sessionio.Session, leaf string) (*sessionio.Tail, error) {
	t, err := sessionio.TailOf(s, "--leaf")
	if err != nil || leaf == "" {
		return t, err
	}
	t.Path = nil
	if leaf != "null" {
		if t.Path, err = s.Path(leaf); err != nil {
			return nil, err
		}
	}
	return t, nil
}

func printContextText(env *Env, sessionID string, msgs []*sessionio.Message, out *contextOutput) error {
	w := env.Stdout
	leaf := "(none)"
	if out.LeafID != nil {
		leaf = *out.LeafID
	}
	fmt.Fprintf(w, "%s: session %s, format v%d, %d entries, leaf %s\n", out.File, sessionID, out.Version, out.EntryCount, leaf)
	if out.SessionName != nil {
		fmt.Fprintf(w, "name: %s\n", *out.SessionName)
	}
	model := "(none)"
	if out.Context.Model != nil {
		model = out.Context.Model.Provider + "/" + out.Context.Model.ModelID
	}
	fmt.Fprintf(w, "path: %d entries; context: %d messages; model %s; thinking %s\n",
		len(out.PathIDs), len(msgs), model, out.Context.ThinkingLevel)
	count := map[string]int{}
	var order []string
	for _, m := range msgs {
		r := m.Role
		if count[r] == 0 {
			order = append(order, r)
		}
		count[r]++
	}
	sort.Strings(order)
	for _, r := range order {
		fmt.Fprintf(w, "  %-18s %d\n", r, count[r])
	}
	for _, d := range out.Diagnostics {
		fmt.Fprintf(w, "warning: line %d: %s: %s\n", d.Line, d.Kind, d.Message)
	}
	fmt.Fprintln(w, "(use --json for the messages)")
	return nil
}
