// Package scriptllm is a scripted OpenAI-compatible chat-completions server that a real
// coding agent (Pi, through a custom provider with api "openai-completions") can use as
// its model, for end-to-end tests.
//
// Requests that offer tools are agent turns: a Script answers them with text and tool
// calls, streamed as OpenAI streams them (SSE chunks, tool_calls deltas with an index,
// a finish_reason, and a final usage chunk when stream_options.include_usage asks for
// it). Requests without tools are summarization requests (Pi's compaction and branch
// summaries, compactor's summary calls): they get a deterministic summary after a
// configurable delay (5 s by default), streamed or not as the client asked. Usage is
// computed from the request (chars/4, see CountTokens), so the client's token
// accounting behaves as with a real model.
//
// Every request is recorded (time, kind, body, parsed messages, the answer) and can be
// awaited, so a test can assert on exactly what the client sends next.
package scriptllm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/compactor-dev/compactor/internal/promptcache"
)

// DefaultSummaryDelay is how long a summarization request takes unless configured: long
// enough that whatever blocks on it is measurable, like a real model summarizing.
const DefaultSummaryDelay = 5 * time.Second

// Server is the scripted endpoint. Its methods are safe for concurrent use.
type Server struct {
	script  Script
	summary func(*Request) string
	log     io.Writer

	ln    net.Listener
	http  *http.Server
	done  chan struct{}
	close sync.Once

	mu           sync.Mutex
	summaryDelay time.Duration
	agentDelay   time.Duration
	requests     []*Request
	changed      chan struct{} // closed and replaced whenever requests change
	logErr       error
	cache        *promptcache.Cache
}

// Option configures a Server.
type Option func(*Server)

// WithScript sets the script for agent turns (default: Workload{Seed: 1}).
func WithScript(s Script) Option { return func(srv *Server) { srv.script = s } }

// WithSummaryDelay sets how long summarization requests take (default 5 s; 0 = none).
func WithSummaryDelay(d time.Duration) Option { return func(s *Server) { s.summaryDelay = d } }

// WithAgentDelay sets how long every agent turn takes before it streams (default 0).
func WithAgentDelay(d time.Duration) Option { return func(s *Server) { s.agentDelay = d } }

// WithSummary replaces the summary text (default SummaryText).
func WithSummary(f func(*Request) string) Option { return func(s *Server) { s.summary = f } }

// WithLog writes every completed request as one JSON line to w.
func WithLog(w io.Writer) Option { return func(s *Server) { s.log = w } }

// Start listens on addr ("" = 127.0.0.1 on a random port) and serves until Close.
func Start(addr string, opts ...Option) (*Server, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	s := &Server{
		script:       Workload{Seed: 1},
		summary:      SummaryText,
		summaryDelay: DefaultSummaryDelay,
		done:         make(chan struct{}),
		changed:      make(chan struct{}),
		cache:        promptcache.New(),
	}
	for _, o := range opts {
		o(s)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("scriptllm: listen: %w", err)
	}
	s.ln = ln
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.handle)
	mux.HandleFunc("POST /chat/completions", s.handle)
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.http.Serve(ln) }()
	return s, nil
}

