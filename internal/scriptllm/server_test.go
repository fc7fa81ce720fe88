package scriptllm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// waitDone returns the first request once its answer is complete (the client can finish
// reading a response a moment before the server records it).
func waitDone(t *testing.T, s *Server) Request {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := s.Wait(ctx, 0, Done(nil))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func client(s *Server) *openai.Client {
	cfg := openai.DefaultConfig("test-key")
	cfg.BaseURL = s.URL()
	return openai.NewClientWithConfig(cfg)
}

var bashTool = openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
	Name: "bash", Parameters: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}}}`),
}}

// An agent turn streamed to a real OpenAI client: text, two tool calls with JSON
// arguments, finish_reason tool_calls, and the usage chunk the client asked for, with
// prompt tokens counted from the request.
func TestStreamedAgentTurn(t *testing.T) {
	plan := NewPlan(nil)
	plan.Add("list files", Turn{
		Text:      "Listing — naïve 日本語 🙂 first. " + strings.Repeat("long text ", 30),
		ToolCalls: []Call{Bash("ls -la; echo 'é'"), Read("notes/ü.md")},
	})
	s := StartTest(t, WithScript(plan))
	msgs := []openai.ChatCompletionMessage{
		{Role: "system", Content: "You are a test."},
		{Role: "user", Content: "list files"},
	}
	stream, err := client(s).CreateChatCompletionStream(context.Background(), openai.ChatCompletionRequest{
		Model: "m", Messages: msgs, Tools: []openai.Tool{bashTool}, Stream: true,
		StreamOptions: &openai.StreamOptions{IncludeUsage: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var text strings.Builder
	calls := map[int]*openai.ToolCall{}
	var finish openai.FinishReason
	var usage *openai.Usage
	chunks := 0
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		chunks++
		if resp.Usage != nil {
			usage = resp.Usage
		}
		for _, c := range resp.Choices {
			text.WriteString(c.Delta.Content)
			if c.FinishReason != "" {
				finish = c.FinishReason
			}
			for _, tc := range c.Delta.ToolCalls {
				if tc.Index == nil {
					t.Fatalf("tool call delta without index: %+v", tc)
				}
				acc := calls[*tc.Index]
				if acc == nil {
					acc = &openai.ToolCall{}
					calls[*tc.Index] = acc
				}
				if tc.ID != "" {
					acc.ID = tc.ID
				}
				if tc.Function.Name != "" {
					acc.Function.Name = tc.Function.Name
				}
				acc.Function.Arguments += tc.Function.Arguments
			}
		}
	}
	want := plan.turns["list files"][0]
	if text.String() != want.Text {
		t.Errorf("text = %q, want %q", text.String(), want.Text)
	}
	if chunks < 6 {
		t.Errorf("only %d chunks: the answer should be streamed in pieces", chunks)
	}
	if finish != openai.FinishReasonToolCalls {
		t.Errorf("finish_reason = %q, want tool_calls", finish)
	}
	if len(calls) != 2 {
		t.Fatalf("got %d tool calls, want 2", len(calls))
	}
	for i, c := range want.ToolCalls {
		got := calls[i]
		var args any
		if err := json.Unmarshal([]byte(got.Function.Arguments), &args); err != nil {
			t.Fatalf("call %d arguments are not JSON: %v (%q)", i, err, got.Function.Arguments)
		}
		if got.Function.Name != c.Name || !reflect.DeepEqual(args, c.Args) || !strings.HasPrefix(got.ID, "call_") {
			t.Errorf("call %d = %s %s %v, want %s %v", i, got.ID, got.Function.Name, args, c.Name, c.Args)
		}
	}
	if calls[0].ID == calls[1].ID {
		t.Errorf("two calls share the id %s", calls[0].ID)
	}
	r := waitDone(t, s)
	if s.Count() != 1 {
		t.Fatalf("recorded %d requests, want 1", s.Count())
	}
	if r.Kind != KindAgent || !r.Stream || !r.IncludeUsage || r.Prompt() != "list files" || r.Step() != 0 || !r.Completed || r.Status != 200 {
		t.Errorf("recorded %s prompt %q step %d", r.String(), r.Prompt(), r.Step())
	}
	// "You are a test." + "list files" = 25 UTF-16 units -> 7 tokens.
	if r.PromptTokens != 7 {
		t.Errorf("prompt tokens = %d, want 7", r.PromptTokens)
	}
	if usage == nil || usage.PromptTokens != r.PromptTokens || usage.CompletionTokens != r.CompletionTokens ||
		usage.TotalTokens != r.PromptTokens+r.CompletionTokens || r.CompletionTokens == 0 {
		t.Errorf("usage chunk = %+v, recorded prompt %d completion %d", usage, r.PromptTokens, r.CompletionTokens)
	}
}

// The raw SSE stream: every event is "data: JSON\n\n", the usage chunk has no choices
// and comes after the finish_reason, and the stream ends with [DONE]. Without
// include_usage there is no usage chunk.
func TestSSEFraming(t *testing.T) {
	s := StartTest(t, WithScript(ScriptFunc(func(*Request) Turn { return Turn{Text: "hi"} })))
	for _, include := range []bool{true, false} {
		body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"bash"}}]`
		if include {
			body += `,"stream_options":{"include_usage":true}`
		}
		resp, err := http.Post(s.URL()+"/chat/completions", "application/json", strings.NewReader(body+"}"))
		if err != nil {
			t.Fatal(err)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Errorf("content type %q", ct)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		events := strings.Split(strings.TrimSuffix(string(raw), "\n\n"), "\n\n")
		if events[len(events)-1] != "data: [DONE]" {
			t.Fatalf("last event %q", events[len(events)-1])
		}
		var sawFinish, sawUsage bool
		for _, e := range events[:len(events)-1] {
			var chunk struct {
				Object  string `json:"object"`
				Choices []struct {
					FinishReason *string `json:"finish_reason"`
				} `json:"choices"`
				Usage *struct{ TotalTokens int } `json:"usage"`
			}
			if err := json.Unmarshal([]byte(strings.TrimPrefix(e, "data: ")), &chunk); err != nil || !strings.HasPrefix(e, "data: ") {
				t.Fatalf("bad event %q: %v", e, err)
			}
			if chunk.Object != "chat.completion.chunk" {
				t.Errorf("object %q", chunk.Object)
			}
			if len(chunk.Choices) > 0 && chunk.Choices[0].FinishReason != nil {
				sawFinish = true
			}
			if chunk.Usage != nil {
				if !sawFinish || len(chunk.Choices) != 0 {
					t.Errorf("usage chunk before the finish_reason or with choices: %s", e)
				}
				sawUsage = true
			}
		}
		if !sawFinish || sawUsage != include {
			t.Errorf("include_usage=%t: finish %t usage %t", include, sawFinish, sawUsage)
		}
	}
}

