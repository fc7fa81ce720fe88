package summarize

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
)

const testKey = "sk-test-SECRET-0123456789abcdef"

// sleeps records the waits the client asked for instead of sleeping.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleeps) all() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

func newClient(t *testing.T, srv *fakellm.Server, mod func(*OpenAIConfig)) (*OpenAI, *sleeps, *bytes.Buffer) {
	t.Helper()
	sl := &sleeps{}
	logs := &bytes.Buffer{}
	cfg := OpenAIConfig{
		BaseURL:     srv.URL(),
		APIKey:      testKey,
		Model:       "fake-model",
		Timeout:     5 * time.Second,
		MaxRetries:  3,
		BackoffBase: 100 * time.Millisecond,
		Sleep:       sl.sleep,
		Rand:        func() float64 { return 0.5 },
		Logger:      slog.New(slog.NewTextHandler(&lockedWriter{w: logs}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := NewOpenAI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, sl, logs
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func userMsg(text string) *sessionio.Message {
	return &sessionio.Message{Role: sessionio.RoleUser, Content: sessionio.Content{IsString: true, Text: text}}
}

func assistantMsg(text string) *sessionio.Message {
	return &sessionio.Message{Role: sessionio.RoleAssistant, Content: sessionio.Content{Blocks: []sessionio.Block{{Type: sessionio.BlockText, Text: text}}}}
}

func simpleReq() Request {
	return Request{Task: TaskHistory, Messages: []*sessionio.Message{userMsg("fix the parser"), assistantMsg("done")}, MaxTokens: 100}
}

func TestOpenAISuccessSendsPromptKeyAndLimits(t *testing.T) {
	t.Parallel()
	srv := fakellm.Start(t)
	c, _, _ := newClient(t, srv, func(c *OpenAIConfig) {
		c.Headers = map[string]string{"X-Team": "compactor", "Authorization": "Bearer other"}
		c.Organization = "org-1"
	})
	res, err := c.Summarize(context.Background(), simpleReq())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Text, "## Critical Context") || res.InputTokens == 0 || res.OutputTokens == 0 || res.Calls != 1 {
		t.Fatalf("unexpected result %+v", res)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if got := r.Header.Get("Authorization"); got != "Bearer "+testKey {
		t.Errorf("Authorization %q", got)
	}
	if r.Header.Get("X-Team") != "compactor" || r.Header.Get("OpenAI-Organization") != "org-1" {
		t.Errorf("headers %v", r.Header)
	}
	if r.MaxTokens != 100 || r.MaxCompletionTokens != 0 {
		t.Errorf("limits %d/%d", r.MaxTokens, r.MaxCompletionTokens)
	}
	if len(r.Messages) != 2 || r.Messages[0].Content != SystemPrompt || r.Messages[1].Content != BuildPrompt(simpleReq()) {
		t.Errorf("messages %+v", r.Messages)
	}
	if res.InputTokens != r.PromptTokens {
		t.Errorf("usage %d, server counted %d", res.InputTokens, r.PromptTokens)
	}

	c2, _, _ := newClient(t, srv, func(c *OpenAIConfig) { c.UseMaxCompletionTokens = true })
	if _, err := c2.Summarize(context.Background(), simpleReq()); err != nil {
		t.Fatal(err)
	}
	if r := srv.Requests()[1]; r.MaxTokens != 0 || r.MaxCompletionTokens != 100 {
		t.Errorf("max_completion_tokens switch: %d/%d", r.MaxTokens, r.MaxCompletionTokens)
	}
}

func TestOpenAIRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	srv := fakellm.Start(t)
	srv.Enqueue(fakellm.Behavior{Status: 429, RetryAfter: "7"})
	date := time.Date(2030, 1, 1, 0, 0, 30, 0, time.UTC)
	srv.Enqueue(fakellm.Behavior{Status: 429, RetryAfter: date.Format(http.TimeFormat)})
	c, sl, _ := newClient(t, srv, func(c *OpenAIConfig) {
		c.Now = func() time.Time { return date.Add(-12 * time.Second) }
	})
	if _, err := c.Summarize(context.Background(), simpleReq()); err != nil {
		t.Fatal(err)
	}
	got := sl.all()
	if len(got) != 2 || got[0] != 7*time.Second || got[1] != 12*time.Second {
		t.Fatalf("waits %v, want [7s 12s]", got)
	}
	if srv.Count() != 3 {
		t.Fatalf("%d requests", srv.Count())
	}
}

func TestOpenAIRetryAfterTooLongIsReturned(t *testing.T) {
	t.Parallel()
	srv := fakellm.Start(t)
	srv.Enqueue(fakellm.Behavior{Status: 429, RetryAfter: "600"})
	c, sl, _ := newClient(t, srv, nil)
	_, err := c.Summarize(context.Background(), simpleReq())
	ra, ok := IsRetryable(err)
	if !ok || ra != 600*time.Second {
		t.Fatalf("IsRetryable = %v, %v (err %v)", ra, ok, err)
	}
	if k, _ := KindOf(err); k != KindRateLimited {
		t.Fatalf("kind %v", k)
	}
	if len(sl.all()) != 0 || srv.Count() != 1 {
		t.Fatalf("should not wait 10 minutes inside the call")
	}
}

func TestOpenAIServerErrorThenSuccess(t *testing.T) {
	t.Parallel()
	srv := fakellm.Start(t)
	srv.Enqueue(fakellm.Behavior{Status: 500}, fakellm.Behavior{Status: 503})
	c, sl, _ := newClient(t, srv, nil)
	res, err := c.Summarize(context.Background(), simpleReq())
	if err != nil {
		t.Fatal(err)
	}
	if res.Text == "" || srv.Count() != 3 {
		t.Fatalf("res %+v after %d requests", res, srv.Count())
	}
	// Full jitter with u = 0.5: 0.5 × 100ms × 2^attempt.
	if got := sl.all(); len(got) != 2 || got[0] != 50*time.Millisecond || got[1] != 100*time.Millisecond {
		t.Fatalf("backoff %v", got)
	}
}

func TestOpenAIRetriesExhausted(t *testing.T) {
	t.Parallel()
	srv := fakellm.Start(t)
	srv.SetDefault(fakellm.Behavior{Status: 502})
	c, _, _ := newClient(t, srv, func(c *OpenAIConfig) { c.MaxRetries = 2 })
	_, err := c.Summarize(context.Background(), simpleReq())
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindTransient || e.Attempts != 3 || e.Status != 502 {
		t.Fatalf("err %#v", err)
	}
	if _, ok := IsRetryable(err); !ok {
		t.Fatal("a 502 should be retryable by the caller")
	}
	if srv.Count() != 3 {
		t.Fatalf("%d requests", srv.Count())
	}
}

func TestOpenAITimeout(t *testing.T) {
	t.Parallel()
	srv := fakellm.Start(t)
	srv.Enqueue(fakellm.Behavior{Hang: true})
	// long enough that the retry's answer is never cut short on a loaded machine
	c, _, _ := newClient(t, srv, func(c *OpenAIConfig) { c.Timeout = time.Second })
	res, err := c.Summarize(context.Background(), simpleReq())
	if err != nil {
		t.Fatalf("the retry after a timeout should succeed: %v", err)
	}
	if res.Text == "" || srv.Count() != 2 {
		t.Fatalf("res %+v, %d requests", res, srv.Count())
	}

	srv2 := fakellm.Start(t)
	srv2.SetDefault(fakellm.Behavior{Hang: true})
	c2, _, _ := newClient(t, srv2, func(c *OpenAIConfig) { c.Timeout = 100 * time.Millisecond; c.MaxRetries = 1 })
	_, err = c2.Summarize(context.Background(), simpleReq())
	if k, _ := KindOf(err); k != KindTimeout || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v (kind %v)", err, k)
	}
}

func TestOpenAICallerCancel(t *testing.T) {
	t.Parallel()
	srv := fakellm.Start(t)
	srv.SetDefault(fakellm.Behavior{Hang: true})
	c, _, _ := newClient(t, srv, nil)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for srv.Count() == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	_, err := c.Summarize(ctx, simpleReq())
	if k, _ := KindOf(err); k != KindCanceled || !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if _, ok := IsRetryable(err); ok {
		t.Fatal("a cancelled call is not retryable")
	}
}

func TestOpenAIMalformedAndEmpty(t *testing.T) {
	t.Parallel()
	srv := fakellm.Start(t)
	srv.SetDefault(fakellm.Behavior{Garbage: true})
	c, _, _ := newClient(t, srv, func(c *OpenAIConfig) { c.MaxRetries = 1 })
	_, err := c.Summarize(context.Background(), simpleReq())
	if !errors.Is(err, ErrMalformedResponse) {
		t.Fatalf("garbage body: %v", err)
	}
	if srv.Count() != 2 {
		t.Fatalf("a malformed body is retried once here, got %d requests", srv.Count())
	}

	for _, b := range []fakellm.Behavior{{Empty: true}, {NoChoices: true}, {Text: " \n "}} {
		srv := fakellm.Start(t)
		srv.SetDefault(b)
		c, _, _ := newClient(t, srv, nil)
		_, err := c.Summarize(context.Background(), simpleReq())
		if !errors.Is(err, ErrEmptyCompletion) {
			t.Fatalf("%+v: %v", b, err)
		}
		if _, ok := IsRetryable(err); ok || srv.Count() != 1 {
			t.Fatalf("%+v: empty completion must not be retried (%d requests)", b, srv.Count())
		}
	}
}

func TestOpenAIContextLengthNotRetried(t *testing.T) {
	t.Parallel()
	srv := fakellm.Start(t)
	srv.SetWindow(10)
	c, sl, _ := newClient(t, srv, nil)
	// One message: nothing to split, so the typed error reaches the caller.
	_, err := c.Summarize(context.Background(), Request{Task: TaskHistory, Messages: []*sessionio.Message{userMsg(strings.Repeat("x", 4000))}})
	if !errors.Is(err, ErrContextLength) {
		t.Fatalf("err %v", err)
	}
	if k, _ := KindOf(err); k != KindContextLength {
		t.Fatalf("kind %v", k)
	}
	if len(sl.all()) != 0 {
		t.Fatalf("context-length errors must not be retried with backoff: waits %v", sl.all())
	}
	// Other providers' wording, without the code.
	for _, msg := range []string{"prompt is too long: 250000 tokens > 200000 maximum", "Input is too long for requested model."} {
		if !isContextLength(400, "", "invalid_request_error", msg) {
			t.Errorf("not detected: %q", msg)
		}
	}
	if isContextLength(429, "", "", "too many tokens per minute") {
		t.Error("a 429 is a rate limit, not a context-length error")
	}
}

// TestOpenAIKeyNeverLeaks makes the endpoint fail in every way, including reflecting the
// Authorization header in its error body, and checks that neither errors nor logs ever
// contain the key.
func TestOpenAIKeyNeverLeaks(t *testing.T) {
	t.Parallel()
	behaviors := []fakellm.Behavior{
		{Status: 401, EchoAuth: true, Message: "invalid key " + testKey},
		{Status: 429, EchoAuth: true, RetryAfter: "1"},
		{Status: 500, EchoAuth: true},
		{Status: 400, EchoAuth: true, Code: "context_length_exceeded", Message: "too long"},
		{Status: 418, EchoAuth: true, Code: testKey},
		{Garbage: true},
		{Empty: true},
		{Hang: true},
	}
	for _, b := range behaviors {
		srv := fakellm.Start(t)
		srv.SetDefault(b)
		c, _, logs := newClient(t, srv, func(c *OpenAIConfig) { c.Timeout = 100 * time.Millisecond; c.MaxRetries = 1 })
		_, err := c.Summarize(context.Background(), simpleReq())
		if err == nil {
			t.Fatalf("%+v: no error", b)
		}
		for e := error(err); e != nil; e = errors.Unwrap(e) {
			if strings.Contains(e.Error(), testKey) || strings.Contains(e.Error(), "SECRET") {
				t.Fatalf("%+v: key in error: %v", b, e)
			}
		}
		if strings.Contains(logs.String(), "SECRET") {
			t.Fatalf("%+v: key in logs: %s", b, logs.String())
		}
		if reqs := srv.Requests(); len(reqs) == 0 || reqs[0].Header.Get("Authorization") != "Bearer "+testKey {
			t.Fatalf("%+v: the key was not sent", b)
		}
	}
}

func TestOpenAIKeyFromEnvAndFile(t *testing.T) {
	srv := fakellm.Start(t)
	t.Setenv("COMPACTOR_TEST_KEY", "env-key-value")
	c, _, _ := newClient(t, srv, func(c *OpenAIConfig) { c.APIKey = ""; c.APIKeyEnv = "COMPACTOR_TEST_KEY" })
	if _, err := c.Summarize(context.Background(), simpleReq()); err != nil {
		t.Fatal(err)
	}
	file := t.TempDir() + "/key"
	if err := writeFile(file, "file-key-value\n"); err != nil {
		t.Fatal(err)
	}
	c2, _, _ := newClient(t, srv, func(c *OpenAIConfig) { c.APIKey = ""; c.APIKeyFile = file })
	if _, err := c2.Summarize(context.Background(), simpleReq()); err != nil {
		t.Fatal(err)
	}
	reqs := srv.Requests()
	if reqs[0].Header.Get("Authorization") != "Bearer env-key-value" || reqs[1].Header.Get("Authorization") != "Bearer file-key-value" {
		t.Fatalf("keys sent: %q %q", reqs[0].Header.Get("Authorization"), reqs[1].Header.Get("Authorization"))
	}
	_, err := NewOpenAI(OpenAIConfig{BaseURL: srv.URL(), Model: "m", APIKeyEnv: "COMPACTOR_TEST_UNSET_KEY"})
	if err == nil {
		t.Fatal("an unset key variable must be an error")
	}
}

func TestOpenAIConcurrencyLimit(t *testing.T) {
	t.Parallel()
	srv := fakellm.Start(t)
	srv.SetDefault(fakellm.Behavior{Latency: 30 * time.Millisecond})
	c, _, _ := newClient(t, srv, func(c *OpenAIConfig) { c.MaxConcurrent = 2 })
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			_, err := c.Summarize(context.Background(), simpleReq())
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if srv.Count() != 8 || srv.MaxInFlight() > 2 {
		t.Fatalf("%d requests, max in flight %d (limit 2)", srv.Count(), srv.MaxInFlight())
	}
}

func TestOpenAIRateLimit(t *testing.T) {
	t.Parallel()
	srv := fakellm.Start(t)
	c, _, _ := newClient(t, srv, func(c *OpenAIConfig) { c.RequestsPerSecond = 20; c.Burst = 1 })
	start := time.Now()
	for range 4 {
		if _, err := c.Summarize(context.Background(), simpleReq()); err != nil {
			t.Fatal(err)
		}
	}
	// 4 requests at 20/s with burst 1 cannot all be sent within 3 intervals of 50 ms. The
	// span is measured around the calls, on the same clock the limiter waits on: a slow
	// machine can only lengthen it (the server's receive times can shrink it, when the
	// first request is late on the wire).
	if span := time.Since(start); span < 150*time.Millisecond {
		t.Fatalf("4 requests within %v at 20 req/s", span)
	}
	if n := len(srv.Requests()); n != 4 {
		t.Fatalf("%d requests reached the endpoint, want 4", n)
	}
}

func TestBackoffAndRetryAfterParsing(t *testing.T) {
	t.Parallel()
	base, maxD := time.Second, 10*time.Second
	for attempt, want := range []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second} {
		if got := FullJitterBackoff(attempt, base, maxD, 0.5); got != want {
			t.Errorf("FullJitterBackoff(%d) = %v, want %v", attempt, got, want)
		}
	}
	if got := FullJitterBackoff(3, base, maxD, 0); got != 0 {
		t.Errorf("u=0 gives %v", got)
	}
	if got := FullJitterBackoff(100, base, maxD, 0.999999); got >= maxD {
		t.Errorf("jitter must stay below the cap, got %v", got)
	}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := map[string]time.Duration{
		"3": 3 * time.Second, "0.5": 500 * time.Millisecond, "": 0, "-4": 0, "soon": 0,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Minute).Format(http.TimeFormat):     0,
	}
	for v, want := range cases {
		if got := parseRetryAfter(v, now); got != want {
			t.Errorf("Retry-After %q = %v, want %v", v, got, want)
		}
	}
}

