package summarize

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"golang.org/x/time/rate"

	"github.com/compactor-dev/compactor/pi"
)

// OpenAIConfig configures a summarizer on one OpenAI-compatible chat-completions
// endpoint. One *OpenAI is one endpoint: its concurrency and rate limits are shared by
// every call made through it, so create one per endpoint and share it.
type OpenAIConfig struct {
	// BaseURL is the API root, e.g. "https://api.openai.com/v1" or
	// "http://localhost:11434/v1"; "/chat/completions" is appended.
	BaseURL string
	// The API key comes from APIKey, else the environment variable APIKeyEnv, else the
	// file APIKeyFile (trimmed). It is sent as a bearer token and never logged: every
	// error text and log line is redacted.
	APIKey     string
	APIKeyEnv  string
	APIKeyFile string
	// Model is the model id sent in each request.
	Model string
	// Organization is sent as OpenAI-Organization when set.
	Organization string
	// Headers are added to every request (they cannot replace Authorization).
	Headers map[string]string

	// Timeout bounds one HTTP attempt (default 120 s).
	Timeout time.Duration
	// MaxRetries is the number of retries after the first attempt for 408/409/429/5xx,
	// network errors, timeouts and malformed bodies (default 4; negative means none).
	MaxRetries int
	// BackoffBase and BackoffMax shape the exponential backoff with full jitter
	// (defaults 1 s and 60 s).
	BackoffBase, BackoffMax time.Duration
	// MaxRetryAfter caps how long a Retry-After is waited for inside one call (default
	// 120 s); a longer one ends the call with a KindRateLimited error carrying RetryAfter,
	// for the caller to reschedule.
	MaxRetryAfter time.Duration

	// UseMaxCompletionTokens sends the output limit as max_completion_tokens (newer
	// OpenAI models, reasoning models) instead of max_tokens.
	UseMaxCompletionTokens bool
	// MaxConcurrent bounds the requests in flight (default 4).
	MaxConcurrent int
	// RequestsPerSecond and Burst rate-limit requests (0 = no limit; Burst default 1).
	RequestsPerSecond float64
	Burst             int

	// MaxInputTokens is the model's input window for one request (system prompt +
	// user message). A span whose prompt would exceed it is summarized in sequential
	// chunks with a rolling summary. 0 means unknown: the whole span is sent, and only a
	// context-length error from the endpoint makes it chunk.
	MaxInputTokens int
	// Counter counts prompt tokens for MaxInputTokens (nil: UTF-16 length / 4, rounded up).
	Counter TextCounter

	// Logger receives retry and completion records (default slog.Default()).
	Logger *slog.Logger
	// HTTPClient is the base client (default http.DefaultClient's transport).
	HTTPClient *http.Client

	// Sleep waits between retries (default: a timer that honours ctx). Tests inject it.
	Sleep func(ctx context.Context, d time.Duration) error
	// Rand returns a uniform number in [0,1) for the jitter (default math/rand/v2).
	Rand func() float64
	// Now is the clock for HTTP-date Retry-After values (default time.Now).
	Now func() time.Time
}

// OpenAI is a Summarizer backed by an OpenAI-compatible endpoint.
type OpenAI struct {
	cfg     OpenAIConfig
	client  *openai.Client
	key     string
	log     *slog.Logger
	sem     chan struct{}
	limiter *rate.Limiter
}

// NewOpenAI validates cfg, resolves the API key and builds the client.
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	if strings.TrimSpace(cfg.BaseURL) == "" {
		return nil, errors.New("openai summarizer: base URL is empty")
	}
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, errors.New("openai summarizer: model is empty")
	}
	key, err := resolveAPIKey(cfg)
	if err != nil {
		return nil, err
	}
	cfg.withDefaults()
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	base := http.DefaultTransport
	if cfg.HTTPClient != nil && cfg.HTTPClient.Transport != nil {
		base = cfg.HTTPClient.Transport
	}
	oc := openai.DefaultConfig(key)
	oc.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	oc.OrgID = cfg.Organization
	oc.HTTPClient = &http.Client{Transport: &transport{base: base, headers: cfg.Headers}}
	o := &OpenAI{
		cfg:    cfg,
		client: openai.NewClientWithConfig(oc),
		key:    key,
		log:    log.With("component", "summarize.openai", "model", cfg.Model),
		sem:    make(chan struct{}, cfg.MaxConcurrent),
	}
	if cfg.RequestsPerSecond > 0 {
		burst := cfg.Burst
		if burst <= 0 {
			burst = 1
		}
		o.limiter = rate.NewLimiter(rate.Limit(cfg.RequestsPerSecond), burst)
	}
	return o, nil
}

