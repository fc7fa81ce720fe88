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
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/internal/pigolden"
	"github.com/compactor-dev/compactor/outcome"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
)

var interop = os.Getenv("COMPACTOR_INTEROP") == "1"

func copyFile(t *testing.T, src string) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

func v3Corpus(t *testing.T) []string {
	t.Helper()
	files, _ := filepath.Glob("../testdata/corpus/*.jsonl")
	files = append(files, "../testdata/corpus/pi-generated/synthetic-v3-session.jsonl")
	if len(files) < 13 {
		t.Fatalf("corpus incomplete: %d files", len(files))
	}
	return files
}

// openAI is the summarizer on a fake endpoint, without retries or waits. Its timeout is
// generous: under -race on a loaded machine a large answer can take seconds to read, and
// the tests of timeouts set their own.
func openAI(t *testing.T, url string, mut func(*summarize.OpenAIConfig)) summarize.Summarizer {
	t.Helper()
	cfg := summarize.OpenAIConfig{BaseURL: url, Model: "fake-model", APIKey: "sk-test-SECRET", MaxRetries: -1,
		Timeout: time.Minute, Sleep: func(context.Context, time.Duration) error { return nil }}
	if mut != nil {
		mut(&cfg)
	}
	s, err := summarize.NewOpenAI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// keptIDs is what a plan promises to keep: the ids of the context messages that come from
// path entries at or after the first kept entry (compaction summaries excluded).
func keptIDs(path []*sessionio.Entry, firstKept string) []string {
	idx := -1
	for i, e := range path {
		if e.ID == firstKept {
			idx = i
		}
	}
	pos := map[string]int{}
	for i, e := range path {
		pos[e.ID] = i
	}
	c := picontext.Build(path, pi.MustParseRelease("0.73.1"))
	var out []string
	for i, id := range c.EntryIDs {
		if c.Messages[i].Role == sessionio.RoleCompactionSummary {
			continue
		}
		if pos[id] >= idx {
			out = append(out, id)
		}
	}
	return out
}

// TestCompactCorpus compacts a copy of every v3 corpus file at keepRecentTokens 5000 with
// the extractive summarizer and with an OpenAI-compatible server over HTTP, then checks
// what Pi will load: the compaction is the leaf, its summary leads the context, exactly the
// kept messages the plan promised follow, and a second run writes nothing.
func TestCompactCorpus(t *testing.T) {
	t.Parallel()
	llm := fakellm.Start(t)
	summarizers := map[string]summarize.Summarizer{
		"extractive": summarize.NewExtractive(),
		"openai":     openAI(t, llm.URL(), nil),
	}
	compacted := 0
	for _, src := range v3Corpus(t) {
		for sname, sum := range summarizers {
			name := strings.TrimSuffix(filepath.Base(src), ".jsonl") + "/" + sname
			t.Run(name, func(t *testing.T) {
				file := copyFile(t, src)
				eng, err := New(sum, Settings{KeepRecentTokens: 5000})
				if err != nil {
					t.Fatal(err)
				}
				before, _ := sessionio.ReadFile(file)
				oldPath, _ := before.Path("")
				res, err := eng.Compact(context.Background(), Request{File: file})
				if err != nil {
					t.Fatal(err)
				}
				if res.Outcome == outcome.Skipped {
					after, _ := os.ReadFile(file)
					if int64(len(after)) != before.Size {
						t.Fatalf("skipped (%s) but the file changed", res.Reason)
					}
					t.Logf("skipped: %s", res.Reason)
					return
				}
				compacted++
				s, err := sessionio.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				leaf := s.Get(s.LeafID())
				if leaf.ID != res.EntryID || leaf.Type != sessionio.TypeCompaction || leaf.ParentID != before.LeafID() {
					t.Fatalf("leaf %s (%s), want the new compaction %s after %s", leaf.ID, leaf.Type, res.EntryID, before.LeafID())
				}
				if leaf.FirstKeptEntryID != res.FirstKeptEntryID || int(leaf.TokensBefore) != res.TokensBefore {
					t.Errorf("entry fields differ from the result")
				}
				if sname == "openai" && !strings.Contains(leaf.Summary, "fake summary") {
					t.Errorf("summary does not come from the endpoint: %.80q", leaf.Summary)
				}
				path, _ := s.Path("")
				c := picontext.Build(path, pi.MustParseRelease("0.73.1"))
				if c.Messages[0].Role != sessionio.RoleCompactionSummary || c.Messages[0].Summary != leaf.Summary {
					t.Fatalf("context does not start with our summary")
				}
				want := keptIDs(oldPath, res.FirstKeptEntryID)
				if got := c.EntryIDs[1:]; !reflect.DeepEqual(got, want) {
					t.Fatalf("kept messages %v, plan promised %v", got, want)
				}
				if res.TokensAfter >= res.TokensBefore {
					t.Errorf("tokens after %d not below before %d", res.TokensAfter, res.TokensBefore)
				}
				if interop {
					checkPiLoads(t, file, leaf, want)
				}
				size := s.Size
				if res2, err := eng.Compact(context.Background(), Request{File: file}); err != nil {
					t.Fatalf("second run: %v", err)
				} else if res2.Outcome != outcome.Skipped || !strings.Contains(res2.Reason, "already compacted") {
					t.Fatalf("second run: outcome %s (%s), want skipped: already compacted", res2.Outcome, res2.Reason)
				}
				if st, _ := os.Stat(file); st.Size() != size {
					t.Fatal("second run wrote to the file")
				}
			})
		}
	}
	t.Cleanup(func() {
		if compacted < 10 {
			t.Errorf("only %d compactions; the corpus should give more", compacted)
		}
	})
}

// checkPiLoads asks the real Pi what it builds from the compacted file.
func checkPiLoads(t *testing.T, file string, leaf *sessionio.Entry, kept []string) {
	t.Helper()
	out, err := exec.Command(piHarness(t), "context", file, "--compact").Output()
	if err != nil {
		t.Fatalf("interop/pi/pi context: %v", err)
	}
	var pi struct {
		LeafID          string   `json:"leafId"`
		MessageEntryIDs []string `json:"messageEntryIds"`
		Context         struct {
			Messages []struct {
				Role    string `json:"role"`
				Summary string `json:"summary"`
			} `json:"messages"`
		} `json:"context"`
	}
	if err := json.Unmarshal(out, &pi); err != nil {
		t.Fatal(err)
	}
	if pi.LeafID != leaf.ID || pi.Context.Messages[0].Role != "compactionSummary" || pi.Context.Messages[0].Summary != leaf.Summary {
		t.Errorf("Pi: leaf %s, first message %s", pi.LeafID, pi.Context.Messages[0].Role)
	}
	if !reflect.DeepEqual(pi.MessageEntryIDs[1:], kept) {
		t.Errorf("Pi keeps %v, plan promised %v", pi.MessageEntryIDs[1:], kept)
	}
	out, err = exec.Command(piHarness(t), "cut", file, "--compact").Output()
	if err != nil {
		t.Fatalf("interop/pi/pi cut: %v", err)
	}
	if !bytes.Contains(out, []byte(`"prepared":false`)) {
		t.Errorf("Pi would compact again: %.200s", out)
	}
}

// TestCompactLLMFailuresWriteNothing: every way the endpoint can fail ends in a clear
// error and an untouched file.
func TestCompactLLMFailuresWriteNothing(t *testing.T) {
	t.Parallel()
	// Only the hanging endpoint gets a short attempt timeout: the others must fail for their
	// own reason, however slowly a loaded machine serves the 443 KB request.
	cases := map[string]struct {
		b       fakellm.Behavior
		timeout time.Duration
		want    string
	}{
		"timeout":        {fakellm.Behavior{Hang: true}, 300 * time.Millisecond, "timeout"},
		"malformed json": {fakellm.Behavior{Garbage: true}, 0, "cannot decode"},
		"empty":          {fakellm.Behavior{Empty: true}, 0, "no text"},
		"context length": {fakellm.Behavior{Status: 400, Code: "context_length_exceeded", Message: "This model's maximum context length is 1000 tokens"}, 0, "context"},
		"server error":   {fakellm.Behavior{Status: 500}, 0, "500"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			llm := fakellm.Start(t)
			llm.SetDefault(tc.b)
			sum := openAI(t, llm.URL(), func(c *summarize.OpenAIConfig) {
				if tc.timeout > 0 {
					c.Timeout = tc.timeout
				}
			})
			eng, _ := New(sum, Settings{KeepRecentTokens: 5000})
			file := copyFile(t, "../testdata/corpus/07-long-outputs.jsonl")
			before, _ := os.ReadFile(file)
			_, err := eng.Compact(context.Background(), Request{File: file})
			if err == nil || !strings.Contains(strings.ToLower(err.Error()), tc.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "SECRET") {
				t.Fatalf("API key in error: %v", err)
			}
			after, _ := os.ReadFile(file)
			if !bytes.Equal(before, after) {
				t.Fatal("file changed after a failed summary")
			}
		})
	}
}

