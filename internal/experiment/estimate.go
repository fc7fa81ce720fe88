package experiment

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/tokenize"
)

// LLMEstimate is what a replay with the llm summarizer is expected to send.
type LLMEstimate struct {
	Calls       int `json:"calls"`
	InputTokens int `json:"inputTokens"`
}

// EstimateLLM estimates what the replay of cfg costs its llm summarizer, without calling
// it: the same replay runs with the extractive summarizer standing in for the model, and
// every request is priced as the OpenAI client would send it (system prompt plus the
// prompt, with o200k_base), split into calls of at most maxInputTokens (0: one call per
// request), each further call carrying the rolling summary again. It is an estimate: a
// model's summaries have other sizes than the extractive ones, which moves later cuts.
func EstimateLLM(ctx context.Context, root string, files []string, cfg Config, maxInputTokens int) (LLMEstimate, error) {
	counter, err := tokenize.NewTiktoken("o200k_base")
	if err != nil {
		return LLMEstimate{}, fmt.Errorf("experiment: estimate: %w", err)
	}
	cfg = cfg.WithDefaults()
	est := &estimator{inner: cfg.Extractive, count: counter.CountText, window: maxInputTokens}
	cfg.LLM = est
	cfg.Summarizers = []string{SummarizerLLM}
	cfg.Eval = false
	cfg.Progress = nil
	if _, err := RunFiles(ctx, root, files, cfg); err != nil {
		return LLMEstimate{}, err
	}
	return LLMEstimate{Calls: int(est.calls.Load()), InputTokens: int(est.input.Load())}, nil
}

// estimator answers like inner and prices each request as a model call.
type estimator struct {
	inner        summarize.Summarizer
	count        func(string) int
	window       int
	calls, input atomic.Int64
}

func (e *estimator) Summarize(ctx context.Context, req summarize.Request) (summarize.Result, error) {
	res, err := e.inner.Summarize(ctx, req)
	if err != nil {
		return res, err
	}
	sys := e.count(summarize.SystemPrompt)
	tokens := sys + e.count(summarize.BuildPrompt(req))
	calls := 1
	if e.window > 0 && tokens > e.window {
		// Each chunk repeats the system prompt, the instructions and the summary so far.
		carry := sys + e.count(summarize.BuildPrompt(summarize.Request{Task: req.Task, PreviousSummary: res.Text}))
		room := max(1, e.window-carry)
		calls = (tokens + room - 1) / room
		tokens += (calls - 1) * carry
	}
	e.calls.Add(int64(calls))
	e.input.Add(int64(tokens))
	res.Calls = 0 // the stand-in's usage is counted here, not reported as a model's
	return res, nil
}
