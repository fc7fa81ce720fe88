package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"github.com/compactor-dev/compactor/sessionio/picontext"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/internal/pigolden"
	"github.com/compactor-dev/compactor/outcome"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
)

// TestAppendsLoadAsPlannedInEveryPi compacts a copy of every v3 corpus file under each Pi of
// the matrix (keepRecentTokens 1000, with a model over HTTP so that the entry carries a
// usage), and where a compaction was written checks what the session now gives under that
// Pi's rules: the compaction is the leaf; the context is its checkpoint (from 0.86, when the
// session has system messages), its summary, and exactly the kept messages the plan
// promised. With COMPACTOR_INTEROP=1 (make interop, make interop-releases) the real Pi of
// that version is asked too, for every file in one process (interop/pi/appends.mjs): it
// builds the same context, and its own SessionManager, asked to append the same compaction,
// writes the same line byte for byte.
func TestAppendsLoadAsPlannedInEveryPi(t *testing.T) {
	t.Parallel()
	versions, err := pigolden.Versions()
	if err != nil {
		t.Fatal(err)
	}
	files, err := pigolden.CorpusFiles()
	if err != nil {
		t.Fatal(err)
	}
	llm := fakellm.Start(t)
	for _, v := range versions {
		d, err := pi.ParseRelease(v)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(v, func(t *testing.T) {
			dir := t.TempDir()
			var written []*appended
			for _, f := range files {
				if strings.HasPrefix(f.Rel, "bad") || strings.HasPrefix(f.Rel, "pi-repo") || strings.Contains(f.Rel, "/x-") {
					continue // unreadable, migrated (v1) or loader edge cases: nothing is appended to them
				}
				t.Run(f.Name, func(t *testing.T) {
					if a := appendLoadsAsPlanned(t, f.Path, filepath.Join(dir, f.Name+".jsonl"), d, openAI(t, llm.URL(), nil)); a != nil {
						written = append(written, a)
					}
				})
			}
			if len(written) < 20 {
				t.Errorf("Pi %s: only %d compactions written; the corpus should give more", v, len(written))
			}
			if liveFor(d) {
				appendsLoadInPi(t, d, dir, written)
				t.Logf("Pi %s: %d compactions written and checked, by the real Pi %s too", v, len(written), v)
			} else {
				t.Logf("Pi %s: %d compactions written and checked", v, len(written))
			}
		})
	}
}

// appended is a compaction compactor wrote, and the context it gives under compactor's rules.
type appended struct {
	name, file, leaf string
	ctx              *picontext.Context
}

