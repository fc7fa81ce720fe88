package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/internal/promptcache"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
)

// growSession appends turns [from, to) to a session file the way Pi writes them: a user
// prompt, an assistant reading a file, the tool result, and the assistant's answer with
// its usage. It returns the new leaf.
func growSession(t *testing.T, file, leaf string, from, to int) string {
	t.Helper()
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	line := func(id, parent, msg string) string {
		p := "null"
		if parent != "" {
			p = fmt.Sprintf("%q", parent)
		}
		return fmt.Sprintf(`{"type":"message","id":%q,"parentId":%s,"timestamp":"2026-01-01T00:%02d:%02d.000Z","message":%s}`+"\n", id, p, (from/60)%60, from%60, msg)
	}
	for i := from; i < to; i++ {
		u, a, r, b := fmt.Sprintf("u%07d", i), fmt.Sprintf("a%07d", i), fmt.Sprintf("r%07d", i), fmt.Sprintf("b%07d", i)
		ts := 1767225600000 + int64(i)*1000
		body := strings.Repeat(fmt.Sprintf("line %d of src/mod%d.go: func f%d() {} // ", i, i, i), 40)
		lines := line(u, leaf, fmt.Sprintf(`{"role":"user","content":[{"type":"text","text":"Step %d: look at src/mod%d.go and fix it."}],"timestamp":%d}`, i, i, ts)) +
			line(a, u, fmt.Sprintf(`{"role":"assistant","content":[{"type":"toolCall","id":"call%d","name":"read","arguments":{"path":"src/mod%d.go"}}],"api":"openai-completions","provider":"openai","model":"gpt-4o","usage":{"input":%d,"output":20,"cacheRead":0,"cacheWrite":0,"totalTokens":%d},"stopReason":"toolUse","timestamp":%d}`, i, i, 1000+i*600, 1020+i*600, ts+1)) +
			line(r, a, fmt.Sprintf(`{"role":"toolResult","toolCallId":"call%d","toolName":"read","content":[{"type":"text","text":%q}],"isError":false,"timestamp":%d}`, i, body, ts+2)) +
			line(b, r, fmt.Sprintf(`{"role":"assistant","content":[{"type":"text","text":"Fixed f%d in src/mod%d.go."}],"api":"openai-completions","provider":"openai","model":"gpt-4o","usage":{"input":%d,"output":30,"cacheRead":0,"cacheWrite":0,"totalTokens":%d},"stopReason":"stop","timestamp":%d}`, i, i, 1500+i*600, 1530+i*600, ts+3))
		if _, err := f.WriteString(lines); err != nil {
			t.Fatal(err)
		}
		leaf = b
	}
	return leaf
}

