package liveappend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/picontext"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/pigolden"
)

func TestMain(m *testing.M) {
	if os.Getenv(piWriterEnv) != "" {
		runPiWriter()
		os.Exit(0)
	}
	// Reproducible appends: a fixed clock and a counter for ids.
	fixed := time.Date(2026, 1, 2, 3, 4, 5, 678e6, time.UTC)
	now = func() time.Time { return fixed }
	var n atomic.Uint32
	randomID = func() string { return fmt.Sprintf("c0%06x", n.Add(1)) }
	os.Exit(m.Run())
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "s.jsonl")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

var ctxb = context.Background()

func TestAppendRefusesAndWritesNothing(t *testing.T) {
	t.Parallel()
	base := hdr + "\n" + user("a", "", "hi") + "\n" + asst("b", "a", "yo") + "\n"
	comp := NewCompaction{Summary: "S", FirstKeptEntryID: "a", TokensBefore: 10}
	cases := []struct {
		name    string
		content string
		mutate  func(path string) // after planning
		c       NewCompaction
		want    error
	}{
		{"file grew", base, func(p string) { appendRaw(t, p, user("c", "b", "more")+"\n") }, comp, ErrChanged},
		{"leaf moved, same size", base, func(p string) {
			// Same bytes count, different leaf: swap the last line for one with another id.
			os.WriteFile(p, []byte(strings.Replace(base, `"id":"b"`, `"id":"z"`, 1)), 0o644)
		}, comp, ErrChanged},
		{"not v3", strings.Replace(base, `"version":3`, `"version":2`, 1), nil, comp, ErrNotV3},
		{"no assistant", hdr + "\n" + user("a", "", "hi") + "\n", nil, comp, ErrNoAssistant},
		{"already compacted", base + `{"type":"compaction","id":"k","parentId":"b","timestamp":"2025-01-01T00:00:09.000Z","summary":"x","firstKeptEntryId":"a","tokensBefore":1}` + "\n", nil, comp, ErrAlreadyCompacted},
		{"empty summary", base, nil, NewCompaction{FirstKeptEntryID: "a"}, ErrInvalidEntry},
		{"firstKept off path", base, nil, NewCompaction{Summary: "S", FirstKeptEntryID: "nope"}, ErrInvalidEntry},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := writeTemp(t, tc.content)
			s, err := sessionio.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			exp := ExpectOf(s)
			if tc.mutate != nil {
				tc.mutate(p)
			}
			before, _ := os.ReadFile(p)
			_, err = Compaction(ctxb, sessionio.Named(p), exp, tc.c)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), p) {
				t.Errorf("error does not name the file: %v", err)
			}
			after, _ := os.ReadFile(p)
			if !bytes.Equal(before, after) {
				t.Errorf("file changed although the append was refused")
			}
		})
	}
}

func TestAppendToolResultCutRefused(t *testing.T) {
	t.Parallel()
	content := hdr + "\n" + user("a", "", "hi") + "\n" +
		`{"type":"message","id":"b","parentId":"a","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"toolCall","id":"t1","name":"read","arguments":{"path":"x"}}],"provider":"p","model":"m","stopReason":"toolUse","timestamp":2}}` + "\n" +
		`{"type":"message","id":"c","parentId":"b","timestamp":"2025-01-01T00:00:03.000Z","message":{"role":"toolResult","toolCallId":"t1","toolName":"read","content":[{"type":"text","text":"data"}],"isError":false,"timestamp":3}}` + "\n"
	p := writeTemp(t, content)
	s, _ := sessionio.ReadFile(p)
	_, err := Compaction(ctxb, sessionio.Named(p), ExpectOf(s), NewCompaction{Summary: "S", FirstKeptEntryID: "c"})
	if !errors.Is(err, ErrInvalidEntry) || !strings.Contains(err.Error(), "toolResult") {
		t.Fatalf("got %v", err)
	}
}

