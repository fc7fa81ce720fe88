package cli

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/summarize"
)

// liveSummarizer is the summarizer of `compactor run`: the one the flags built, replaced
// whole when SIGHUP reloads the settings (reload.go), and the place where each paid call
// asks the pipeline first (pipeline.ReserveLLM: not when the worker is stopping, not over
// a spend limit) and names the model it bills.
type liveSummarizer struct {
	cur atomic.Pointer[builtSummarizer]
}

// builtSummarizer is one summarizer as built from one reading of the settings.
type builtSummarizer struct {
	summarize.Summarizer
	// model is the model billed; "" for the extractive summarizer, which pays nothing.
	model string
	// flags are the settings it was built from (the LLM probe of /readyz uses them), key
	// the API key they gave ("" for none; never logged).
	flags summarizerFlags
	key   string
}

func newLiveSummarizer(b *builtSummarizer) *liveSummarizer {
	l := &liveSummarizer{}
	l.cur.Store(b)
	return l
}

// Summarize implements summarize.Summarizer with the current summarizer.
func (l *liveSummarizer) Summarize(ctx context.Context, req summarize.Request) (summarize.Result, error) {
	b := l.cur.Load()
	if b.model == "" {
		return b.Summarizer.Summarize(ctx, req)
	}
	if err := pipeline.ReserveLLM(ctx, func() int { return promptTokens(req) }); err != nil {
		return summarize.Result{}, err
	}
	res, err := b.Summarizer.Summarize(ctx, req)
	if res.Calls > 0 || res.InputTokens > 0 {
		pipeline.NoteLLMModel(ctx, b.model)
	}
	return res, err
}

// promptTokens estimates the input tokens of a request's first call: the system prompt and
// the user prompt, at Pi's four characters a token (a span larger than the model's window
// is sent in chunks, whose rolling summaries come on top).
func promptTokens(req summarize.Request) int {
	return summarize.EstimateText(summarize.SystemPrompt) + summarize.EstimateText(summarize.BuildPrompt(req))
}

// readyProbe is /readyz's check of the LLM endpoint: GET <base URL>/models with the
// summarizer's key and headers, which costs nothing. The endpoint is not ready when it
// refuses the key (401, 403), fails (5xx) or does not answer; any other answer (a list, a
// 404 from an endpoint without the list, a 429) is an endpoint that answers. The extractive
// summarizer has no endpoint: always ready.
func (l *liveSummarizer) readyProbe() pipeline.ReadyProbe {
	return pipeline.ReadyProbe{Name: "llm", Check: func(ctx context.Context) error {
		b := l.cur.Load()
		if b.model == "" {
			return nil
		}
		url := strings.TrimRight(b.flags.baseURL, "/") + "/models"
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("GET %s: %w", url, err)
		}
		if b.key != "" {
			req.Header.Set("Authorization", "Bearer "+b.key)
		}
		if b.flags.organization != "" {
			req.Header.Set("OpenAI-Organization", b.flags.organization)
		}
		for _, h := range b.flags.headers {
			if k, v, ok := strings.Cut(h, ":"); ok && !strings.EqualFold(strings.TrimSpace(k), "Authorization") {
				req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("GET %s: the endpoint does not answer: %w", url, redact(err, b.key))
		}
		_ = resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
			return fmt.Errorf("GET %s: HTTP %d: the endpoint refuses the API key (see --api-key-env, --api-key-file)", url, resp.StatusCode)
		case resp.StatusCode >= 500:
			return fmt.Errorf("GET %s: HTTP %d: the endpoint fails", url, resp.StatusCode)
		}
		return nil
	}}
}

// redact takes the key out of an error's text.
func redact(err error, key string) error {
	if key == "" || !strings.Contains(err.Error(), key) {
		return err
	}
	return fmt.Errorf("%s", strings.ReplaceAll(err.Error(), key, "[redacted]"))
}
