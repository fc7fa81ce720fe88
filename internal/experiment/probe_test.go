package experiment

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/internal/sessiongen"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/tokenize"
)

// span is a small span with one of each kind of fact, and things that look like facts but
// are not (a question with "should", a command that printed "ok", a colour, a timestamp).
func span(t *testing.T) []*sessionio.Message {
	return sessiongen.Messages(t,
		`{"role":"user","content":"Fix the login bug in src/auth.ts. Never touch the migrations folder! Should we avoid the cache?","timestamp":1}`,
		`{"role":"assistant","content":[{"type":"text","text":"Looking."},`+
			`{"type":"toolCall","id":"r1","name":"read","arguments":{"path":"src/auth.ts"}},`+
			`{"type":"toolCall","id":"e1","name":"edit","arguments":{"path":"src/session.ts","oldText":"a","newText":"b"}},`+
			`{"type":"toolCall","id":"b1","name":"bash","arguments":{"command":"cd /repo && npm test -- auth"}},`+
			`{"type":"toolCall","id":"b2","name":"bash","arguments":{"command":"go vet ./..."}},`+
			`{"type":"toolCall","id":"b3","name":"bash","arguments":{"command":"sleep 100"}}],"stopReason":"toolUse","timestamp":2}`,
		`{"role":"toolResult","toolCallId":"r1","toolName":"read","content":[{"type":"text","text":"const port = 9999; // v9.9.9"}],"isError":false,"timestamp":3}`,
		`{"role":"toolResult","toolCallId":"e1","toolName":"edit","content":[{"type":"text","text":"Successfully replaced text"}],"isError":false,"timestamp":3}`,
		`{"role":"toolResult","toolCallId":"b1","toolName":"bash","content":[{"type":"text","text":"> auth@1.0.0 test\n  at login (src/auth.ts:12)\nError: expected 200, got 401\n  more\n\nCommand exited with code 1"}],"isError":true,"timestamp":4}`,
		`{"role":"toolResult","toolCallId":"b2","toolName":"bash","content":[{"type":"text","text":"ok  github.com/x/y 0.2s\nserver on localhost:8080, deployed 3f30550a, 49 errors fixed, colour #283228, at 01.27.21"}],"isError":false,"timestamp":4}`,
		`{"role":"bashExecution","command":"make lint","output":"lint: 3 problems\nsrc/a.go:1: undefined: x","exitCode":2,"cancelled":false,"truncated":false,"timestamp":5}`,
		`{"role":"bashExecution","command":"echo secret","output":"secret","exitCode":0,"cancelled":false,"truncated":false,"excludeFromContext":true,"timestamp":5}`,
		`{"role":"user","content":"thanks!","timestamp":6}`,
	)
}