// A summarization request (no tools) from a non-streaming client, as compactor sends it:
// the deterministic summary, only after the delay, with usage.
func TestSummaryRequestNotStreamed(t *testing.T) {
	const delay = 300 * time.Millisecond
	s := StartTest(t, WithSummaryDelay(delay))
	start := time.Now()
	req := openai.ChatCompletionRequest{Model: "m",
		Messages: []openai.ChatCompletionMessage{{Role: "system", Content: "Summarize."}, {Role: "user", Content: "<conversation>…</conversation>"}},
	}
	//lint:ignore SA1019 compactor sends max_tokens (summarize/openai.go says why); the server must read it
	req.MaxTokens = 100
	resp, err := client(s).CreateChatCompletion(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < delay {
		t.Errorf("answered after %s, before the %s delay", el, delay)
	}
	r := waitDone(t, s)
	if r.Kind != KindSummary || r.Stream || r.MaxTokens != 100 {
		t.Errorf("recorded %s", r.String())
	}
	if got := resp.Choices[0].Message.Content; got != SummaryText(&r) || !strings.Contains(got, "## Goal") {
		t.Errorf("summary %q", got)
	}
	if resp.Choices[0].FinishReason != openai.FinishReasonStop || resp.Usage.PromptTokens != r.PromptTokens {
		t.Errorf("finish %q usage %+v", resp.Choices[0].FinishReason, resp.Usage)
	}
	if r.Duration() < delay {
		t.Errorf("recorded duration %s", r.Duration())
	}
}

// Pi streams its summary requests: the summary arrives as streamed content.
func TestSummaryRequestStreamed(t *testing.T) {
	s := StartTest(t, WithSummaryDelay(0))
	stream, err := client(s).CreateChatCompletionStream(context.Background(), openai.ChatCompletionRequest{
		Model: "m", Stream: true, Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "summarize this"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var text strings.Builder
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range resp.Choices {
			text.WriteString(c.Delta.Content)
		}
	}
	r := waitDone(t, s)
	if text.String() != SummaryText(&r) {
		t.Errorf("streamed %q, want %q", text.String(), SummaryText(&r))
	}
	// Same messages, same summary; other messages, another one.
	r2 := r
	if SummaryText(&r2) != SummaryText(&r) {
		t.Error("summary is not deterministic")
	}
	r2.Messages = append([]Message(nil), r.Messages...)
	r2.Messages[0].Content += "!"
	if SummaryText(&r2) == SummaryText(&r) {
		t.Error("different requests got the same summary")
	}
}

// Wait sees a request while it is in flight; Close ends a pending delay at once and the
// client gets an error instead of hanging.
func TestWaitInFlightAndClose(t *testing.T) {
	s, err := Start("", WithSummaryDelay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := client(s).CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
			Model: "m", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "x"}},
		})
		errc <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := s.Wait(ctx, 0, Summary)
	if err != nil {
		t.Fatal(err)
	}
	if r.Completed {
		t.Error("a request held by its delay is reported completed")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err == nil {
		t.Error("the client got an answer from a closed server")
	}
	if got := s.Requests()[0]; !got.Completed || got.Error == "" {
		t.Errorf("after close: %+v", got)
	}
	// Nothing more arrives: Wait ends with the context.
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if _, err := s.Wait(short, 1, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait = %v, want deadline exceeded", err)
	}
}