// Cleanuper is the part of testing.TB that StartTest needs.
type Cleanuper interface {
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// StartTest starts a server on a random loopback port and closes it when the test ends.
func StartTest(t Cleanuper, opts ...Option) *Server {
	s, err := Start("", opts...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// URL is the API root to configure a client with (http://127.0.0.1:PORT/v1).
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() + "/v1" }

// Close ends pending delays and stops the server.
func (s *Server) Close() error {
	s.close.Do(func() { close(s.done) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.http.Shutdown(ctx); err != nil {
		_ = s.http.Close()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logErr
}

// SetSummaryDelay changes the delay of summarization requests from now on.
func (s *Server) SetSummaryDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.summaryDelay = d
}

// SetAgentDelay changes the delay of agent turns from now on.
func (s *Server) SetAgentDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.agentDelay = d
}

// Requests returns copies of the recorded requests, in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.requests))
	for i, r := range s.requests {
		out[i] = *r
	}
	return out
}

// Count is the number of requests received so far (the Seq of the latest).
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

// Wait returns the first request with Seq > after that satisfies pred (nil: any),
// waiting for it until ctx ends. pred sees requests in flight too (Completed false) and
// is called again when they complete.
func (s *Server) Wait(ctx context.Context, after int, pred func(*Request) bool) (Request, error) {
	for {
		s.mu.Lock()
		for _, r := range s.requests[min(after, len(s.requests)):] {
			if pred == nil || pred(r) {
				out := *r
				s.mu.Unlock()
				return out, nil
			}
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return Request{}, fmt.Errorf("scriptllm: no matching request after #%d: %w", after, ctx.Err())
		}
	}
}

// Agent is a predicate for Wait: an agent turn.
func Agent(r *Request) bool { return r.Kind == KindAgent }

// Summary is a predicate for Wait: a summarization request.
func Summary(r *Request) bool { return r.Kind == KindSummary }

// Done is a predicate for Wait: a request whose answer is complete and that satisfies
// pred (nil: any).
func Done(pred func(*Request) bool) func(*Request) bool {
	return func(r *Request) bool { return r.Completed && (pred == nil || pred(r)) }
}

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) handle(w http.ResponseWriter, hr *http.Request) {
	received := time.Now()
	body, err := io.ReadAll(hr.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "could not read the request body: "+err.Error())
		return
	}
	req, perr := parseRequest(body)
	if perr != nil {
		req = &Request{Body: jsonOrString(body), Error: perr.Error()}
	}
	req.Time, req.Path = received, hr.URL.Path
	if perr == nil {
		pm := make([]promptcache.Message, len(req.Messages))
		for i, m := range req.Messages {
			pm[i] = promptcache.Message{Role: m.Role, Content: m.Content + toolCallsText(m.ToolCalls)}
		}
		req.CachedTokens = s.cache.Lookup(pm)
	}
	s.mu.Lock()
	req.Seq = len(s.requests) + 1
	s.requests = append(s.requests, req)
	delay := s.agentDelay
	if req.Kind == KindSummary {
		delay = s.summaryDelay
	}
	s.notifyLocked()
	s.mu.Unlock()

	status, turn, completion, answerErr := s.answer(w, hr, req, perr, delay)
	s.mu.Lock()
	req.Completed, req.AnsweredAt, req.Status = true, time.Now(), status
	req.Reply, req.CompletionTokens = turn, completion
	if answerErr != "" {
		req.Error = answerErr
	}
	s.notifyLocked()
	rec := *req
	s.mu.Unlock()
	s.writeLog(&rec)
}

// answer produces the response and reports the status, the turn sent, its token count,
// and an error text (a client that went away, a bad body).
func (s *Server) answer(w http.ResponseWriter, hr *http.Request, req *Request, perr error, delay time.Duration) (int, *Turn, int, string) {
	if perr != nil {
		writeError(w, http.StatusBadRequest, perr.Error())
		return http.StatusBadRequest, nil, 0, ""
	}
	var turn Turn
	if req.Kind == KindAgent {
		turn = s.script.Next(req)
		delay += turn.Delay
	} else {
		turn = Turn{Text: s.summary(req)}
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-hr.Context().Done():
			return 499, nil, 0, "client went away during the delay"
		case <-s.done:
			writeError(w, http.StatusServiceUnavailable, "server closing")
			return http.StatusServiceUnavailable, nil, 0, "server closed during the delay"
		}
	}
	calls := s.wireCalls(req, turn.ToolCalls)
	completion := (utf16Len(turn.Text) + 3) / 4
	for _, c := range calls {
		completion += (utf16Len(c.Function.Name) + utf16Len(c.Function.Arguments) + 3) / 4
	}
	finish := "stop"
	if len(calls) > 0 {
		finish = "tool_calls"
	}
	usage := map[string]any{"prompt_tokens": req.PromptTokens, "completion_tokens": completion, "total_tokens": req.PromptTokens + completion,
		"prompt_tokens_details": map[string]int{"cached_tokens": req.CachedTokens}}
	id := fmt.Sprintf("chatcmpl-scripted-%d", req.Seq)
	created := req.Time.Unix()
	if !req.Stream {
		msg := map[string]any{"role": "assistant", "content": nil}
		if turn.Text != "" || len(calls) == 0 {
			msg["content"] = turn.Text
		}
		if len(calls) > 0 {
			for i := range calls {
				calls[i].Index = nil // only stream deltas carry an index
			}
			msg["tool_calls"] = calls
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
			"usage":   usage,
		})
		return http.StatusOK, &turn, completion, ""
	}
	if err := streamTurn(w, id, created, req.Model, turn.Text, calls, finish, usage, req.IncludeUsage); err != nil {
		return http.StatusOK, &turn, completion, "streaming: " + err.Error()
	}
	return http.StatusOK, &turn, completion, ""
}