// TestCompactRetriesThen429 honours a 429 with Retry-After, then succeeds.
func TestCompactRateLimitedThenSucceeds(t *testing.T) {
	t.Parallel()
	llm := fakellm.Start(t)
	llm.Enqueue(fakellm.Behavior{Status: 429, RetryAfter: "3"}, fakellm.Behavior{Status: 500})
	var slept []time.Duration
	sum := openAI(t, llm.URL(), func(c *summarize.OpenAIConfig) {
		c.MaxRetries = 3
		c.Sleep = func(_ context.Context, d time.Duration) error { slept = append(slept, d); return nil }
	})
	eng, _ := New(sum, Settings{KeepRecentTokens: 5000})
	file := copyFile(t, "../testdata/corpus/07-long-outputs.jsonl")
	res, err := eng.Compact(context.Background(), Request{File: file})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != outcome.Done || len(slept) < 2 || slept[0] < 3*time.Second {
		t.Fatalf("outcome %s, waits %v; want a wait of at least the Retry-After of 3s first", res.Outcome, slept)
	}
}

// TestGuardRefusesLargerContext: a summary larger than what it replaces is not written.
func TestGuardRefusesLargerContext(t *testing.T) {
	t.Parallel()
	llm := fakellm.Start(t)
	llm.SetDefault(fakellm.Behavior{Text: strings.Repeat("padding words ", 200000)})
	eng, _ := New(openAI(t, llm.URL(), nil), Settings{KeepRecentTokens: 5000})
	file := copyFile(t, "../testdata/corpus/07-long-outputs.jsonl")
	before, _ := os.ReadFile(file)
	_, err := eng.Compact(context.Background(), Request{File: file})
	var ge *GuardError
	if !errors.As(err, &ge) || !strings.Contains(err.Error(), "not be smaller") {
		t.Fatalf("got %v", err)
	}
	after, _ := os.ReadFile(file)
	if !bytes.Equal(before, after) {
		t.Fatal("file changed")
	}
}