// resolveAPIKey is cfg's API key: APIKey, else the environment variable APIKeyEnv, else
// the file APIKeyFile ("" when none is configured: an endpoint that needs none).
func resolveAPIKey(cfg OpenAIConfig) (string, error) {
	key := cfg.APIKey
	if key == "" && cfg.APIKeyEnv != "" {
		key = strings.TrimSpace(os.Getenv(cfg.APIKeyEnv))
		if key == "" {
			return "", fmt.Errorf("openai summarizer: environment variable %s is empty or unset", cfg.APIKeyEnv)
		}
	}
	if key == "" && cfg.APIKeyFile != "" {
		b, err := os.ReadFile(cfg.APIKeyFile)
		if err != nil {
			// The path is configuration, not a secret; the content is never shown.
			return "", fmt.Errorf("openai summarizer: reading API key file: %w", err)
		}
		key = strings.TrimSpace(string(b))
		if key == "" {
			return "", fmt.Errorf("openai summarizer: API key file %s is empty", cfg.APIKeyFile)
		}
	}
	return key, nil
}

// withDefaults fills the settings left zero with their defaults (a negative MaxRetries:
// none).
func (cfg *OpenAIConfig) withDefaults() {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 120 * time.Second
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 4
	} else if cfg.MaxRetries < 0 {
		cfg.MaxRetries = 0
	}
	if cfg.BackoffBase <= 0 {
		cfg.BackoffBase = time.Second
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = 60 * time.Second
	}
	if cfg.MaxRetryAfter <= 0 {
		cfg.MaxRetryAfter = 120 * time.Second
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = 4
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleepCtx
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
}

// Summarize implements Summarizer. Spans larger than MaxInputTokens (or rejected by the
// endpoint as too long) are summarized in chunks with a rolling summary.
func (o *OpenAI) Summarize(ctx context.Context, req Request) (Result, error) {
	maxTokens := req.MaxTokens
	if maxTokens <= 0 {
		maxTokens = HistoryMaxTokens(DefaultReserveTokens)
	}
	r := roller{
		window: o.cfg.MaxInputTokens,
		count:  textCounter(o.cfg.Counter),
		call: func(ctx context.Context, prompt string) (Result, error) {
			return o.Complete(ctx, SystemPrompt, prompt, maxTokens)
		},
	}
	res, err := r.run(ctx, req)
	if err == nil && res.Truncated && req.Release.Has(pi.TruncatedSummaryRefused) {
		// Pi refuses such a summary from 0.84.4 rather than write an incomplete checkpoint;
		// the tokens were spent all the same, and the result says so.
		return res, &Error{Kind: KindPermanent, cause: ErrTruncatedSummary,
			Message: fmt.Sprintf("the summary stopped at its output limit (%d tokens, finish_reason length); Pi %s refuses an incomplete summary", maxTokens, req.Release)}
	}
	return res, err
}

