//go:build e2e

package e2e

// The live-agent scenarios (docs/architecture.md "Live agents"), each asserted on the request Pi sends
// next. They are written against what a live agent requires of compactor: no append while a
// turn is in progress (skipped, "turn in progress"), an append that never leaves Pi's
// entries off its path, and a paid summary salvaged when Pi only appended meanwhile.

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/scriptllm"
)

// (a) Pi idle, `compactor compact FILE`, RPC switch_session to the same file, next
// prompt: the summary wrapped as Pi wraps it, exactly the kept messages, no orphan tool
// result, a smaller request; Pi's new entries chain from the compaction.
func TestScenarioA_IdleCompactThenSwitchSession(t *testing.T) {
	e := NewEnv(t, Config{})
	e.Workload(1, workloadPrompts)
	file := e.SessionFile()
	before := e.LastAgentRequest()
	leaf := lastEntry(t, file)

	res := RunProc(t, 3*time.Minute, llmEnv, compactorBin(), append([]string{"compact", file, "--json"}, e.llmFlags()...)...)
	c := ParseCompact(t, res)
	figure(t, "a.compactor_compact_duration", res.Duration().Round(time.Millisecond))
	figure(t, "a.outcome", c.Outcome+" "+c.Reason)
	figure(t, "a.tokens_before_after", []int{c.TokensBefore, c.TokensAfter})
	if res.Code != 0 || c.Outcome != "done" {
		t.Fatalf("compactor compact on an idle session: exit %d, outcome %q (%s)\n%s", res.Code, c.Outcome, c.Reason, tail(res.Stderr, 2000))
	}
	comp := checkAppendedCompaction(t, file, c.EntryID, leaf.ID)
	CheckContextsEqual(t, file)
	reloadAndCheck(t, e, file, comp, before)
}

// (b) compaction attempted while a bash tool runs: skipped with "turn in progress", the
// file untouched, and Pi's next request (after the tool result) is the whole context.
func TestScenarioB_CompactDuringBashTool(t *testing.T) {
	e := NewEnv(t, Config{})
	e.Workload(1, workloadPrompts)
	file := e.SessionFile()
	prompt := "Task 25: run the slow build and tell me when it is done."
	e.Plan.Add(prompt, scriptllm.Turn{Text: "Running the build.", ToolCalls: []scriptllm.Call{scriptllm.Bash("sleep 6; echo build finished")}})
	mark, llmMark := e.Pi.Mark(), e.LLM.Count()
	if _, err := e.Pi.Call(e.Ctx(time.Minute), map[string]any{"type": "prompt", "message": prompt}); err != nil {
		t.Fatal(err)
	}
	callID := awaitToolStart(t, e, mark, "sleep 6")
	// The turn is in progress in the file: it ends with the assistant's call, no result.
	WaitForLastEntry(t, file, func(en Entry) bool { return messageRole(en) == "assistant" && strings.Contains(string(en.Raw), callID) })
	snapshot := readFile(t, file)

	res := RunProc(t, 3*time.Minute, llmEnv, compactorBin(), append([]string{"compact", file, "--json"}, e.llmFlags()...)...)
	atExit := readFile(t, file)
	toolDone := toolEndedBefore(e, mark, callID, res.End)
	c := ParseCompact(t, res)
	figure(t, "b.compactor_compact_duration", res.Duration().Round(time.Millisecond))
	figure(t, "b.outcome", c.Outcome+" "+c.Reason)
	figure(t, "b.summary_requests_during_compact", summaryRequestsBetween(e, llmMark, res.Start, res.End))
	if res.Code != 0 || c.Outcome != "skipped" || !strings.Contains(c.Reason, "turn in progress") {
		t.Errorf("compactor compact during a bash tool: exit %d, outcome %q, reason %q; want skipped, \"turn in progress\"\n%s", res.Code, c.Outcome, c.Reason, tail(res.Stderr, 2000))
	}
	if !toolDone && !bytes.Equal(atExit, snapshot) {
		t.Errorf("the file changed while the turn was in progress (%d -> %d bytes) and Pi had not written anything", len(snapshot), len(atExit))
	}
	if toolDone {
		t.Logf("the bash tool ended before compactor did (%s): only the prefix of the file is compared", res.Duration())
	}

	if err := e.Pi.AwaitIdle(e.Ctx(2*time.Minute), mark); err != nil {
		t.Fatal(err)
	}
	final := readFile(t, file)
	if !bytes.HasPrefix(final, snapshot) {
		t.Errorf("the file was rewritten: it no longer starts with the %d bytes it had during the turn", len(snapshot))
	}
	if n := len(entriesOfType(ReadEntries(t, file), "compaction")); n != 0 {
		t.Errorf("%d compaction entries in the file after a compaction attempted mid-turn", n)
	}
	next := awaitStep(t, e, llmMark, prompt, 1)
	CheckRequestIsContext(t, next, file, toolResultEntry(t, file, callID).ID)
	CheckAllOnPath(t, file)
}