func appendRaw(t *testing.T, p, s string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func TestAppendAddsMissingNewlineAndTimestampNotEarlier(t *testing.T) {
	t.Parallel()
	late := strings.Replace(asst("b", "a", "yo"), `"timestamp":2}`, `"timestamp":4102444800000}`, 1) // year 2100
	// No final newline:
	p := writeTemp(t, hdr+"\n"+user("a", "", "hi")+"\n"+late)
	s, _ := sessionio.ReadFile(p)
	ap, err := Compaction(ctxb, sessionio.Named(p), ExpectOf(s), NewCompaction{Summary: "S", FirstKeptEntryID: "a", TokensBefore: 3})
	if err != nil {
		t.Fatal(err)
	}
	if ap.Timestamp != "2100-01-01T00:00:00.000Z" {
		t.Errorf("timestamp %s is earlier than the assistant message on the path", ap.Timestamp)
	}
	data, _ := os.ReadFile(p)
	if !bytes.HasSuffix(data, append(append([]byte(late+"\n"), ap.Line...), '\n')) {
		t.Fatalf("missing newline not inserted before the entry:\n%s", data[len(data)-300:])
	}
	s2, err := sessionio.ReadFile(p)
	if err != nil || s2.LeafID() != ap.ID || s2.Get("b") == nil {
		t.Fatalf("reread: %v leaf %q", err, s2.LeafID())
	}
}

func TestAppendConcurrentWritersOneWins(t *testing.T) {
	t.Parallel()
	p := writeTemp(t, hdr+"\n"+user("a", "", "hi")+"\n"+asst("b", "a", "yo")+"\n")
	s, _ := sessionio.ReadFile(p)
	exp := ExpectOf(s)
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			_, err := Compaction(ctxb, sessionio.Named(p), exp, NewCompaction{Summary: "S", FirstKeptEntryID: "a"})
			errs <- err
		}()
	}
	ok := 0
	for range 8 {
		if err := <-errs; err == nil {
			ok++
		} else if !errors.Is(err, ErrChanged) {
			t.Errorf("unexpected error %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d appends succeeded, want exactly 1", ok)
	}
}

