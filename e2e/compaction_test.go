//go:build e2e

package e2e

// Pi's own compaction, measured with the real Pi (the baseline zero-wait is measured against): how long the agent
// is blocked, how many LLM calls run meanwhile, and what Pi sends next. These are the
// figures a zero-wait route (a Pi extension returning a prepared summary from
// session_before_compact) is compared against: run the same helpers with
// Config.Extensions set to load it.

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/scriptllm"
)

// AutoCompaction is one automatic compaction Pi ran while the agent worked.
type AutoCompaction struct {
	Prompt   int // the workload prompt after which (or at whose start) it ran
	Reason   string
	Blocked  time.Duration // compaction_start to compaction_end
	End      time.Time     // compaction_end, as the test received it
	LLMCalls int           // summary requests the model received meanwhile
	Entry    Entry         // the compaction entry Pi appended
}

// autoCompactionSettings make Pi compact every few prompts of the workload: a 32k window
// with 8k reserved, so the threshold is about 23.8k tokens and about 8k stay verbatim.
var autoCompactionSettings = Config{
	ContextWindow: 32000,
	Compaction:    Compaction{Enabled: true, ReserveTokens: 8192, KeepRecentTokens: 8000},
}

// RunAutoCompactions runs prompts workload prompts with automatic compaction on, checks
// the request after every compaction (summary wrapper, kept messages, no orphan tool
// result, smaller) and the file at the end (compactor context equals Pi's, nothing off
// the path), and returns the compactions.
func RunAutoCompactions(t *testing.T, cfg Config, prompts int) (*Env, []AutoCompaction) {
	t.Helper()
	e := NewEnv(t, cfg)
	var out []AutoCompaction
	for n := 1; n <= prompts; n++ {
		llmMark := e.LLM.Count()
		run, err := e.Pi.Prompt(e.Ctx(3*time.Minute), e.Work.Prompt(n))
		if err != nil {
			t.Fatalf("prompt %d: %v", n, err)
		}
		for i, ev := range run.Events {
			if ev.Type != "compaction_start" {
				continue
			}
			var s struct {
				Reason string `json:"reason"`
			}
			_ = ev.Decode(&s)
			blocked, calls := compactionWindow(t, e, run.From+i, llmMark)
			end := time.Now()
			if sp := compactionSpans(e); len(sp) > len(out) {
				end = sp[len(out)].End
			}
			file := e.SessionFile()
			comps := entriesOfType(ReadEntries(t, file), "compaction")
			if len(comps) == 0 {
				t.Fatalf("prompt %d: Pi reported a compaction but wrote none", n)
			}
			out = append(out, AutoCompaction{Prompt: n, Reason: s.Reason, Blocked: blocked, End: end, LLMCalls: calls, Entry: comps[len(comps)-1]})
		}
	}
	// One more prompt, so that a compaction after the last prompt has a request after it
	// too (its own compactions, if any, are not counted).
	if _, err := e.Pi.Prompt(e.Ctx(3*time.Minute), e.Work.Prompt(prompts+1)); err != nil {
		t.Fatalf("prompt %d: %v", prompts+1, err)
	}
	file := e.SessionFile()
	// The request right after each compaction, against the request right before it.
	reqs := e.LLM.Requests()
	for _, c := range out {
		var stamp string
		if err := c.Entry.Field("timestamp", &stamp); err != nil {
			t.Fatal(err)
		}
		ts, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil {
			t.Fatalf("compaction %s: timestamp %q: %v", c.Entry.ID, stamp, err)
		}
		var before, next *scriptllm.Request
		for i := range reqs {
			r := &reqs[i]
			if r.Kind != scriptllm.KindAgent {
				continue
			}
			if r.Time.Before(ts) {
				before = r
			} else if next == nil {
				next = r
			}
		}
		if before == nil || next == nil {
			t.Errorf("compaction %s: no agent request before or after it", c.Entry.ID)
			continue
		}
		checkCompactedRequest(t, *next, file, c.Entry, *before)
	}
	CheckContextsEqual(t, file)
	CheckAllOnPath(t, file)
	return e, out
}

// TestAutoCompactionPiOnly: Pi's automatic compaction while the agent works, without any
// extension: the agent is blocked for the whole summary call (5 s), with the summary
// calls running during the block.
func TestAutoCompactionPiOnly(t *testing.T) {
	_, comps := RunAutoCompactions(t, autoCompactionSettings, workloadPrompts)
	if len(comps) < 2 {
		t.Fatalf("%d automatic compactions over %d prompts, want at least 2", len(comps), workloadPrompts)
	}
	var blocked []time.Duration
	for _, c := range comps {
		figure(t, "auto.compaction", fmt.Sprintf("after prompt %d (%s): blocked %s, %d LLM calls during it",
			c.Prompt, c.Reason, c.Blocked.Round(time.Millisecond), c.LLMCalls))
		blocked = append(blocked, c.Blocked)
		if c.Reason != "threshold" {
			t.Errorf("compaction after prompt %d: reason %q, want threshold", c.Prompt, c.Reason)
		}
		if c.Blocked < scriptllm.DefaultSummaryDelay || c.LLMCalls == 0 {
			t.Errorf("compaction after prompt %d blocked %s with %d LLM calls; Pi alone must wait for its summary (%s)", c.Prompt, c.Blocked, c.LLMCalls, scriptllm.DefaultSummaryDelay)
		}
	}
	slices.Sort(blocked)
	figure(t, "auto.compactions", len(comps))
	figure(t, "auto.blocked_median", blocked[len(blocked)/2].Round(time.Millisecond))
}

// TestManualCompactCustomInstructions: RPC compact with customInstructions reaches Pi's
// summary request, and the next request is the compacted context.
func TestManualCompactCustomInstructions(t *testing.T) {
	e := NewEnv(t, Config{})
	e.Workload(1, 12)
	file := e.SessionFile()
	before := e.LastAgentRequest()
	const focus = "Focus on the notes files and their retry counts."
	mark, llmMark := e.Pi.Mark(), e.LLM.Count()
	if _, err := e.Pi.Call(e.Ctx(2*time.Minute), map[string]any{"type": "compact", "customInstructions": focus}); err != nil {
		t.Fatal(err)
	}
	blocked, calls := compactionWindow(t, e, mark, llmMark)
	figure(t, "manual_instructions.blocked", blocked.Round(time.Millisecond))
	figure(t, "manual_instructions.llm_calls", calls)
	with := 0
	for _, r := range e.LLM.Requests()[llmMark:] {
		if r.Kind == scriptllm.KindSummary && strings.Contains(r.Messages[len(r.Messages)-1].Content, focus) {
			with++
		}
	}
	if with == 0 {
		t.Errorf("no summary request carried the custom instructions %q", focus)
	}
	comp := lastEntry(t, file)
	if comp.Type != "compaction" {
		t.Fatalf("the last entry is %s, not Pi's compaction", comp.Type)
	}
	llmMark = e.LLM.Count()
	if _, err := e.Pi.Prompt(e.Ctx(2*time.Minute), e.Work.Prompt(13)); err != nil {
		t.Fatal(err)
	}
	checkCompactedRequest(t, e.NextAgentRequest(llmMark), file, comp, before)
	CheckContextsEqual(t, file)
}