// TestBranchSummaryWherePiPutsIt summarizes the branch left for several targets in
// 03-branches-labels-name and checks where the entry lands and what the context shows.
func TestBranchSummaryWherePiPutsIt(t *testing.T) {
	t.Parallel()
	src := "../testdata/corpus/03-branches-labels-name.jsonl"
	s, err := sessionio.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	onPath := map[string]bool{}
	p, _ := s.Path("")
	for _, e := range p {
		onPath[e.ID] = true
	}
	var targets []*sessionio.Entry
	seenUser, seenOther := false, false
	for _, e := range s.Entries {
		if onPath[e.ID] || e.Type != sessionio.TypeMessage {
			continue
		}
		isUser := e.IsMessage(sessionio.RoleUser)
		if isUser && !seenUser || e.IsMessage(sessionio.RoleAssistant) && !seenOther {
			targets = append(targets, e)
			seenUser = seenUser || isUser
			seenOther = seenOther || !isUser
		}
	}
	if len(targets) < 2 {
		t.Fatalf("want a user and an assistant target off the current path, got %d", len(targets))
	}
	releases := pi.RuleSets()
	if v := os.Getenv("PI_VERSION"); interop && v != "" { // make interop: the live Pi's release too
		if r, err := pi.ParseRelease(v); err == nil && !slices.Contains(releases, r) {
			releases = append(releases, r)
		}
	}
	for _, d := range releases {
		for _, target := range targets {
			t.Run(d.String()+"/"+target.ID, func(t *testing.T) {
				branchSummaryWherePiPutsIt(t, src, target, d, s.LeafID())
			})
		}
	}
}