func TestDeriveProbes(t *testing.T) {
	t.Parallel()
	var got []string
	for _, p := range deriveProbes(span(t), nil) {
		var keys []string
		for _, k := range p.keys {
			keys = append(keys, k.s)
		}
		got = append(got, p.kind+": "+strings.Join(keys, " | "))
	}
	want := []string{
		"fileModified: src/session.ts",
		"fileRead: src/auth.ts",
		"request: Fix the login bug in src/auth.ts.",
		"constraint: Never touch the migrations folder!",
		// "Should we avoid the cache?" is a question: not a constraint.
		// read results are file contents: port 9999 and v9.9.9 are code, not probes.
		"failedCommand: npm test -- auth | Error: expected 200, got 401",
		"command: go vet ./...", // its output says "ok": it passed
		"command: sleep 100",    // no result in the span: not a failure
		"number: auth@1.0.0",
		"number: localhost:8080",
		"number: 3f30550a",
		"number: 49 errors",
		// not #283228 (a colour), not 01.27.21 (a time)
		"failedCommand: make lint | src/a.go:1: undefined: x",
		"number: 3 problems",
		// "echo secret" never reached the context; "thanks!" is not a request.
	}
	if !slices.Equal(got, want) {
		t.Errorf("probes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestContainsKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text string
		key  probeKey
		want bool
	}{
		{"port 8080 open", probeKey{s: "8080"}, true},
		{"port 18080 open", probeKey{s: "8080"}, false},
		{"port 80801", probeKey{s: "8080"}, false},
		{"Run the testsuite", probeKey{s: "Run the tests"}, false},
		{"x Run the tests.", probeKey{s: "Run the tests"}, true},
		{"see @packages/a/src/main.ts", probeKey{s: "packages/a/src/main.ts"}, true},
		{"ran `npm test -- auth` (exit 1)", probeKey{s: "npm test -- auth"}, true},
		{"a very long token abcdefgh", probeKey{s: "abcdef", open: true}, true},
		{"a very long token abcdefgh", probeKey{s: "abcdef"}, false},
		{"8080 first, then 80800", probeKey{s: "80800"}, true},
		{"", probeKey{s: "x"}, false},
	} {
		if got := containsKey(tc.text, tc.key); got != tc.want {
			t.Errorf("containsKey(%q, %+v) = %v, want %v", tc.text, tc.key, got, tc.want)
		}
	}
}

func TestClipKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		n    int
		want probeKey
	}{
		{"  short \n text ", 20, probeKey{s: "short text"}},
		{"one two three four", 12, probeKey{s: "one two"}},
		{"one two three four", 13, probeKey{s: "one two three"}},
		{"averyveryverylongword tail", 10, probeKey{s: "averyveryv", open: true}},
	} {
		if got := clipKey(tc.in, tc.n); got != tc.want {
			t.Errorf("clipKey(%q, %d) = %+v, want %+v", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestErrorLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ out, want string }{
		{"building\n\x1b[31merror\x1b[0m: no such crate `foo`\nCommand exited with code 101", "error: no such crate `foo`"},
		{"line one\nlast words\n\nCommand exited with code 2", "last words"},
		{"\n\nCommand exited with code 1", ""},
		{"Command aborted", ""},
	} {
		if got := errorLine(tc.out); got != tc.want {
			t.Errorf("errorLine(%q) = %q, want %q", tc.out, got, tc.want)
		}
	}
}

// verbatim is a summarizer that keeps everything: the previous summary and the whole
// text of every message of the span.
type verbatim struct{}

func (verbatim) Summarize(_ context.Context, req summarize.Request) (summarize.Result, error) {
	return summarize.Result{Text: req.PreviousSummary + "\n" + contextText(req.Messages, nil)}, nil
}

// forgetful keeps nothing of the span.
type forgetful struct{}

func (forgetful) Summarize(context.Context, summarize.Request) (summarize.Result, error) {
	return summarize.Result{Text: "## Goal\n- (none)"}, nil
}

// The probes are honest both ways. A text that holds the whole span recalls every probe
// of every kind: each key is in the text it was derived from, as the context renders it;
// and a replayed summary that keeps the whole span does too, right after its compaction.
// A summary that keeps nothing recalls far less: only what the kept messages and the file
// lists happen to repeat.
func TestRecallBounds(t *testing.T) {
	t.Parallel()
	kinds := ProbeRecall{}
	for _, name := range []string{"pi-generated/before-compaction.migrated-v3.jsonl", "02-tools-parallel-errors-images.jsonl", "06-custom-bash-entries.jsonl"} {
		s, err := sessionio.ReadFile(corpusDir + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		path, err := s.Path("")
		if err != nil {
			t.Fatal(err)
		}
		var msgs []*sessionio.Message
		for _, e := range path {
			if m := contextMessage(e); m != nil {
				msgs = append(msgs, m)
			}
		}
		r := recall(deriveProbes(msgs, nil), contextText(msgs, nil))
		for _, k := range ProbeKinds() {
			if got := *r.Kind(k); got.Found != got.Probes {
				t.Errorf("%s: %s: %d of %d probes found in their own text", name, k, got.Found, got.Probes)
			}
		}
		kinds.add(r)
	}
	for _, k := range ProbeKinds() {
		if kinds.Kind(k).Probes == 0 {
			t.Errorf("no %s probes: the check proves nothing for them", k)
		}
	}

	run := func(s summarize.Summarizer, file string, budget, keep int) *Result {
		t.Helper()
		r, err := RunFiles(context.Background(), corpusDir, []string{corpusDir + "/" + file}, Config{
			Counter: tokenize.CounterEstimate, KeepRecentTokens: []int{keep}, Policies: []string{"nearest"},
			Replay: true, Eval: true, ContextWindow: 16384 + budget, Extractive: s,
		})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	all := run(verbatim{}, "02-tools-parallel-errors-images.jsonl", 3000, 1000)
	if all.ReplayTotals[0].Compactions == 0 {
		t.Fatal("no compaction to check")
	}
	for _, rt := range all.RecallTotals {
		if rt.Found != rt.Probes {
			t.Errorf("verbatim summary: %s recall %d of %d", rt.ProbeKind, rt.Found, rt.Probes)
		}
	}
	none := run(forgetful{}, "pi-generated/before-compaction.migrated-v3.jsonl", 8000, 2000)
	facts := none.ReplayTotals[0].Recall.Facts()
	if facts.Probes == 0 || facts.Found*2 > facts.Probes {
		t.Errorf("a summary that keeps nothing recalls %d of %d facts", facts.Found, facts.Probes)
	}
	// The file lists are Pi's, appended whatever the summary says.
	if f := none.ReplayTotals[0].Recall.FileModified; f.Found != f.Probes {
		t.Errorf("modified files %d of %d with the file lists", f.Found, f.Probes)
	}
	t.Logf("verbatim: %d compactions; forgetful: facts %d of %d in %d compactions", all.ReplayTotals[0].Compactions,
		facts.Found, facts.Probes, none.ReplayTotals[0].Compactions)
}

// The first milestone is the first compaction: its first span recall is that
// compaction's own recall, and later milestones only count sessions that got there.
func TestMilestones(t *testing.T) {
	t.Parallel()
	r := corpusResult(t)
	for _, row := range r.Replay {
		if row.Eval == nil {
			t.Fatalf("%s: no eval", row.File)
		}
		for i, m := range row.Eval.Milestones {
			if m.After != Milestones[i] || m.Reached != (row.Compactions >= m.After) {
				t.Errorf("%s %s: milestone %+v with %d compactions", row.File, row.Policy, m, row.Compactions)
			}
		}
		if row.Compactions == 1 && row.Eval.Milestones[0].FirstSpan != row.Eval.Recall {
			t.Errorf("%s %s: first span %+v, recall %+v", row.File, row.Policy, row.Eval.Milestones[0].FirstSpan, row.Eval.Recall)
		}
	}
	for _, e := range r.EarlyTotals {
		want := 0
		for _, row := range r.Replay {
			if row.Policy == e.Policy && row.KeepRecentTokens == e.KeepRecentTokens && row.Summarizer == e.Summarizer && row.Compactions >= e.After {
				want++
			}
		}
		if e.Sessions != want {
			t.Errorf("%s/%d after %d: %d sessions, want %d", e.Policy, e.KeepRecentTokens, e.After, e.Sessions, want)
		}
	}
}

func ExampleProbeKinds() {
	fmt.Println(strings.Join(ProbeKinds(), " "))
	// Output: fileRead fileModified command failedCommand request constraint number
}

// The replay shortens file lists as the service does (engine.FitFileLists) instead of
// leaving the context over budget; the lists keep the most recent files, which are the
// ones the span's probes name.
func TestReplayShortensFileLists(t *testing.T) {
	t.Parallel()
	file := t.TempDir() + "/wide.jsonl"
	if err := (sessiongen.Wide{Turns: 40, Reads: 10, Edits: 2, ReadFiles: 400, ModifiedFiles: 80}).WriteFile(file); err != nil {
		t.Fatal(err)
	}
	r, err := RunFiles(context.Background(), "", []string{file}, Config{
		KeepRecentTokens: []int{2000}, Policies: []string{"nearest"}, Replay: true, Eval: true, ContextWindow: 16384 + 6000,
	})
	if err != nil {
		t.Fatal(err)
	}
	row := r.Replay[0]
	t.Logf("%d compactions, %d with shortened lists, %d still over budget; files read %+v, modified %+v",
		row.Compactions, row.ShortenedLists, row.StillOverBudget, row.Eval.Recall.FileRead, row.Eval.Recall.FileModified)
	if row.ShortenedLists == 0 || row.StillOverBudget != 0 {
		t.Errorf("%d compactions with shortened lists, %d over budget", row.ShortenedLists, row.StillOverBudget)
	}
	if f := row.Eval.Recall.FileModified; f.Found != f.Probes {
		t.Errorf("modified files of the span lost from the shortened lists: %+v", f)
	}
}

// The recorded summarizer evaluates the compactions a session's file holds, where it holds
// them: a recorded summary that copies its span recalls every probe of it, one that keeps
// nothing recalls what the kept part and the file lists repeat; a file with several
// compactions gives one evaluation each.
func TestRecordedCompactions(t *testing.T) {
	t.Parallel()
	src := corpusDir + "/02-tools-parallel-errors-images.jsonl"
	s, err := sessionio.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	path, err := s.Path("")
	if err != nil {
		t.Fatal(err)
	}
	st := cutpoint.DefaultSettings()
	st.KeepRecentTokens, st.ContextWindow = 1000, 1
	p, err := cutpoint.Pi{}.Plan(path, st, tokenize.EstimateFor(st.Release))
	if err != nil || !p.Prepared {
		t.Fatalf("plan: %v", err)
	}
	span := append(append([]*sessionio.Message{}, p.Summarize...), p.Prefix...)
	dir := t.TempDir()
	orig, _ := os.ReadFile(src)
	write := func(name, summary string) {
		line, _ := json.Marshal(map[string]any{"type": "compaction", "id": "rec0c0mp", "parentId": path[len(path)-1].ID, "timestamp": "2026-01-01T00:00:00.000Z",
			"summary": summary, "firstKeptEntryId": p.FirstKeptEntryID, "tokensBefore": 1000, "fromHook": true,
			"details": map[string]any{"readFiles": p.FileOps.ReadFiles, "modifiedFiles": nonNil(p.FileOps.ModifiedFiles)}})
		if err := os.WriteFile(filepath.Join(dir, name), append(append(orig, line...), '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("verbatim.jsonl", contextText(span, nil)+summarize.FormatFileOperations(p.FileOps.ReadFiles, p.FileOps.ModifiedFiles))
	write("nothing.jsonl", "## Goal\n- (none)"+summarize.FormatFileOperations(p.FileOps.ReadFiles, p.FileOps.ModifiedFiles))
	r, err := Run(context.Background(), dir, Config{Counter: tokenize.CounterEstimate, Policies: []string{"pi"}, Replay: true, Eval: true, Summarizers: []string{SummarizerRecorded}})
	if err != nil {
		t.Fatal(err)
	}
	facts := map[string]Recall{}
	for _, row := range r.Replay {
		if row.Compactions != 1 || row.Eval == nil {
			t.Fatalf("%s: %d compactions evaluated", row.File, row.Compactions)
		}
		facts[filepath.Base(row.File)] = row.Eval.Recall.Facts()
	}
	if v := facts["verbatim.jsonl"]; v.Probes == 0 || v.Found != v.Probes {
		t.Errorf("a recorded summary that copies its span recalls %d of %d facts", v.Found, v.Probes)
	}
	if n := facts["nothing.jsonl"]; n.Found >= n.Probes || n.Probes != facts["verbatim.jsonl"].Probes {
		t.Errorf("a recorded summary that keeps nothing recalls %d of %d facts", n.Found, n.Probes)
	}
	// Every compaction on a file's path is evaluated.
	r, err = RunFiles(context.Background(), corpusDir, []string{corpusDir + "/05-compactions.jsonl"}, Config{Pi: "0.73.1", Counter: tokenize.CounterEstimate,
		Policies: []string{"pi"}, Replay: true, Eval: true, Summarizers: []string{SummarizerRecorded}})
	if err != nil {
		t.Fatal(err)
	}
	s5, _ := sessionio.ReadFile(corpusDir + "/05-compactions.jsonl")
	p5, _ := s5.Path("")
	want := 0
	for _, e := range p5 {
		if e.Type == sessionio.TypeCompaction {
			want++
		}
	}
	if got := r.Replay[0].Compactions + r.Replay[0].Refused; got != want || want < 2 {
		t.Errorf("05-compactions: %d compactions evaluated (%d refused), the path holds %d", r.Replay[0].Compactions, r.Replay[0].Refused, want)
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