// TestOpenAITruncatedSummaryByRelease: a summary that stopped at its output limit
// (finish_reason "length") is incomplete. Pi writes it before 0.84.4 and refuses it from
// 0.84.4 (pi.TruncatedSummaryRefused): a permanent failure that still reports the
// tokens the call cost.
func TestOpenAITruncatedSummaryByRelease(t *testing.T) {
	t.Parallel()
	srv := fakellm.Start(t)
	srv.SetDefault(fakellm.Behavior{FinishReason: "length"})
	c, _, _ := newClient(t, srv, nil)
	req := simpleReq()
	req.Release = pi.MustParseRelease("0.84.3")
	res, err := c.Summarize(context.Background(), req)
	if err != nil || !res.Truncated || res.Text == "" {
		t.Fatalf("Pi 0.84.3 takes a truncated summary: %+v, %v", res, err)
	}
	req.Release = pi.MustParseRelease("0.84.4")
	res, err = c.Summarize(context.Background(), req)
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindPermanent || !errors.Is(err, ErrTruncatedSummary) || !strings.Contains(err.Error(), "Pi 0.84.4 refuses") {
		t.Fatalf("Pi 0.84.4: %v", err)
	}
	if res.InputTokens == 0 || res.Calls != 1 {
		t.Errorf("the refused call's cost is lost: %+v", res)
	}
	srv.SetDefault(fakellm.Behavior{})
	if res, err := c.Summarize(context.Background(), req); err != nil || res.Truncated {
		t.Fatalf("a complete summary under 0.84.4: %+v, %v", res, err)
	}
}
