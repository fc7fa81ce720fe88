// Package fakellm is an OpenAI-compatible chat-completions server for tests: a real HTTP
// server (httptest) whose answers are scripted per request — latency, 429 with
// Retry-After, 5xx, hanging, garbage bodies, empty completions, context-length errors —
// and which records what it received (times, headers, bodies, requests in flight).
//
// Its successful answer is a deterministic summary that contains the section headings
// the summarize package asks for, so pipeline tests can check what was written.
package fakellm

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf16"

	"github.com/compactor-dev/compactor/internal/promptcache"
)

// Behavior is what the server does with one request. The zero value answers normally.
type Behavior struct {
	// Latency delays the answer (the request context still ends it early).
	Latency time.Duration
	// Hold, when not nil, delays the answer until it is closed (the request context still
	// ends it early): a test that must act while a summary is being written waits on that
	// moment, not on a duration.
	Hold <-chan struct{}
	// Status, when non-zero and not 200, answers with that status and an OpenAI-style
	// error body (Code/Message, defaults per status).
	Status int
	// Code and Message override the error body's code and message.
	Code, Message string
	// RetryAfter is sent as the Retry-After header (e.g. "1" or an HTTP-date).
	RetryAfter string
	// Hang blocks until the client gives up (its context ends) or the server closes.
	Hang bool
	// Garbage answers 200 with a body that is not JSON.
	Garbage bool
	// Empty answers 200 with a completion whose content is "".
	Empty bool
	// NoChoices answers 200 with an empty choices array.
	NoChoices bool
	// EchoAuth puts the request's Authorization header into the error message (to prove
	// that clients redact secrets an endpoint reflects back).
	EchoAuth bool
	// Text replaces the generated summary text.
	Text string
	// FinishReason replaces "stop" ("length": the answer stopped at its output limit).
	FinishReason string
}

// Request is what the server recorded about one request.
type Request struct {
	Time     time.Time
	Path     string
	Header   http.Header
	Body     []byte
	Model    string
	Messages []Message
	// MaxTokens and MaxCompletionTokens are the output limits as sent (0 = absent).
	MaxTokens, MaxCompletionTokens int
	// PromptTokens is the server's count of the prompt: UTF-16 length of all message
	// contents / 4, rounded up.
	PromptTokens int
	// Status is the status the server answered with.
	Status int
	// CachedTokens is what the answer reported as usage.prompt_tokens_details.cached_tokens
	// (the simulated prompt cache, internal/promptcache).
	CachedTokens int
}

// Message is one chat message of a request.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Server is the fake endpoint. All methods are safe for concurrent use.
type Server struct {
	srv *httptest.Server

	mu          sync.Mutex
	script      []Behavior
	def         Behavior
	window      int
	requests    []Request
	inFlight    int
	maxInFlight int
	modelLists  []Request // GET /models requests (not in requests: they cost nothing)
	closed      chan struct{}
	closeOnce   sync.Once
	cache       *promptcache.Cache
}

// New starts a server. Close it when done (or use Start in tests).
func New() *Server {
	s := &Server{closed: make(chan struct{}), cache: promptcache.New()}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.handle)
	mux.HandleFunc("POST /chat/completions", s.handle)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /models", s.models)
	s.srv = httptest.NewServer(mux)
	return s
}

// Cleanuper is the part of testing.TB that Start needs.
type Cleanuper interface{ Cleanup(func()) }

// Start starts a server and closes it when the test ends.
func Start(t Cleanuper) *Server {
	s := New()
	t.Cleanup(s.Close)
	return s
}

// until waits for ready; false when the client gave up or the server closed first.
func (s *Server) until(r *http.Request, ready <-chan struct{}) bool {
	select {
	case <-ready:
		return true
	case <-r.Context().Done():
		return false
	case <-s.closed:
		return false
	}
}

// URL is the API base URL to configure a client with (ends in /v1).
func (s *Server) URL() string { return s.srv.URL + "/v1" }

// Close releases hanging requests and stops the server.
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.closed) })
	s.srv.Close()
}

// Enqueue scripts the next requests: each request takes the next behavior; when the
// script is used up, requests get the default behavior.
func (s *Server) Enqueue(b ...Behavior) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, b...)
}

// SetDefault sets the behavior for requests beyond the script.
func (s *Server) SetDefault(b Behavior) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.def = b
}