// (c) the agent runs `enqueue --force --wait` for its own session from its bash tool,
// against a running `compactor run`: skipped (turn in progress), nothing orphaned.
func TestScenarioC_AgentEnqueuesItsOwnSession(t *testing.T) {
	url := StartNATS(t)
	e := NewEnv(t, Config{})
	svc := e.StartService(url)
	e.Workload(1, workloadPrompts)
	file := e.SessionFile()
	prompt := "Task 25: ask compactor to compact this session now and wait for it."
	cmd := shellJoin(append([]string{enqueueBin()}, e.enqueueArgs(file, url, "--force", "--wait", "--timeout", "2m")...))
	e.Plan.Add(prompt, scriptllm.Turn{Text: "Asking compactor.", ToolCalls: []scriptllm.Call{scriptllm.Bash(cmd)}})
	llmMark := e.LLM.Count()
	run, err := e.Pi.Prompt(e.Ctx(5*time.Minute), prompt)
	if err != nil {
		t.Fatal(err)
	}
	out, isErr, callID := toolOutput(t, run, "bash")
	ev, ok := ParseJobEvent(out)
	figure(t, "c.enqueue_event", ev)
	figure(t, "c.prompt_duration", run.End.Sub(run.Start).Round(time.Millisecond))
	figure(t, "c.summary_requests_during_prompt", summaryRequestsBetween(e, llmMark, run.Start, run.End))
	if !ok || ev.Outcome != "skipped" || !strings.Contains(ev.Reason, "turn in progress") {
		t.Errorf("enqueue from the agent's own bash tool: event %+v (tool error %t); want skipped, \"turn in progress\"\n%s", ev, isErr, tail(out, 1500))
	}
	if n := len(entriesOfType(ReadEntries(t, file), "compaction")); n != 0 {
		t.Errorf("%d compaction entries appended while the agent's turn was in progress", n)
	}
	next := awaitStep(t, e, llmMark, prompt, 1)
	CheckRequestIsContext(t, next, file, toolResultEntry(t, file, callID).ID)
	// Pi carries on; everything it wrote stays on its path.
	llmMark = e.LLM.Count()
	e.Workload(workloadPrompts+1, workloadPrompts+1)
	checkNextRequest(t, e, llmMark, file)
	CheckAllOnPath(t, file)
	CheckContextsEqual(t, file)
	svc.Stop()
}

// (d) Pi writes during compactor's LLM call (the summary takes 5 s, Pi works through a
// prompt meanwhile): nothing Pi wrote is off the path Pi loads, and the outcome is either
// the summary salvaged (outcome "done" with "salvaged": true, the compaction appended
// against Pi's new leaf once Pi is idle) or skipped.
func TestScenarioD_PiWritesDuringSummaryCall(t *testing.T) {
	e := NewEnv(t, Config{})
	e.Workload(1, workloadPrompts)
	file := e.SessionFile()
	llmMark := e.LLM.Count()
	proc := StartProc(t, llmEnv, compactorBin(), append([]string{"compact", file, "--json"}, e.llmFlags()...)...)
	sum, err := e.LLM.Wait(e.Ctx(time.Minute), llmMark, scriptllm.Summary)
	if err != nil {
		t.Fatalf("compactor made no summary request: %v\n%s", err, tail(proc.Stderr(), 2000))
	}
	run, err := e.Pi.Prompt(e.Ctx(2*time.Minute), e.Work.Prompt(workloadPrompts+1))
	if err != nil {
		t.Fatal(err)
	}
	if got := e.LLM.Requests()[sum.Seq-1]; got.Completed && !got.AnsweredAt.After(run.End) {
		t.Fatalf("the scenario did not happen: the summary was answered (%s) before Pi finished its prompt (%s)", got.AnsweredAt, run.End)
	}
	before := e.LastAgentRequest()
	piLeaf := lastEntry(t, file)
	res := proc.Wait(e.Ctx(3 * time.Minute))
	c := ParseCompact(t, res)
	figure(t, "d.pi_prompt_during_summary_call", run.End.Sub(run.Start).Round(time.Millisecond))
	figure(t, "d.compactor_compact_duration", res.Duration().Round(time.Millisecond))
	figure(t, "d.outcome", c.Outcome+" "+c.Reason)

	switch {
	case res.Code == 0 && c.Outcome == "done":
		comp := checkAppendedCompaction(t, file, c.EntryID, piLeaf.ID)
		CheckAllOnPath(t, file)
		CheckContextsEqual(t, file)
		reloadAndCheck(t, e, file, comp, before)
	case res.Code == 0 && c.Outcome == "skipped":
		if n := len(entriesOfType(ReadEntries(t, file), "compaction")); n != 0 {
			t.Errorf("skipped, yet %d compaction entries in the file", n)
		}
		llmMark := e.LLM.Count()
		e.Workload(workloadPrompts+2, workloadPrompts+2)
		checkNextRequest(t, e, llmMark, file)
		CheckAllOnPath(t, file)
	default:
		t.Errorf("compactor compact while Pi wrote during its LLM call: exit %d, outcome %q, reason %q; want the summary salvaged (compacted against Pi's new leaf) or skipped\n%s",
			res.Code, c.Outcome, c.Reason, tail(res.Stderr, 2000))
		CheckAllOnPath(t, file, c.EntryID)
	}
}