// appendLoadsAsPlanned compacts a copy (at dst) of src under Pi d and checks the session it
// leaves; it returns what was written, nil when nothing was.
func appendLoadsAsPlanned(t *testing.T, src, dst string, d pi.Release, sum summarize.Summarizer) *appended {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	file := dst
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := sessionio.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	oldPath, _ := before.Path("")
	eng, err := New(sum, Settings{Pi: d.String(), KeepRecentTokens: 1000})
	if err != nil {
		t.Fatal(err)
	}
	res, err := eng.Compact(context.Background(), Request{File: file})
	var guard *GuardError
	if errors.As(err, &guard) {
		// Refused before anything was written: 13-release-boundaries ends in answers whose
		// usage is all zeros, which a Pi before 0.80 (ZeroUsageSkipped) takes as a context
		// of 0 tokens, which no compaction makes smaller.
		if after, _ := os.ReadFile(file); int64(len(after)) != before.Size {
			t.Fatalf("refused (%v) but the file changed", err)
		}
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != outcome.Done {
		if after, _ := os.ReadFile(file); int64(len(after)) != before.Size {
			t.Fatalf("%s (%s) but the file changed", res.Outcome, res.Reason)
		}
		return nil
	}
	s, err := sessionio.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	leaf := s.Get(s.LeafID())
	if leaf.ID != res.EntryID || leaf.Type != sessionio.TypeCompaction || leaf.ParentID != before.LeafID() {
		t.Fatalf("leaf %s (%s), want the new compaction %s after %s", leaf.ID, leaf.Type, res.EntryID, before.LeafID())
	}
	if d.Has(pi.SummaryUsage) != (leaf.Usage != nil) {
		t.Errorf("Pi %s: usage %s (Pi writes the summary's usage from 0.81, SummaryUsage)", d, leaf.Usage)
	}
	path, _ := s.Path("")
	c := picontext.Build(path, d)
	i := 0
	if leaf.SystemMessage != nil {
		if c.Messages[0].Role != sessionio.RoleSystem {
			t.Fatalf("context starts with %s, not the compaction's checkpoint", c.Messages[0].Role)
		}
		i = 1
	}
	if c.Messages[i].Role != sessionio.RoleCompactionSummary || c.Messages[i].Summary != leaf.Summary {
		t.Fatalf("context does not start with the summary")
	}
	want := promisedKept(oldPath, res.FirstKeptEntryID, d)
	if got := c.EntryIDs[i+1:]; !reflect.DeepEqual(got, want) {
		t.Fatalf("kept messages %v, plan promised %v", got, want)
	}
	return &appended{name: filepath.Base(src), file: file, leaf: leaf.ID, ctx: c}
}

// appendsLoadInPi asks the real Pi d about every file compactor wrote a compaction to, in one
// process (interop/pi/appends.mjs): it must build the context compactor promised, with the
// compaction as its leaf, and its own SessionManager must write the same line.
func appendsLoadInPi(t *testing.T, d pi.Release, dir string, written []*appended) {
	t.Helper()
	list := make([]string, len(written))
	for i, a := range written {
		list[i] = a.file
	}
	b, _ := json.Marshal(list)
	listFile := filepath.Join(dir, "appends.json")
	if err := os.WriteFile(listFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(piHarness(t), "exec", "interop/pi/appends.mjs", listFile)
	cmd.Env, cmd.Dir = append(os.Environ(), "PI_VERSION="+d.String()), repoRootDir(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("interop/pi/appends.mjs: %v\n%s", err, stderr.Bytes())
	}
	var pis []struct {
		File            string            `json:"file"`
		Error           string            `json:"error"`
		LeafID          string            `json:"leafId"`
		MessageEntryIDs []string          `json:"messageEntryIds"`
		Messages        []json.RawMessage `json:"messages"`
		Writes          struct {
			Same     bool
			Ours, Pi string
		} `json:"writes"`
	}
	if err := json.Unmarshal(out, &pis); err != nil || len(pis) != len(written) {
		t.Fatalf("interop/pi/appends.mjs: %d answers for %d files (%v)", len(pis), len(written), err)
	}
	for i, pi := range pis {
		a := written[i]
		switch {
		case pi.Error != "":
			t.Errorf("%s: Pi %s: %s", a.name, d, pi.Error)
			continue
		case pi.LeafID != a.leaf || !reflect.DeepEqual(pi.MessageEntryIDs, a.ctx.EntryIDs):
			t.Errorf("%s: Pi %s: leaf %s, messages from %v; compactor promised %s, %v", a.name, d, pi.LeafID, pi.MessageEntryIDs, a.leaf, a.ctx.EntryIDs)
		case !pi.Writes.Same:
			t.Errorf("%s: Pi %s writes another line for the same compaction:\n Pi  %.600s\n ours %.600s", a.name, d, pi.Writes.Pi, pi.Writes.Ours)
		}
		for k, m := range pi.Messages {
			if k < len(a.ctx.Messages) && !jsonEqual(m, a.ctx.Messages[k].Raw) {
				t.Errorf("%s: Pi %s: context message %d differs:\n Pi  %.300s\n ours %.300s", a.name, d, k, m, a.ctx.Messages[k].Raw)
				break
			}
		}
	}
}

// promisedKept is what the plan promised to keep: the ids of the context's messages from
// the first kept entry on, in path order, as the compaction's kept range gives them to Pi d:
// system messages aside from 0.86 (SystemMessages: the new compaction's checkpoint replaces
// them), an older compaction's messages only where Pi sends them again (ResentSummary), and
// from 0.87 (ContextEdits) with the context edits applied.
func promisedKept(path []*sessionio.Entry, firstKept string, d pi.Release) []string {
	at := -1
	for i, e := range path {
		if e.ID == firstKept {
			at = i
		}
	}
	edited := map[int][]*sessionio.Message{}
	if d.Has(pi.ContextEdits) {
		for _, pe := range picontext.Project(path, d).Entries {
			edited[pe.Index] = pe.Messages
		}
	}
	var out []string
	for i := max(at, 0); i < len(path); i++ {
		e := path[i]
		if e.Type == sessionio.TypeCompaction && !d.Has(pi.ResentSummary) ||
			d.Has(pi.SystemMessages) && e.IsMessage(sessionio.RoleSystem) {
			continue
		}
		msgs := picontext.MessagesOf(e, d)
		if m, ok := edited[i]; ok {
			msgs = m
		} else if d.Has(pi.ContextEdits) {
			msgs = nil // outside the projection: before the latest compaction's kept range
		}
		for range msgs {
			out = append(out, e.ID)
		}
	}
	return out
}

// liveFor reports whether the real Pi of dialect d is asked (make interop runs the tests once
// per Pi of the matrix, PI_VERSION naming it; unset: every Pi).
func liveFor(d pi.Release) bool {
	v := os.Getenv("PI_VERSION")
	return interop && (v == "" || v == d.String())
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(x, y)
}

func repoRootDir(t *testing.T) string {
	t.Helper()
	r, err := pigolden.Root()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestNewerPisFileRefused: a session that holds what only a newer Pi writes than the release a
// job follows is skipped, naming the entry and the release it comes from, and nothing is
// written: a system message or a usage entry before 0.86 (SystemMessages), a context edit
// before 0.87 (ContextEdits). The release that writes them works the same file.
func TestNewerPisFileRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		file, pi, want string // want: "" when the job goes on
	}{
		{"n01-system-messages-s", "0.85.1", "a system message at line "},
		{"n03-usage-entries-s", "0.85.1", "comes from Pi 0.86.0 or later; compactor follows Pi 0.85.1 here"},
		{"n01-system-messages-s", "0.86.1", ""},
		{"n02-context-edits-s", "0.86.1", "a context_edit entry at line "},
		{"n02-context-edits-s", "0.86.1", "comes from Pi 0.87.0 or later; compactor follows Pi 0.86.1 here"},
		{"n04-retain-none-s", "0.86.1", "a retain-none compaction at line "},
		{"n02-context-edits-s", "0.87.0", ""},
	} {
		file := copyFile(t, "../testdata/corpus/gen-1.6.0/"+c.file+".jsonl")
		before, _ := os.ReadFile(file)
		eng, err := New(summarize.NewExtractive(), Settings{Pi: c.pi, KeepRecentTokens: 1000})
		if err != nil {
			t.Fatal(err)
		}
		res, err := eng.Compact(context.Background(), Request{File: file})
		if err != nil {
			t.Fatalf("%s under Pi %s: %v", c.file, c.pi, err)
		}
		newer := res.Outcome == outcome.Skipped && strings.Contains(res.Reason, "written by a newer Pi than this store follows")
		switch {
		case c.want == "" && newer:
			t.Errorf("%s under Pi %s: refused (%s), though that release writes it", c.file, c.pi, res.Reason)
		case c.want != "" && (!newer || !strings.Contains(res.Reason, c.want)):
			t.Errorf("%s under Pi %s: %s (%s), want a skip saying %q", c.file, c.pi, res.Outcome, res.Reason, c.want)
		case c.want != "":
			if after, _ := os.ReadFile(file); !bytes.Equal(after, before) {
				t.Errorf("%s under Pi %s: skipped, but the file changed", c.file, c.pi)
			}
		}
	}
}