// Complete sends one chat completion (system + user message) with retries, and returns
// the text and usage. Errors are *Error values.
func (o *OpenAI) Complete(ctx context.Context, system, user string, maxTokens int) (Result, error) {
	creq := openai.ChatCompletionRequest{
		Model: o.cfg.Model,
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: system},
			{Role: openai.ChatMessageRoleUser, Content: user},
		},
	}
	if o.cfg.UseMaxCompletionTokens {
		creq.MaxCompletionTokens = maxTokens
	} else {
		// max_tokens is deprecated by OpenAI for its own newer models, but it is the field
		// OpenAI-compatible servers (Ollama, vLLM, llama.cpp, most gateways) read, and
		// some reject max_completion_tokens: it stays the default, and
		// --max-tokens-field max_completion_tokens switches.
		//lint:ignore SA1019 deliberate, see above
		creq.MaxTokens = maxTokens
	}
	for attempt := 0; ; attempt++ {
		res, err := o.attempt(ctx, creq)
		if err == nil {
			o.log.Debug("summary completion", "attempts", attempt+1,
				"input_tokens", res.InputTokens, "cached_input_tokens", res.CachedInputTokens, "output_tokens", res.OutputTokens)
			return res, nil
		}
		err.Attempts = attempt + 1
		if !err.Retryable() || err.Kind == KindCanceled || attempt >= o.cfg.MaxRetries || ctx.Err() != nil {
			return Result{}, err
		}
		wait := FullJitterBackoff(attempt, o.cfg.BackoffBase, o.cfg.BackoffMax, o.cfg.Rand())
		if err.RetryAfter > 0 {
			if err.RetryAfter > o.cfg.MaxRetryAfter {
				return Result{}, err
			}
			wait = max(wait, err.RetryAfter)
		}
		o.log.Warn("summary completion failed, retrying",
			"kind", err.Kind.String(), "status", err.Status, "attempt", attempt+1, "wait", wait, "error", err.Message)
		if serr := o.cfg.Sleep(ctx, wait); serr != nil {
			return Result{}, ctxError(serr, attempt+1)
		}
	}
}

// attempt makes one HTTP call under the concurrency and rate limits.
func (o *OpenAI) attempt(ctx context.Context, creq openai.ChatCompletionRequest) (Result, *Error) {
	select {
	case o.sem <- struct{}{}:
	case <-ctx.Done():
		return Result{}, ctxError(ctx.Err(), 0)
	}
	defer func() { <-o.sem }()
	if o.limiter != nil {
		if err := o.limiter.Wait(ctx); err != nil {
			if ctx.Err() != nil {
				return Result{}, ctxError(ctx.Err(), 0)
			}
			return Result{}, &Error{Kind: KindPermanent, Message: "rate limiter: " + o.redact(err.Error())}
		}
	}
	info := &callInfo{}
	actx, cancel := context.WithTimeout(context.WithValue(ctx, callInfoKey{}, info), o.cfg.Timeout)
	defer cancel()
	resp, err := o.client.CreateChatCompletion(actx, creq)
	if err != nil {
		return Result{}, o.classify(ctx, err, info)
	}
	if len(resp.Choices) == 0 {
		return Result{}, &Error{Kind: KindPermanent, Status: info.status, Message: "the response has no choices", cause: ErrEmptyCompletion}
	}
	ch := resp.Choices[0]
	if strings.TrimSpace(ch.Message.Content) == "" {
		return Result{}, &Error{Kind: KindPermanent, Status: info.status,
			Message: fmt.Sprintf("the completion has no text (finish_reason %q)", string(ch.FinishReason)), cause: ErrEmptyCompletion}
	}
	r := Result{
		Text:         ch.Message.Content,
		InputTokens:  resp.Usage.PromptTokens,
		OutputTokens: resp.Usage.CompletionTokens,
		Calls:        1,
		Truncated:    ch.FinishReason == openai.FinishReasonLength,
	}
	if d := resp.Usage.PromptTokensDetails; d != nil {
		r.CachedInputTokens = d.CachedTokens
	}
	return r, nil
}