// TestAppendCorpusLoadsInPi appends a branch_summary and (where the leaf is not a
// compaction) a compaction that keeps everything to a copy of every v3 corpus file, and
// checks that:
//   - the appended bytes equal the lines the real Pi was shown to load (goldens in
//     testdata/append, written and checked against the Pi harness by `make interop`);
//   - the context built from the result is the old context plus exactly that entry's
//     effect.
//
// With COMPACTOR_INTEROP=1 it also runs the real Pi (interop/pi/pi context) on every result
// and compares; with COMPACTOR_UPDATE=1 it rewrites the golden lines.
func TestAppendCorpusLoadsInPi(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/corpus/*.jsonl")
	files = append(files, "../../testdata/corpus/pi-generated/synthetic-v3-session.jsonl")
	interop := os.Getenv("COMPACTOR_INTEROP") == "1"
	update := os.Getenv("COMPACTOR_UPDATE") == "1"
	for _, src := range files {
		name := strings.TrimSuffix(filepath.Base(src), ".jsonl")
		for _, kind := range []string{"branch_summary", "compaction"} {
			t.Run(name+"/"+kind, func(t *testing.T) {
				data, err := os.ReadFile(src)
				if err != nil {
					t.Fatal(err)
				}
				p := writeTemp(t, string(data))
				s, err := sessionio.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				path := mustPath(t, s, "")
				old := picontext.Build(path, pi073)
				leaf := path[len(path)-1]
				var ap *Appended
				var want []json.RawMessage
				switch kind {
				case "branch_summary":
					ap, err = BranchSummary(ctxb, sessionio.Named(p), ExpectOf(s), NewBranchSummary{ParentID: leaf.ID, Summary: "Explored a branch.\nSummary é ✓ \u2028 <tag>&", ReadFiles: []string{"a.go"}, ModifiedFiles: []string{}})
					if err != nil {
						t.Fatal(err)
					}
					want = rawMessages(old.Messages)
					want = append(want, json.RawMessage(fmt.Sprintf(`{"role":"branchSummary","summary":%s,"fromId":%q,"timestamp":%d}`,
						mustJSON("Explored a branch.\nSummary é ✓ \u2028 <tag>&"), leaf.ID, mustMillis(t, ap.Timestamp))))
				case "compaction":
					if leaf.Type == sessionio.TypeCompaction {
						t.Skip("leaf is a compaction: compactor refuses to compact it again (tested elsewhere)")
					}
					first := ""
					for i, id := range old.EntryIDs {
						if old.Messages[i].Role != sessionio.RoleCompactionSummary {
							first = id
							break
						}
					}
					ap, err = Compaction(ctxb, sessionio.Named(p), ExpectOf(s), NewCompaction{Summary: "Everything so far.", FirstKeptEntryID: first, TokensBefore: 1234, ReadFiles: []string{"x"}, ModifiedFiles: []string{"y"}})
					if err != nil {
						t.Fatal(err)
					}
					want = append(want, json.RawMessage(fmt.Sprintf(`{"role":"compactionSummary","summary":"Everything so far.","tokensBefore":1234,"timestamp":%d}`, mustMillis(t, ap.Timestamp))))
					for _, m := range old.Messages {
						if m.Role != sessionio.RoleCompactionSummary {
							want = append(want, m.Raw)
						}
					}
				}
				s2, err := sessionio.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if s2.LeafID() != ap.ID {
					t.Fatalf("leaf after append %q, want %q", s2.LeafID(), ap.ID)
				}
				got := rawMessages(picontext.Build(mustPath(t, s2, ""), pi073).Messages)
				if !jsonEqual(t, got, want) {
					t.Fatalf("context after append is not the old context plus the entry's effect")
				}
				golden := filepath.Join("testdata/append", name+"."+kind+".jsonl")
				if update {
					if err := os.WriteFile(golden, append(ap.Line, '\n'), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				wantLine, err := os.ReadFile(golden)
				if err != nil {
					t.Fatalf("golden: %v (run make interop with COMPACTOR_UPDATE=1)", err)
				}
				if !bytes.Equal(append(ap.Line, '\n'), wantLine) {
					t.Errorf("appended line differs from the golden Pi loaded:\n got %s\nwant %s", ap.Line, wantLine)
				}
				if interop {
					checkWithPi(t, p, ap.ID, want)
				}
			})
		}
	}
}

func rawMessages(ms []*sessionio.Message) []json.RawMessage {
	out := make([]json.RawMessage, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Raw)
	}
	return out
}

func mustMillis(t *testing.T, ts string) int64 {
	t.Helper()
	ms, ok := picontext.ParseJSDate(ts)
	if !ok {
		t.Fatalf("bad timestamp %q", ts)
	}
	return int64(ms)
}

func jsonEqual(t *testing.T, a, b any) bool {
	t.Helper()
	var x, y any
	ab, _ := json.Marshal(a)
	bb, _ := json.Marshal(b)
	if err := json.Unmarshal(ab, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(bb, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}

// piView is what the real Pi (interop/pi/pi context) makes of a file: its leaf, its path and
// its context's messages.
type piView struct {
	LeafID  string   `json:"leafId"`
	PathIDs []string `json:"pathIds"`
	Context struct {
		Messages []json.RawMessage `json:"messages"`
	} `json:"context"`
}

// piContext runs the real Pi on file.
func piContext(t *testing.T, file string) piView {
	t.Helper()
	harness, err := pigolden.Harness()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(harness, "context", file, "--compact").Output()
	if err != nil {
		t.Fatalf("interop/pi/pi context: %v", err)
	}
	var pi piView
	if err := json.Unmarshal(out, &pi); err != nil {
		t.Fatalf("interop/pi/pi output: %v", err)
	}
	return pi
}

// checkWithPi runs the real Pi on the file and compares its leaf and context messages.
func checkWithPi(t *testing.T, file, leafID string, want []json.RawMessage) {
	t.Helper()
	pi := piContext(t, file)
	if pi.LeafID != leafID {
		t.Errorf("Pi's leaf %q, want the appended %q", pi.LeafID, leafID)
	}
	if !jsonEqual(t, pi.Context.Messages, want) {
		t.Errorf("Pi's context differs from the expected effect of the appended entry")
	}
}