// Wait with a predicate on completion, several clients at once (run with -race).
func TestConcurrentRequestsAndLog(t *testing.T) {
	var log bytes.Buffer
	var mu sync.Mutex
	s := StartTest(t, WithSummaryDelay(10*time.Millisecond), WithLog(lockedWriter{&mu, &log}))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := openai.ChatCompletionRequest{Model: "m", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "prompt " + string(rune('a'+i))}}}
			if i%2 == 0 {
				req.Tools = []openai.Tool{bashTool}
			}
			if _, err := client(s).CreateChatCompletion(context.Background(), req); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.Wait(ctx, 0, Done(Agent)); err != nil {
		t.Fatal(err)
	}
	if s.Count() != 8 {
		t.Fatalf("count %d", s.Count())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	sc := bufio.NewScanner(&log)
	sc.Buffer(nil, 1<<20)
	seqs := map[int]bool{}
	kinds := map[Kind]int{}
	for sc.Scan() {
		var r Request
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		var body map[string]any
		if err := json.Unmarshal(r.Body, &body); err != nil || body["model"] != "m" {
			t.Errorf("logged body %s: %v", r.Body, err)
		}
		if !r.Completed || len(r.Messages) != 1 || r.Reply == nil {
			t.Errorf("logged %+v", r)
		}
		seqs[r.Seq] = true
		kinds[r.Kind]++
	}
	if len(seqs) != 8 || kinds[KindAgent] != 4 || kinds[KindSummary] != 4 {
		t.Errorf("log has seqs %v kinds %v", seqs, kinds)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A body that is not a chat request is answered 400 and still recorded.
func TestBadBody(t *testing.T) {
	s := StartTest(t)
	resp, err := http.Post(s.URL()+"/chat/completions", "application/json", strings.NewReader(`{"messages": 7`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("status %d", resp.StatusCode)
	}
	r := waitDone(t, s)
	if r.Error == "" || r.Status != 400 {
		t.Errorf("recorded %s: %q", r.String(), r.Error)
	}
}

// Messages as Pi sends them: array content, null assistant content with tool calls, tool
// results; Prompt and Step find the position in the script; tokens count UTF-16 units.
func TestParseRequest(t *testing.T) {
	body := `{"model":"m","stream":true,"tools":[{"type":"function","function":{"name":"bash"}},{"type":"function","function":{"name":"read"}}],
	"messages":[
	{"role":"system","content":"sys"},
	{"role":"user","content":[{"type":"text","text":"The conversation history before this point was compacted"}]},
	{"role":"user","content":[{"type":"text","text":"do "},{"type":"text","text":"it 🙂"},{"type":"image_url","image_url":{"url":"data:x"}}]},
	{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"ls\"}"}}]},
	{"role":"tool","content":"out","tool_call_id":"c1"},
	{"role":"assistant","content":"ok"},
	{"role":"assistant","content":null,"tool_calls":[{"id":"c2","type":"function","function":{"name":"read","arguments":"{}"}}]},
	{"role":"tool","content":"r","tool_call_id":"c2"}]}`
	r, err := parseRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != KindAgent || !reflect.DeepEqual(r.Tools, []string{"bash", "read"}) {
		t.Errorf("kind %s tools %v", r.Kind, r.Tools)
	}
	if r.Prompt() != "do it 🙂" || r.Step() != 3 {
		t.Errorf("prompt %q step %d", r.Prompt(), r.Step())
	}
	u := r.Messages[2]
	if u.Parts != 3 || u.Images != 1 {
		t.Errorf("user message %+v", u)
	}
	a := r.Messages[3]
	if a.Content != "" || len(a.ToolCalls) != 1 || a.ToolCalls[0] != (ToolCall{ID: "c1", Name: "bash", Arguments: `{"command":"ls"}`}) {
		t.Errorf("assistant %+v", a)
	}
	// sys(3) + 56 + "do it 🙂"(8 units: the emoji is a surrogate pair) + bash(4)+16 + out(3) + ok(2) + read(4)+2 + r(1) = 99 -> 25
	if r.PromptTokens != 25 {
		t.Errorf("prompt tokens %d, want 25", r.PromptTokens)
	}
	if o, u := Orphans(r.Messages); o != nil || u != nil {
		t.Errorf("orphans %v unanswered %v", o, u)
	}
}

func TestOrphans(t *testing.T) {
	call := func(ids ...string) Message {
		m := Message{Role: "assistant"}
		for _, id := range ids {
			m.ToolCalls = append(m.ToolCalls, ToolCall{ID: id, Name: "bash"})
		}
		return m
	}
	res := func(id string) Message { return Message{Role: "tool", ToolCallID: id} }
	user := Message{Role: "user", Content: "u"}
	for _, tc := range []struct {
		name               string
		msgs               []Message
		orphans, unanswerd []string
	}{
		{"paired", []Message{user, call("a", "b"), res("b"), res("a"), user}, nil, nil},
		{"result whose call was summarized away", []Message{user, res("a"), call("b"), res("b")}, []string{"a"}, nil},
		{"result after a later message", []Message{user, call("a"), user, res("a")}, []string{"a"}, []string{"a"}},
		{"result answering an older turn", []Message{call("a"), res("a"), call("b"), res("a"), res("b")}, []string{"a"}, nil},
		{"call without result", []Message{user, call("a", "b"), res("a"), user}, nil, []string{"b"}},
		{"call at the end", []Message{user, call("a")}, nil, []string{"a"}},
		{"duplicate result", []Message{call("a"), res("a"), res("a")}, []string{"a"}, nil},
	} {
		o, u := Orphans(tc.msgs)
		if !reflect.DeepEqual(o, tc.orphans) || !reflect.DeepEqual(u, tc.unanswerd) {
			t.Errorf("%s: orphans %v unanswered %v, want %v %v", tc.name, o, u, tc.orphans, tc.unanswerd)
		}
	}
}

// The plan plays a prompt's turns by step and then ends with the final text; unknown
// prompts go to the fallback.
func TestPlan(t *testing.T) {
	p := NewPlan(ScriptFunc(func(r *Request) Turn { return Turn{Text: "fallback"} }))
	p.Add("slow", Turn{ToolCalls: []Call{Bash("sleep 3")}}, Turn{Text: "mid", ToolCalls: []Call{Read("x")}})
	req := func(prompt string, steps int) *Request {
		r := &Request{Messages: []Message{{Role: "user", Content: "old"}, {Role: "assistant", Content: "a"}, {Role: "user", Content: prompt}}}
		for range steps {
			r.Messages = append(r.Messages, Message{Role: "assistant", ToolCalls: []ToolCall{{ID: "x"}}}, Message{Role: "tool", ToolCallID: "x"})
		}
		return r
	}
	if got := p.Next(req("slow", 0)); got.ToolCalls[0].Args.(map[string]any)["command"] != "sleep 3" {
		t.Errorf("step 0: %+v", got)
	}
	if got := p.Next(req("slow", 1)); got.Text != "mid" {
		t.Errorf("step 1: %+v", got)
	}
	if got := p.Next(req("slow", 2)); got.Text != FinalText("slow") || got.ToolCalls != nil {
		t.Errorf("step 2: %+v", got)
	}
	if got := p.Next(req("other", 0)); got.Text != "fallback" {
		t.Errorf("fallback: %+v", got)
	}
}

// The workload is deterministic per seed and prompt, and its commands really work in a
// shell: step 0 writes the notes file that step 1 reads.
func TestWorkloadRunsInBash(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	w := Workload{Seed: 7, Lines: 20}
	prompt := w.Prompt(3)
	if prompt != w.Prompt(3) || prompt == w.Prompt(4) {
		t.Fatalf("prompts not deterministic or not distinct: %q", prompt)
	}
	req := func(steps int) *Request {
		r := &Request{Messages: []Message{{Role: "system"}, {Role: "user", Content: prompt}}}
		for range steps {
			r.Messages = append(r.Messages, Message{Role: "assistant"}, Message{Role: "tool"})
		}
		return r
	}
	if !reflect.DeepEqual(w.Next(req(0)), w.Next(req(0))) {
		t.Fatal("same request, different turns")
	}
	if reflect.DeepEqual(w.Next(req(0)), (Workload{Seed: 8, Lines: 20}).Next(req(0))) {
		t.Fatal("another seed gives the same turn")
	}
	dir := t.TempDir()
	var file string
	var final Turn
	for step := 0; step < 5; step++ {
		turn := w.Next(req(step))
		if len(turn.ToolCalls) == 0 {
			final = turn
			break
		}
		for _, c := range turn.ToolCalls {
			args := c.Args.(map[string]any)
			switch c.Name {
			case "bash":
				cmd := exec.Command("bash", "-c", args["command"].(string))
				cmd.Dir = dir
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("step %d: %v\n%s", step, err, out)
				}
			case "read":
				file = args["path"].(string)
			default:
				t.Fatalf("unexpected tool %s", c.Name)
			}
		}
	}
	if file == "" || final.Text == "" {
		t.Fatalf("no read step or no final text (file %q, final %+v)", file, final)
	}
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n != 20 || !strings.Contains(final.Text, file) {
		t.Errorf("notes file has %d lines; final text %q", n, final.Text)
	}
}

func TestSplitRunes(t *testing.T) {
	s := "aé日🙂" + strings.Repeat("x", 10)
	parts := splitRunes(s, 3)
	if strings.Join(parts, "") != s || parts[0] != "aé日" || parts[1] != "🙂xx" {
		t.Errorf("%q", parts)
	}
	if splitRunes("", 3) != nil {
		t.Error("empty string has parts")
	}
}

// A Reads prompt reads exactly the files it wrote, of the sizes asked, in one turn, then
// answers; a request whose prompt was summarized away gets the answer.
func TestReadsScript(t *testing.T) {
	w := Reads{Seed: 3, Chars: func(n int) int { return []int{0, 4000, 40_000, 100_000}[n] }}
	for n, want := range map[int][]int{1: {4000}, 2: {40_000}, 3: {40_000, 40_000, 20_000}} {
		files := w.Files(n)
		if len(files) != len(want) {
			t.Fatalf("prompt %d: %d files, want %d", n, len(files), len(want))
		}
		turn := w.Next(&Request{Messages: []Message{{Role: "user", Content: w.Prompt(n)}}})
		if len(turn.ToolCalls) != len(want) {
			t.Fatalf("prompt %d: %d reads", n, len(turn.ToolCalls))
		}
		for i, c := range turn.ToolCalls {
			path := c.Args.(map[string]any)["path"].(string)
			text, ok := files[path]
			if !ok || len(text) != want[i] || !strings.HasSuffix(text, "\n") || strings.ContainsFunc(text, func(r rune) bool { return r > 127 }) {
				t.Fatalf("prompt %d: read %s: %d characters (want %d ASCII)", n, path, len(text), want[i])
			}
			for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
				if len(line) > 200 {
					t.Fatalf("a line of %d characters", len(line))
				}
			}
		}
		done := w.Next(&Request{Messages: []Message{{Role: "user", Content: w.Prompt(n)}, {Role: "assistant"}, {Role: "tool"}}})
		if len(done.ToolCalls) != 0 || !strings.HasPrefix(done.Text, "Done: Read task") {
			t.Fatalf("prompt %d, after the reads: %+v", n, done)
		}
	}
	summarized := w.Next(&Request{Messages: []Message{{Role: "user", Content: "The conversation history before this point was compacted"}, {Role: "assistant"}, {Role: "tool"}}})
	if len(summarized.ToolCalls) != 0 {
		t.Fatalf("after a compaction that summarized the prompt: %+v", summarized)
	}
	if a, b := w.Files(2), (Reads{Seed: 3, Chars: w.Chars}).Files(2); a["reads/002/part-0.md"] != b["reads/002/part-0.md"] {
		t.Fatal("not deterministic")
	}
}