// (e) as (a), through `compactor run` and `enqueue --force --wait` from outside the
// agent while Pi is idle.
func TestScenarioE_ServiceEnqueueWaitThenSwitchSession(t *testing.T) {
	url := StartNATS(t)
	e := NewEnv(t, Config{})
	svc := e.StartService(url)
	e.Workload(1, workloadPrompts)
	file := e.SessionFile()
	before := e.LastAgentRequest()
	leaf := lastEntry(t, file)

	res := RunProc(t, 3*time.Minute, nil, enqueueBin(), e.enqueueArgs(file, url, "--force", "--wait", "--timeout", "2m")...)
	ev, ok := ParseJobEvent(res.Stdout)
	figure(t, "e.enqueue_wait_duration", res.Duration().Round(time.Millisecond))
	figure(t, "e.enqueue_event", ev)
	if res.Code != 0 || !ok || ev.Outcome != "done" {
		t.Fatalf("enqueue --wait on an idle session: exit %d, event %+v; want done\n%s", res.Code, ev, tail(res.Stderr, 2000))
	}
	comp := checkAppendedCompaction(t, file, ev.EntryID, leaf.ID)
	CheckContextsEqual(t, file)
	reloadAndCheck(t, e, file, comp, before)
	svc.Stop()
}

// summaryRequestsBetween counts the summary requests after llmMark that arrived in
// [from, to].
func summaryRequestsBetween(e *Env, llmMark int, from, to time.Time) int {
	n := 0
	for _, r := range e.LLM.Requests()[llmMark:] {
		if r.Kind == scriptllm.KindSummary && !r.Time.Before(from) && !r.Time.After(to) {
			n++
		}
	}
	return n
}

// reloadAndCheck reloads the compacted file into Pi with switch_session, sends the next
// prompt and checks the request Pi sends (checkCompactedRequest) and that Pi's new
// entries chain from the compaction.
func reloadAndCheck(t testing.TB, e *Env, file string, comp Entry, before scriptllm.Request) {
	t.Helper()
	sizeBefore := len(readFile(t, file))
	if err := e.Pi.SwitchSession(e.Ctx(30*time.Second), file); err != nil {
		t.Fatal(err)
	}
	if n := len(readFile(t, file)); n != sizeBefore {
		t.Errorf("switch_session wrote to the file (%d -> %d bytes)", sizeBefore, n)
	}
	llmMark := e.LLM.Count()
	if _, err := e.Pi.Prompt(e.Ctx(2*time.Minute), "Task 99: carry on from the summary."); err != nil {
		t.Fatal(err)
	}
	checkCompactedRequest(t, e.NextAgentRequest(llmMark), file, comp, before)
	prev := comp.ID
	for _, en := range ReadEntries(t, file) {
		if en.Line <= comp.Line {
			continue
		}
		if en.Parent() != prev {
			t.Errorf("line %d: Pi's entry %s hangs from %s, not from %s: it does not chain from the compaction", en.Line, en.ID, en.Parent(), prev)
		}
		prev = en.ID
	}
	if prev == comp.ID {
		t.Error("Pi wrote nothing after the compaction")
	}
	CheckAllOnPath(t, file)
	CheckContextsEqual(t, file)
}

