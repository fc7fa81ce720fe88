package cli

import (
	"context"
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
	// flags are the settings it was built from (the LLM probe of /readyz uses them).
	flags summarizerFlags
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
