package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/compactor-dev/compactor/spend"
)

// Paid work: what a handler's calls to a paid model tell the pipeline, through the job's
// context. Before a job's first paid call, ReserveLLM asks whether the job may start paying
// now: not while the worker is stopping (the job is handed back at once, for another
// worker, instead of starting a summary it may not finish), and not over a spend limit
// (package spend). A job that has started paying is never stopped half paid: its later calls
// are allowed, and counted. NoteLLMModel names the model
// billed, for the token metrics.

// HoldError is a job handed back without using an attempt: not a failure, a wait (see
// ReserveLLM). A handler returns it as it got it (wrapped is fine).
type HoldError struct {
	// Reason says why, for the log.
	Reason string
	// Delay is how long the job waits before its next delivery (0: at once).
	Delay time.Duration
	// why is the reason label of compactor_jobs_handed_back_total.
	why string
}

func (e *HoldError) Error() string {
	if e.Delay > 0 {
		return fmt.Sprintf("held for %s: %s", e.Delay.Round(time.Second), e.Reason)
	}
	return "handed back: " + e.Reason
}

type paidAccountKey struct{}

// paidAccount is one delivery's account of its paid work.
type paidAccount struct {
	s     *Service
	store string
	mu    sync.Mutex
	begun bool       // a paid call was allowed: the job pays to its end
	held  *HoldError // the first call was refused: every call of this attempt is
	model string     // the model of the last paid call
	spend spend.Hold // what it added to the spend counts (package spend)
}

func withPaidAccount(ctx context.Context, t *paidAccount) context.Context {
	return context.WithValue(ctx, paidAccountKey{}, t)
}

func paidAccountOf(ctx context.Context) *paidAccount {
	t, _ := ctx.Value(paidAccountKey{}).(*paidAccount)
	return t
}

// ReserveLLM is called by a summarizer before each call to a paid model, with the input
// tokens it expects to send (a function: they are counted only when a limit needs them).
// The first call of a job decides: it returns a *HoldError when the worker is stopping (the
// job is handed back at once) or when a spend limit has no room left in its window (the
// job waits until the window ends); the summarizer returns that error without calling
// the model. Once a call was allowed, the job's later
// calls are allowed too, and counted. Outside a worker's job (a command) it does nothing.
func ReserveLLM(ctx context.Context, inputTokens func() int) error {
	t := paidAccountOf(ctx)
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held != nil {
		return t.held
	}
	if !t.begun && t.s.draining.Load() {
		t.held = &HoldError{Reason: "the worker is stopping: the job is handed back for another worker before it starts a paid summary", why: handBackShutdown}
		return t.held
	}
	if held := t.s.reserveSpend(ctx, t, inputTokens); held != nil {
		t.held = held
		return held
	}
	t.begun = true
	return nil
}

// NoteLLMModel names the model a paid call of the job was made to (the model label of the
// token metrics). Outside a worker's job it does nothing.
func NoteLLMModel(ctx context.Context, model string) {
	if t := paidAccountOf(ctx); t != nil {
		t.mu.Lock()
		t.model = model
		t.mu.Unlock()
	}
}

// holdOf is the HoldError a handler's error carries, or nil.
func holdOf(err error) *HoldError {
	var h *HoldError
	if errors.As(err, &h) {
		return h
	}
	return nil
}

// hold hands back a delivery whose handler was held (ReserveLLM refused its first paid call).
func (s *Service) hold(ctx context.Context, d *delivery, h *HoldError) {
	level := slog.LevelInfo
	if h.why == handBackSpend {
		level = slog.LevelDebug // the limit's warning says it once per window
	}
	d.log.Log(ctx, level, "job handed back without an attempt", "path", d.job.Path, "reason", h.Reason, "retry_in_s", seconds(h.Delay))
	s.handBack(ctx, d, h.why, h.Delay, "")
}