// branchSummaryWherePiPutsIt: the entry hangs where Pi's /tree navigation puts it; its
// fromId is that same entry before Pi 0.84.3 and the leaf that was left from it (BranchFromLeaf).
func branchSummaryWherePiPutsIt(t *testing.T, src string, target *sessionio.Entry, d pi.Release, leaf string) {
	file := copyFile(t, src)
	eng, _ := New(summarize.NewExtractive(), Settings{Pi: d.String()})
	res, err := eng.BranchSummary(context.Background(), Request{File: file, TargetID: target.ID})
	if err != nil {
		t.Fatal(err)
	}
	wantParent := target.ID
	if target.IsMessage(sessionio.RoleUser) {
		wantParent = target.ParentID
	}
	wantFrom := wantParent
	if d.Has(pi.BranchFromLeaf) {
		wantFrom = leaf
	}
	s2, _ := sessionio.ReadFile(file)
	e := s2.Get(res.EntryID)
	if e == nil || e.Type != sessionio.TypeBranchSummary || e.ParentID != wantParent || e.FromID != wantFrom {
		t.Fatalf("entry %s; want a branch_summary with parent %s and fromId %s", e.Raw, wantParent, wantFrom)
	}
	if !strings.HasPrefix(e.Summary, summarize.BranchSummaryPreamble) {
		t.Errorf("summary lacks Pi's preamble")
	}
	path, _ := s2.Path("")
	c := picontext.Build(path, d)
	last := c.Messages[len(c.Messages)-1]
	if last.Role != sessionio.RoleBranchSummary || last.FromID != wantFrom {
		t.Fatalf("context does not end with the branch summary")
	}
	if liveFor(d) {
		cmd := exec.Command(piHarness(t), "context", file, "--compact")
		cmd.Env = append(os.Environ(), "PI_VERSION="+d.String())
		out, err := cmd.Output()
		if err != nil || !bytes.Contains(out, []byte(`"leafId":"`+res.EntryID+`"`)) || !bytes.Contains(out, []byte(`"role":"branchSummary"`)) {
			t.Errorf("Pi does not show the branch summary as the leaf: %v %.300s", err, out)
		}
		// Pi's own branchWithSummary, from the leaf that was left, writes the same line.
		cmd = exec.Command(piHarness(t), "exec", "interop/pi/writes.mjs", file, "--compact")
		cmd.Env, cmd.Dir = append(os.Environ(), "PI_VERSION="+d.String()), repoRootDir(t)
		out, err = cmd.Output()
		var w struct {
			Same     bool
			Ours, Pi string
		}
		if err != nil || json.Unmarshal(out, &w) != nil || !w.Same {
			t.Errorf("Pi %s writes another line for the same branch summary (%v):\n Pi  %.600s\n ours %.600s", d, err, w.Pi, w.Ours)
		}
	}
}

// piHarness is the Pi harness (PI_HARNESS, else interop/pi/pi; PI_VERSION picks the Pi).
func piHarness(t *testing.T) string {
	t.Helper()
	h, err := pigolden.Harness()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestUnknownModelUsesDefaultAndSaysSo: a model the catalog does not know gets the
// default window and encoding, and the result says the model was unknown.
func TestUnknownModelUsesDefaultAndSaysSo(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../testdata/corpus/10-tricky-parallel.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "s.jsonl")
	if err := os.WriteFile(file, bytes.ReplaceAll(data, []byte(`"claude-sonnet-4-5"`), []byte(`"mystery-model-9000"`)), 0o644); err != nil {
		t.Fatal(err)
	}
	eng, _ := New(summarize.NewExtractive(), Settings{})
	res, err := eng.Compact(context.Background(), Request{File: file, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.ModelKnown || res.Model != "mystery-model-9000" || res.ContextWindow != 128000 || res.Counter != "tiktoken:o200k_base" {
		t.Fatalf("model %q known %v window %d counter %s", res.Model, res.ModelKnown, res.ContextWindow, res.Counter)
	}
	known, err := eng.Compact(context.Background(), Request{File: "../testdata/corpus/10-tricky-parallel.jsonl", DryRun: true})
	if err != nil || !known.ModelKnown || known.ContextWindow != 200000 {
		t.Fatalf("known model: %+v %v", known, err)
	}
}