// TestPrepareGrownInSteps grows a session in 5 steps and prepares it at each step with
// both update modes. Both plan the same cut. PrepareFull sends the whole span again after
// the same system prompt, so every request from the second on begins with the previous
// one's text and the endpoint's prompt cache (the fake server simulates OpenAI's rule)
// serves most of it; PrepareIncremental sends the model only what is new since the last
// cut, so its input is a fraction of the full one's, none of it cached.
func TestPrepareGrownInSteps(t *testing.T) {
	t.Parallel()
	llm := fakellm.Start(t)
	full, err := New(openAI(t, llm.URL(), nil), Settings{KeepRecentTokens: 3000})
	if err != nil {
		t.Fatal(err)
	}
	incLLM := fakellm.Start(t)
	incremental, err := New(openAI(t, incLLM.URL(), nil), Settings{KeepRecentTokens: 3000, PrepareUpdate: PrepareIncremental})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "s.jsonl")
	if err := os.WriteFile(file, []byte(`{"type":"session","version":3,"id":"019a0000-0000-7000-8000-00000000beef","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	leaf := ""
	var prevFull, prevInc *Prepared
	var fullSum, fullCached, incSum int
	const steps, turnsPerStep = 5, 8
	for step := range steps {
		leaf = growSession(t, file, leaf, step*turnsPerStep, (step+1)*turnsPerStep)
		fp, fres, err := full.Prepare(context.Background(), Request{File: file}, prevFull)
		if err != nil {
			t.Fatalf("step %d, full: %v", step+1, err)
		}
		inc, ires, err := incremental.Prepare(context.Background(), Request{File: file}, prevInc)
		if err != nil {
			t.Fatalf("step %d, incremental: %v", step+1, err)
		}
		if fp.LeafID != leaf || inc.LeafID != leaf || fp.FirstKeptEntryID != inc.FirstKeptEntryID || !slices.Equal(fp.SummarizedEntryIDs, inc.SummarizedEntryIDs) {
			t.Fatalf("step %d: the two preparations planned different cuts", step+1)
		}
		if fp.Incremental {
			t.Fatalf("step %d: the full preparation was built incrementally", step+1)
		}
		if step > 0 && (!inc.Incremental || *inc.BasedOnLeafID != prevInc.LeafID) {
			t.Fatalf("step %d: not built on the previous preparation (%v)", step+1, inc.Incremental)
		}
		if step > 0 && ires.LLMInputTokens >= fres.LLMInputTokens {
			t.Errorf("step %d: incremental input %d tokens, not less than the full %d", step+1, ires.LLMInputTokens, fres.LLMInputTokens)
		}
		// The full request repeats the previous one's span: all of it but the last block is
		// cached. (The incremental one repeats nothing but the system prompt, too short for
		// a hit.)
		if step > 0 && fres.LLMCachedInputTokens < prevFullUncachedFloor(llm, fres) {
			t.Errorf("step %d: full preparation: %d of %d input tokens cached; its prompt begins with the previous request's", step+1, fres.LLMCachedInputTokens, fres.LLMInputTokens)
		}
		if ires.LLMCachedInputTokens != 0 || fp.LLMCachedInputTokens != fres.LLMCachedInputTokens {
			t.Errorf("step %d: cached tokens: incremental %d (want 0), full result %d vs value %d", step+1, ires.LLMCachedInputTokens, fres.LLMCachedInputTokens, fp.LLMCachedInputTokens)
		}
		if !strings.Contains(inc.Summary, "src/mod") || inc.Details.ReadFiles == nil {
			t.Errorf("step %d: summary or file lists missing", step+1)
		}
		fullSum += fres.LLMInputTokens
		fullCached += fres.LLMCachedInputTokens
		incSum += ires.LLMInputTokens
		t.Logf("FIGURE step %d: %d entries summarized; LLM input tokens: full %d (%d cached), incremental %d (%.0f%%)",
			step+1, len(inc.SummarizedEntryIDs), fres.LLMInputTokens, fres.LLMCachedInputTokens, ires.LLMInputTokens, 100*float64(ires.LLMInputTokens)/float64(fres.LLMInputTokens))
		prevFull, prevInc = fp, inc
	}
	// What a provider bills, cached input at 0.1 of uncached.
	billedFull := float64(fullSum-fullCached) + 0.1*float64(fullCached)
	t.Logf("FIGURE total over %d steps: full %d LLM input tokens (%d cached, billed as %.0f), incremental %d (%.0f%% of full, none cached)",
		steps, fullSum, fullCached, billedFull, incSum, 100*float64(incSum)/float64(fullSum))
	// Nothing was written to the session.
	s, err := sessionio.ReadFile(file)
	if err != nil || s.LeafID() != leaf {
		t.Fatalf("the session changed: leaf %s, %v", s.LeafID(), err)
	}
}

// prevFullUncachedFloor is the least a full preparation must find cached: the previous
// request's text up to its span's end, less a block and the prompt that follows the span.
func prevFullUncachedFloor(llm *fakellm.Server, res *Result) int {
	reqs := llm.Requests()
	if len(reqs) < 2 {
		return 1
	}
	prev := reqs[len(reqs)-2]
	user := prev.Messages[len(prev.Messages)-1].Content
	span, _, _ := strings.Cut(user, "</conversation>")
	return max(1, promptcache.Tokens(prev.Messages[0].Content+span)-2*promptcache.New().BlockTokens)
}

// TestPrepareBuildsOnlyOnTheSameRules: an incremental preparation builds on the previous one
// only when both follow the same rules; a previous one made for another Pi release (its
// summary request asked otherwise: thinking left out from 1.2.0) is summarized again whole.
func TestPrepareBuildsOnlyOnTheSameRules(t *testing.T) {
	t.Parallel()
	llm := fakellm.Start(t)
	eng, err := New(openAI(t, llm.URL(), nil), Settings{KeepRecentTokens: 3000, PrepareUpdate: PrepareIncremental})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "s.jsonl")
	if err := os.WriteFile(file, []byte(`{"type":"session","version":3,"id":"019a0000-0000-7000-8000-00000000bee5","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	leaf := growSession(t, file, "", 0, 8)
	first, _, err := eng.Prepare(context.Background(), Request{File: file, Settings: Settings{Pi: "1.0.3"}}, nil)
	if err != nil || first.PiVersion != "1.0.3" {
		t.Fatalf("first: %+v, %v", first, err)
	}
	growSession(t, file, leaf, 8, 16)
	for _, c := range []struct {
		pi          string
		incremental bool
	}{{"1.3.0", false}, {"0.99.1", true}} { // 1.3.0 leaves thinking out; 0.99.1 has 1.0.3's rules
		next, _, err := eng.Prepare(context.Background(), Request{File: file, Settings: Settings{Pi: c.pi}}, first)
		if err != nil {
			t.Fatal(err)
		}
		if next.Incremental != c.incremental || next.PiVersion != c.pi {
			t.Errorf("Pi %s on a preparation made for 1.0.3: incremental %v, piVersion %s; want %v", c.pi, next.Incremental, next.PiVersion, c.incremental)
		}
	}
}

// After a compaction made through Pi's hook (fromHook true: Pi does not carry its file
// lists forward), the next preparation still lists the files it recorded.
func TestPrepareKeepsFileListsOfHookCompactions(t *testing.T) {
	t.Parallel()
	eng, err := New(summarize.NewExtractive(), Settings{KeepRecentTokens: 3000})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "s.jsonl")
	if err := os.WriteFile(file, []byte(`{"type":"session","version":3,"id":"019a0000-0000-7000-8000-00000000f00d","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	leaf := growSession(t, file, "", 0, 8)
	first, _, err := eng.Prepare(context.Background(), Request{File: file}, nil)
	if err != nil || first == nil {
		t.Fatalf("first preparation: %v", err)
	}
	// Pi appends the prepared compaction itself, as the extension's hook returns it.
	comp := fmt.Sprintf(`{"type":"compaction","id":"c0mp0001","parentId":%q,"timestamp":"2026-01-01T01:00:00.000Z","summary":%q,"firstKeptEntryId":%q,"tokensBefore":%d,"details":{"readFiles":["src/only-in-the-old-lists.go"],"modifiedFiles":["src/edited-long-ago.go"]},"fromHook":true}`+"\n",
		leaf, first.Summary, first.FirstKeptEntryID, first.TokensBefore)
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(comp); err != nil {
		t.Fatal(err)
	}
	f.Close()
	growSession(t, file, "c0mp0001", 100, 108)
	second, _, err := eng.Prepare(context.Background(), Request{File: file}, nil)
	if err != nil || second == nil {
		t.Fatalf("second preparation: %v", err)
	}
	if !slices.Contains(second.Details.ReadFiles, "src/only-in-the-old-lists.go") || !slices.Contains(second.Details.ModifiedFiles, "src/edited-long-ago.go") {
		t.Fatalf("file lists of the hook compaction lost: %+v", second.Details)
	}
}