// wireCalls gives every call its JSON arguments and an id: the scripted one, or one
// derived from the request's conversation (unique within it, stable across runs).
func (s *Server) wireCalls(req *Request, calls []Call) []wireToolCall {
	out := make([]wireToolCall, len(calls))
	for i, c := range calls {
		args, err := json.Marshal(c.Args)
		if err != nil {
			args = []byte("{}")
		}
		id := c.ID
		if id == "" {
			id = "call_" + hashHex(0, req.Prompt(), fmt.Sprint(req.Step(), "/", len(req.Messages), "/", i))[:24]
		}
		idx := i
		out[i].Index = &idx
		out[i].ID, out[i].Type = id, "function"
		out[i].Function.Name, out[i].Function.Arguments = c.Name, string(args)
	}
	return out
}

// streamTurn writes the answer as OpenAI streams it: a role chunk, content deltas, for
// each tool call a chunk with its id and name followed by argument deltas, a chunk with
// the finish_reason, a usage chunk with no choices (when asked), and [DONE].
func streamTurn(w http.ResponseWriter, id string, created int64, model, text string, calls []wireToolCall, finish string, usage map[string]any, includeUsage bool) error {
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	send := func(choices []any, extra map[string]any) error {
		chunk := map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model, "choices": choices}
		for k, v := range extra {
			chunk[k] = v
		}
		b, err := json.Marshal(chunk)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return err
		}
		if fl != nil {
			fl.Flush()
		}
		return nil
	}
	delta := func(d map[string]any, finish any) []any {
		return []any{map[string]any{"index": 0, "delta": d, "finish_reason": finish}}
	}
	if err := send(delta(map[string]any{"role": "assistant", "content": ""}, nil), nil); err != nil {
		return err
	}
	for _, piece := range splitRunes(text, 64) {
		if err := send(delta(map[string]any{"content": piece}, nil), nil); err != nil {
			return err
		}
	}
	for _, c := range calls {
		first := map[string]any{"index": *c.Index, "id": c.ID, "type": "function", "function": map[string]any{"name": c.Function.Name, "arguments": ""}}
		if err := send(delta(map[string]any{"tool_calls": []any{first}}, nil), nil); err != nil {
			return err
		}
		for _, piece := range splitRunes(c.Function.Arguments, 256) {
			d := map[string]any{"index": *c.Index, "function": map[string]any{"arguments": piece}}
			if err := send(delta(map[string]any{"tool_calls": []any{d}}, nil), nil); err != nil {
				return err
			}
		}
	}
	if err := send(delta(map[string]any{}, finish), nil); err != nil {
		return err
	}
	if includeUsage {
		if err := send([]any{}, map[string]any{"usage": usage}); err != nil {
			return err
		}
	}
	if _, err := io.WriteString(w, "data: [DONE]\n\n"); err != nil {
		return err
	}
	if fl != nil {
		fl.Flush()
	}
	return nil
}

// toolCallsText is what a message's tool calls add to its text for the prompt cache.
func toolCallsText(calls []ToolCall) string {
	var sb strings.Builder
	for _, c := range calls {
		sb.WriteString("\x02" + c.ID + "\x00" + c.Name + "\x00" + c.Arguments)
	}
	return sb.String()
}

// splitRunes cuts s into pieces of at most n runes (never inside a UTF-8 sequence, which
// would not survive JSON encoding).
func splitRunes(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		i, count := 0, 0
		for i < len(s) && count < n {
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
			count++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "param": nil, "code": nil}})
}

func jsonOrString(b []byte) json.RawMessage {
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	q, _ := json.Marshal(string(b))
	return q
}

func (s *Server) writeLog(r *Request) {
	if s.log == nil {
		return
	}
	b, err := json.Marshal(r)
	if err == nil {
		s.mu.Lock()
		_, err = s.log.Write(append(b, '\n'))
		s.mu.Unlock()
	}
	if err != nil {
		s.mu.Lock()
		if s.logErr == nil {
			s.logErr = errors.Join(errors.New("scriptllm: request log"), err)
		}
		s.mu.Unlock()
	}
}

// String describes a request in one line, for test logs.
func (r *Request) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "#%d %s %s stream=%t msgs=%d bytes=%d promptTokens=%d", r.Seq, r.Kind, r.Time.Format("15:04:05.000"), r.Stream, len(r.Messages), r.Size(), r.PromptTokens)
	if r.Completed {
		fmt.Fprintf(&sb, " status=%d in %s", r.Status, r.Duration().Round(time.Millisecond))
	}
	return sb.String()
}