// SetWindow makes the server answer 400 context_length_exceeded, as OpenAI does, to any
// request whose PromptTokens exceed tokens (0 = no limit).
func (s *Server) SetWindow(tokens int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.window = tokens
}

// Requests returns a copy of the recorded requests, in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Count is the number of requests received.
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

// MaxInFlight is the largest number of requests the server was handling at once.
func (s *Server) MaxInFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxInFlight
}

// ModelLists returns the GET /models requests received (a readiness probe's), which
// Requests and Count leave out.
func (s *Server) ModelLists() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.modelLists...)
}

// models answers GET /models: the default behavior's error status when it has one (a key
// refused on every call refuses this too), else a list of one model.
func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	b := s.def
	status := http.StatusOK
	if b.Status != 0 {
		status = b.Status
	}
	s.modelLists = append(s.modelLists, Request{Time: time.Now(), Path: r.URL.Path, Header: r.Header.Clone(), Status: status})
	s.mu.Unlock()
	if status != http.StatusOK {
		writeError(w, status, "invalid_request_error", b.Code, orText(b.Message, http.StatusText(status)), b.RetryAfter)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []map[string]any{{"id": "fake-model", "object": "model"}}})
}

func orText(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

type chatRequest struct {
	Model               string    `json:"model"`
	Messages            []Message `json:"messages"`
	MaxTokens           int       `json:"max_tokens"`
	MaxCompletionTokens int       `json:"max_completion_tokens"`
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	body, cr, prompt, parseErr := readChatRequest(r)
	b, window, idx := s.record(r, now, body, cr, prompt)
	status := http.StatusOK
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.requests[idx].Status = status
		s.mu.Unlock()
	}()
	if !s.delay(r, b) {
		status = 499
		return
	}
	if status = failure(w, r, b, parseErr, window, prompt); status != http.StatusOK {
		return
	}
	if b.Garbage {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"chatcmpl-garbage","choices":[{"message":` + "\x00<html>oops"))
		return
	}
	s.complete(w, idx, now, cr, b, prompt)
}

// readChatRequest reads the request's body and what it asks; prompt is the server's count
// of its messages (UTF-16 length / 4, rounded up).
func readChatRequest(r *http.Request) (body []byte, cr chatRequest, prompt int, parseErr error) {
	body = make([]byte, 0, 4096)
	buf := make([]byte, 32*1024)
	for {
		n, err := r.Body.Read(buf)
		body = append(body, buf[:n]...)
		if err != nil {
			break
		}
	}
	parseErr = json.Unmarshal(body, &cr)
	for _, m := range cr.Messages {
		prompt += len(utf16.Encode([]rune(m.Content)))
	}
	return body, cr, (prompt + 3) / 4, parseErr
}

// record takes the request's behavior (the script's next, else the default) and records
// the request, in flight; idx is its index in the requests.
func (s *Server) record(r *http.Request, now time.Time, body []byte, cr chatRequest, prompt int) (b Behavior, window, idx int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b = s.def
	if len(s.script) > 0 {
		b = s.script[0]
		s.script = s.script[1:]
	}
	idx = len(s.requests)
	s.requests = append(s.requests, Request{
		Time: now, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, Model: cr.Model,
		Messages: cr.Messages, MaxTokens: cr.MaxTokens, MaxCompletionTokens: cr.MaxCompletionTokens,
		PromptTokens: prompt,
	})
	s.inFlight++
	s.maxInFlight = max(s.maxInFlight, s.inFlight)
	return b, s.window, idx
}

// delay waits as b says (latency, hold, hang); false when the client gave up or the
// server closed first.
func (s *Server) delay(r *http.Request, b Behavior) bool {
	if b.Latency > 0 {
		latency := make(chan struct{})
		stop := time.AfterFunc(b.Latency, func() { close(latency) })
		defer stop.Stop()
		if !s.until(r, latency) {
			return false
		}
	}
	if b.Hold != nil && !s.until(r, b.Hold) {
		return false
	}
	if b.Hang {
		select {
		case <-r.Context().Done():
		case <-s.closed:
		}
		return false
	}
	return true
}

// failure answers an error when the request asks for one (a body that is not a chat
// request, b's status, a prompt over the window) and returns its status; 200 when none.
func failure(w http.ResponseWriter, r *http.Request, b Behavior, parseErr error, window, prompt int) int {
	switch {
	case parseErr != nil:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "request body is not a chat completion request: "+parseErr.Error(), "")
		return http.StatusBadRequest
	case b.Status != 0 && b.Status != http.StatusOK:
		status := b.Status
		code, msg := b.Code, b.Message
		if msg == "" {
			msg = http.StatusText(status)
		}
		if b.EchoAuth {
			msg += " (received credentials: " + r.Header.Get("Authorization") + ")"
		}
		typ := "server_error"
		if status == http.StatusTooManyRequests {
			typ = "rate_limit_error"
			if code == "" {
				code = "rate_limit_exceeded"
			}
		} else if status < 500 {
			typ = "invalid_request_error"
		}
		writeError(w, status, typ, code, msg, b.RetryAfter)
		return status
	case window > 0 && prompt > window:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "context_length_exceeded", fmt.Sprintf(
			"This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.",
			window, prompt), "")
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// complete answers a chat completion: b's text, else the deterministic summary, with the
// usage a real endpoint reports (the simulated prompt cache's cached tokens included).
func (s *Server) complete(w http.ResponseWriter, idx int, now time.Time, cr chatRequest, b Behavior, prompt int) {
	text := b.Text
	if text == "" && !b.Empty {
		text = Summary(cr.Messages)
	}
	finish := b.FinishReason
	if finish == "" {
		finish = "stop"
	}
	choices := []map[string]any{{
		"index":         0,
		"message":       map[string]any{"role": "assistant", "content": text},
		"finish_reason": finish,
	}}
	if b.NoChoices {
		choices = []map[string]any{}
	}
	completion := len(utf16.Encode([]rune(text)))/4 + 1
	pm := make([]promptcache.Message, len(cr.Messages))
	for i, m := range cr.Messages {
		pm[i] = promptcache.Message{Role: m.Role, Content: m.Content}
	}
	cachedTokens := s.cache.Lookup(pm)
	s.mu.Lock()
	s.requests[idx].CachedTokens = cachedTokens
	s.mu.Unlock()
	resp := map[string]any{
		"id":      "chatcmpl-fake-" + strconv.Itoa(idx),
		"object":  "chat.completion",
		"created": now.Unix(),
		"model":   cr.Model,
		"choices": choices,
		"usage": map[string]any{
			"prompt_tokens":         prompt,
			"completion_tokens":     completion,
			"total_tokens":          prompt + completion,
			"prompt_tokens_details": map[string]int{"cached_tokens": cachedTokens},
		},
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

func writeError(w http.ResponseWriter, status int, typ, code, msg, retryAfter string) {
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	e := map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}
	if code != "" {
		e["code"] = code
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"error": e})
}

// Summary is the deterministic answer to a chat request: section headings chosen from the
// headings the prompt asks for (turn prefix, branch, or history), each with a line that
// identifies the request (a hash of the prompt and its size), so tests can tell answers
// apart and check that a summary was written from a given prompt.
func Summary(msgs []Message) string {
	var all strings.Builder
	for _, m := range msgs {
		all.WriteString(m.Role)
		all.WriteString(":")
		all.WriteString(m.Content)
		all.WriteString("\n")
	}
	prompt := all.String()
	sum := sha256.Sum256([]byte(prompt))
	id := hex.EncodeToString(sum[:6])
	user := ""
	if len(msgs) > 0 {
		user = msgs[len(msgs)-1].Content
	}
	prev := strings.Contains(user, "<previous-summary>")
	var heads []string
	switch {
	case strings.Contains(user, "## Original Request"):
		heads = []string{"## Original Request", "## Early Progress", "## Context for Suffix"}
	case !strings.Contains(user, "## Critical Context") && strings.Contains(user, "## Goal"):
		heads = []string{"## Goal", "## Constraints & Preferences", "## Progress", "### Done", "### In Progress", "### Blocked", "## Key Decisions", "## Next Steps"}
	default:
		heads = []string{"## Goal", "## Constraints & Preferences", "## Progress", "### Done", "### In Progress", "### Blocked", "## Key Decisions", "## Next Steps", "## Critical Context"}
	}
	var sb strings.Builder
	for i, h := range heads {
		if i > 0 {
			sb.WriteString("\n\n")
		}
		sb.WriteString(h)
		sb.WriteString("\n- fake summary ")
		sb.WriteString(id)
		if i == 0 {
			fmt.Fprintf(&sb, " (prompt %d chars, previous summary: %t)", len(prompt), prev)
		}
	}
	return sb.String()
}