// classify turns a go-openai error into a redacted *Error.
func (o *OpenAI) classify(ctx context.Context, err error, info *callInfo) *Error {
	if ctx.Err() != nil {
		return ctxError(ctx.Err(), 0)
	}
	info.mu.Lock()
	status, retryAfter, sent := info.status, info.retryAfter, info.sent
	info.mu.Unlock()
	ra := parseRetryAfter(retryAfter, o.cfg.Now())
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	switch {
	case errors.As(err, &apiErr):
		code := ""
		if apiErr.Code != nil {
			code = fmt.Sprint(apiErr.Code)
		}
		e := &Error{Status: apiErr.HTTPStatusCode, Code: o.redact(code), Type: o.redact(apiErr.Type),
			Message: o.redact(apiErr.Message), RetryAfter: ra}
		if isContextLength(e.Status, code, apiErr.Type, apiErr.Message) {
			e.Kind, e.cause = KindContextLength, ErrContextLength
		} else {
			e.Kind = classifyStatus(e.Status)
		}
		return e
	case errors.As(err, &reqErr):
		body := o.redact(string(reqErr.Body))
		e := &Error{Status: reqErr.HTTPStatusCode, Message: "error response: " + clip(body, 300), RetryAfter: ra}
		if isContextLength(e.Status, "", "", body) {
			e.Kind, e.cause = KindContextLength, ErrContextLength
		} else {
			e.Kind = classifyStatus(e.Status)
		}
		return e
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Kind: KindTimeout, Status: status,
			Message: fmt.Sprintf("no answer within %s", o.cfg.Timeout), cause: context.DeadlineExceeded}
	case status >= 200 && status < 300:
		return &Error{Kind: KindTransient, Status: status,
			Message: "cannot decode the chat completion: " + clip(o.redact(err.Error()), 200), cause: ErrMalformedResponse}
	case !sent:
		// The request never left the client (invalid request or URL).
		return &Error{Kind: KindPermanent, Message: "request not sent: " + o.redact(err.Error())}
	default:
		return &Error{Kind: KindTransient, Status: status, Message: "request failed: " + o.redact(err.Error())}
	}
}

// redact removes the API key from a text that came from the endpoint or the transport.
func (o *OpenAI) redact(s string) string {
	if o.key == "" || !strings.Contains(s, o.key) {
		return s
	}
	return strings.ReplaceAll(s, o.key, "[REDACTED]")
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// FullJitterBackoff is the wait before HTTP retry number attempt+1 inside one LLM call:
// exponential backoff with full jitter, u × min(max, base × 2^attempt), where u is uniform
// in [0,1), so many workers hitting one rate-limited endpoint spread out. It is a pure
// function so tests can check it and the client can inject u. (A failed job's redelivery
// delay is pipeline.RedeliveryDelay, deterministic.)
func FullJitterBackoff(attempt int, base, maxDelay time.Duration, u float64) time.Duration {
	if attempt < 0 {
		attempt = 0
	}
	ceil := float64(base) * math.Pow(2, float64(attempt))
	if ceil > float64(maxDelay) {
		ceil = float64(maxDelay)
	}
	if u < 0 {
		u = 0
	}
	if u >= 1 {
		u = math.Nextafter(1, 0)
	}
	return time.Duration(u * ceil)
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP-date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs <= 0 || math.IsNaN(secs) || math.IsInf(secs, 0) {
			return 0
		}
		return time.Duration(secs * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// callInfo carries what the transport saw of one attempt back to the classifier
// (go-openai does not expose the headers of an error response).
type callInfo struct {
	mu         sync.Mutex
	sent       bool
	status     int
	retryAfter string
}

type callInfoKey struct{}

// transport adds the configured headers and records status and Retry-After.
type transport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if len(t.headers) > 0 {
		req = req.Clone(req.Context())
		for k, v := range t.headers {
			if strings.EqualFold(k, "Authorization") {
				continue
			}
			req.Header.Set(k, v)
		}
	}
	info, _ := req.Context().Value(callInfoKey{}).(*callInfo)
	if info != nil {
		info.mu.Lock()
		info.sent = true
		info.mu.Unlock()
	}
	resp, err := t.base.RoundTrip(req)
	if info != nil && resp != nil {
		info.mu.Lock()
		info.status = resp.StatusCode
		info.retryAfter = resp.Header.Get("Retry-After")
		info.mu.Unlock()
	}
	return resp, err
}