// checkAppendedCompaction asserts that the file's last entry is the compaction id,
// hanging from parent, and returns it.
func checkAppendedCompaction(t testing.TB, file, id, parent string) Entry {
	t.Helper()
	comp := lastEntry(t, file)
	if comp.Type != "compaction" || comp.ID != id || comp.Parent() != parent {
		t.Fatalf("the last entry is %s %s (parent %s); want the compaction %s hanging from the leaf %s", comp.Type, comp.ID, comp.Parent(), id, parent)
	}
	return comp
}

func lastEntry(t testing.TB, file string) Entry {
	t.Helper()
	es := ReadEntries(t, file)
	if len(es) == 0 {
		t.Fatalf("%s has no entries", file)
	}
	return es[len(es)-1]
}

func readFile(t testing.TB, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// awaitToolStart waits for Pi to start a bash call whose command contains substr and
// returns the call id.
func awaitToolStart(t testing.TB, e *Env, mark int, substr string) string {
	t.Helper()
	var callID string
	_, _, err := e.Pi.WaitEvent(e.Ctx(time.Minute), mark, func(ev Event) bool {
		if ev.Type != "tool_execution_start" {
			return false
		}
		var s struct {
			ToolCallID string `json:"toolCallId"`
			ToolName   string `json:"toolName"`
			Args       struct {
				Command string `json:"command"`
			} `json:"args"`
		}
		if ev.Decode(&s) != nil || s.ToolName != "bash" || !strings.Contains(s.Args.Command, substr) {
			return false
		}
		callID = s.ToolCallID
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return callID
}

// toolEndedBefore reports whether Pi had reported the end of call callID by time at.
func toolEndedBefore(e *Env, mark int, callID string, at time.Time) bool {
	for _, ev := range e.Pi.Events(mark) {
		if ev.Type == "tool_execution_end" && strings.Contains(string(ev.Raw), callID) && !ev.At.After(at) {
			return true
		}
	}
	return false
}

// toolOutput returns the text of the first tool_execution_end of tool in run, whether it
// was an error, and the call id.
func toolOutput(t testing.TB, run *Run, tool string) (string, bool, string) {
	t.Helper()
	for _, ev := range run.Events {
		if ev.Type != "tool_execution_end" {
			continue
		}
		var s struct {
			ToolCallID string `json:"toolCallId"`
			ToolName   string `json:"toolName"`
			IsError    bool   `json:"isError"`
			Result     struct {
				Content []contentBlock `json:"content"`
			} `json:"result"`
		}
		if err := ev.Decode(&s); err != nil || s.ToolName != tool {
			continue
		}
		return joinText(s.Result.Content, "\n"), s.IsError, s.ToolCallID
	}
	t.Fatalf("no %s tool ran in the prompt", tool)
	return "", false, ""
}

// awaitStep waits for the agent request of prompt at step (model calls since the prompt).
func awaitStep(t testing.TB, e *Env, llmMark int, prompt string, step int) scriptllm.Request {
	t.Helper()
	r, err := e.LLM.Wait(e.Ctx(time.Minute), llmMark, func(r *scriptllm.Request) bool {
		return r.Kind == scriptllm.KindAgent && r.Prompt() == prompt && r.Step() == step
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// toolResultEntry is the entry holding the result of tool call callID.
func toolResultEntry(t testing.TB, file, callID string) Entry {
	t.Helper()
	for _, en := range ReadEntries(t, file) {
		var m struct {
			Role       string `json:"role"`
			ToolCallID string `json:"toolCallId"`
		}
		if en.Type == "message" && en.Field("message", &m) == nil && m.Role == "toolResult" && m.ToolCallID == callID {
			return en
		}
	}
	t.Fatalf("%s has no result for tool call %s", file, callID)
	return Entry{}
}

// checkNextRequest checks the first agent request after llmMark against Pi's context of
// the file at that request's prompt (the leaf Pi built it at).
func checkNextRequest(t testing.TB, e *Env, llmMark int, file string) {
	t.Helper()
	r := e.NextAgentRequest(llmMark)
	if r.Step() != 0 {
		t.Fatalf("request #%d is not the first of its prompt", r.Seq)
	}
	es := ReadEntries(t, file)
	for i := len(es) - 1; i >= 0; i-- {
		var m struct {
			Role    string         `json:"role"`
			Content []contentBlock `json:"content"`
		}
		if es[i].Type == "message" && es[i].Field("message", &m) == nil && m.Role == "user" && joinText(m.Content, "") == r.Prompt() {
			CheckRequestIsContext(t, r, file, es[i].ID)
			return
		}
	}
	t.Fatalf("no user entry for the prompt %q", r.Prompt())
}

// shellJoin quotes words for bash.
func shellJoin(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
