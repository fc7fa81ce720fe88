//go:build e2e

package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/scriptllm"
)

// Prompts per session: about 55k tokens with the default workload.
const workloadPrompts = 24

// TestBaseline proves the harness: the real Pi works through 24 scripted prompts with
// bash and read calls into a session of 40-80k tokens; compactor reads Pi's file exactly
// as Pi does; Pi's own manual compaction over RPC runs against the scripted summary and
// blocks for the summary's delay; and Pi's next request is the compacted context.
func TestBaseline(t *testing.T) {
	e := NewEnv(t, Config{})
	start := time.Now()
	runs := e.Workload(1, workloadPrompts)
	file := e.SessionFile()
	figure(t, "baseline.workload_duration", time.Since(start).Round(time.Millisecond))

	reqs := e.LLM.Requests()
	tools := map[string]int{}
	for _, r := range reqs {
		if r.Reply != nil {
			for _, c := range r.Reply.ToolCalls {
				tools[c.Name]++
			}
		}
	}
	last := e.LastAgentRequest()
	tokens, err := e.Pi.ContextTokens(e.Ctx(30 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	figure(t, "baseline.prompts", len(runs))
	figure(t, "baseline.model_requests", len(reqs))
	figure(t, "baseline.tool_calls", tools)
	figure(t, "baseline.pi_context_tokens", tokens)
	figure(t, "baseline.last_request_prompt_tokens", last.PromptTokens)
	figure(t, "baseline.last_request_bytes", last.Size())
	if tools["bash"] == 0 || tools["read"] == 0 {
		t.Errorf("the workload made no bash or no read calls: %v", tools)
	}
	if tokens < 40000 || tokens > 80000 {
		t.Errorf("session has %d tokens (Pi's estimate), want 40-80k", tokens)
	}
	for _, r := range reqs {
		if r.Kind == scriptllm.KindAgent {
			CheckPairing(t, r)
		}
	}
	// The last request of the last prompt is exactly what the file holds up to the entry
	// before Pi's final answer.
	es := ReadEntries(t, file)
	CheckRequestIsContext(t, last, file, es[len(es)-2].ID)
	// The comparison can fail: the same request against the context one prompt earlier.
	if d := DiffMessages(last.Messages[1:], WireMessages(t, OracleContext(t, file, es[len(es)-6].ID).LLMMessages)); d == "" {
		t.Error("the request/context comparison does not tell two leaves apart")
	}
	CheckContextsEqual(t, file)
	CheckAllOnPath(t, file)

	// Pi's own manual compaction over RPC: blocked for the summary call(s).
	mark, llmMark := e.Pi.Mark(), e.LLM.Count()
	resp, err := e.Pi.Call(e.Ctx(2*time.Minute), map[string]any{"type": "compact"})
	if err != nil {
		t.Fatal(err)
	}
	blocked, calls := compactionWindow(t, e, mark, llmMark)
	figure(t, "baseline.pi_manual_compact_blocked", blocked.Round(time.Millisecond))
	figure(t, "baseline.pi_manual_compact_llm_calls", calls)
	if blocked < scriptllm.DefaultSummaryDelay || calls == 0 {
		t.Errorf("Pi's compaction took %s with %d LLM calls; it must wait for the summary (%s)", blocked, calls, scriptllm.DefaultSummaryDelay)
	}
	var result struct {
		Summary          string `json:"summary"`
		FirstKeptEntryID string `json:"firstKeptEntryId"`
	}
	if err := json.Unmarshal(resp.Data(), &result); err != nil || !strings.Contains(result.Summary, "Scripted summary") {
		t.Errorf("compact response %s (%v)", tail(string(resp.Data()), 400), err)
	}
	es = ReadEntries(t, file)
	comp := es[len(es)-1]
	var summary string
	if comp.Type != "compaction" || comp.Field("summary", &summary) != nil || summary != result.Summary {
		t.Fatalf("the file's last entry is not Pi's compaction: %s", tail(string(comp.Raw), 300))
	}
	CheckContextsEqual(t, file)

	// The next request carries the summary and the kept messages, and is smaller.
	llmMark = e.LLM.Count()
	if _, err := e.Pi.Prompt(e.Ctx(2*time.Minute), e.Work.Prompt(workloadPrompts+1)); err != nil {
		t.Fatal(err)
	}
	next := e.NextAgentRequest(llmMark)
	checkCompactedRequest(t, next, file, comp, last)
	figure(t, "baseline.request_bytes_after_pi_compact", next.Size())
	figure(t, "baseline.request_prompt_tokens_after_pi_compact", next.PromptTokens)
	CheckAllOnPath(t, file)
	CheckContextsEqual(t, file)
}

// compactionWindow finds compaction_start and compaction_end after record mark and
// returns the time between them and the summary requests the model received meanwhile.
func compactionWindow(t testing.TB, e *Env, mark, llmMark int) (time.Duration, int) {
	t.Helper()
	startEv, endEv := compactionEvents(t, e, mark)
	var end struct {
		Aborted      bool   `json:"aborted"`
		ErrorMessage string `json:"errorMessage"`
		Result       any    `json:"result"`
	}
	if err := endEv.Decode(&end); err != nil || end.Aborted || end.ErrorMessage != "" || end.Result == nil {
		t.Errorf("compaction_end: %s", tail(string(endEv.Raw), 400))
	}
	calls := 0
	for _, r := range e.LLM.Requests()[llmMark:] {
		if r.Kind == scriptllm.KindSummary && !r.Time.Before(startEv.At.Add(-time.Second)) && r.Time.Before(endEv.At) {
			calls++
		}
	}
	return endEv.At.Sub(startEv.At), calls
}

// compactionEvents waits for Pi's compaction_start after record mark and the
// compaction_end after it.
func compactionEvents(t testing.TB, e *Env, mark int) (start, end Event) {
	t.Helper()
	start, i, err := e.Pi.WaitEvent(e.Ctx(time.Minute), mark, IsType("compaction_start"))
	if err != nil {
		t.Fatal(err)
	}
	end, _, err = e.Pi.WaitEvent(e.Ctx(2*time.Minute), i, IsType("compaction_end"))
	if err != nil {
		t.Fatal(err)
	}
	return start, end
}

// checkCompactedRequest asserts the request Pi sends after a compaction: the system
// prompt, the compaction's summary wrapped as Pi wraps it, then exactly the kept
// messages and what came after them (Pi's context of the file at the request's leaf), no
// orphan tool result, and a smaller request than before.
func checkCompactedRequest(t testing.TB, next scriptllm.Request, file string, comp Entry, before scriptllm.Request) {
	t.Helper()
	var summary, firstKept string
	if err := comp.Field("summary", &summary); err != nil {
		t.Fatal(err)
	}
	if err := comp.Field("firstKeptEntryId", &firstKept); err != nil {
		t.Fatal(err)
	}
	if len(next.Messages) < 3 || next.Messages[1].Role != "user" || next.Messages[1].Content != summaryPrefix+summary+summarySuffix {
		got := "(none)"
		if len(next.Messages) > 1 {
			got = brief(next.Messages[1])
		}
		t.Errorf("request #%d does not carry the compaction summary as Pi wraps it; message 1: %s", next.Seq, got)
	}
	// The leaf of the request: the user prompt Pi wrote after the compaction; or, when the
	// first message after it is not one (Pi 1.x compacted in the middle of a run, right
	// after a tool's results), the compaction itself: the run goes on from there.
	leaf := comp.ID
	for _, e := range ReadEntries(t, file) {
		if r := messageRole(e); e.Line > comp.Line && r != "" && r != "system" {
			if r == "user" {
				leaf = e.ID
			}
			break
		}
	}
	c := CheckRequestIsContext(t, next, file, leaf)
	// The kept part starts at firstKeptEntryId: the first message that is not the
	// compaction's own (its summary, and in Pi 1.x its system checkpoint).
	var kept string
	for _, id := range c.MessageEntryIDs {
		if deref(id) != comp.ID {
			kept = deref(id)
			break
		}
	}
	if kept != firstKept {
		t.Errorf("the first kept message is not firstKeptEntryId %s: message entries %v", firstKept, derefAll(c.MessageEntryIDs))
	}
	if next.Size() >= before.Size() {
		t.Errorf("request after compaction is %d bytes, not smaller than the %d before", next.Size(), before.Size())
	}
	figure(t, "request_bytes_before", before.Size())
	figure(t, "request_bytes_after", next.Size())
	figure(t, "request_prompt_tokens_before", before.PromptTokens)
	figure(t, "request_prompt_tokens_after", next.PromptTokens)
}

func derefAll(ps []*string) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = deref(p)
	}
	return out
}
