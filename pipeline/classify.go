package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/compactor-dev/compactor/outcome"
	"github.com/compactor-dev/compactor/wire"
)

// Outcome is how a job ended (or, for OutcomeRetry, how this delivery ended). The words
// are package outcome's, the one vocabulary the engine's results use too.
type Outcome = outcome.Outcome

// Outcomes.
const (
	OutcomeDone    = outcome.Done    // the entry was appended (or found appended by an earlier delivery)
	OutcomeSkipped = outcome.Skipped // nothing to do, with a reason (already compacted, active, v1 file...)
	// OutcomeSuperseded: the entry was appended, but a live agent's entries landed around
	// it, so it is on a side branch that Pi does not load; nothing was lost.
	OutcomeSuperseded = outcome.Superseded
	OutcomeRetry      = outcome.Retry  // transient failure: redelivered later
	OutcomeFailed     = outcome.Failed // permanent failure: terminated and dead-lettered
)

// Handler does the work of one job on a resolved absolute path. It returns either a Result
// (Outcome done or skipped; empty means done) or an error, classified by Classify: use
// Skip, RetryAfter, Retry or Permanent, or return errors that implement
// interface{ RetryAfter() time.Duration } or interface{ Permanent() bool }.
// A handler must be idempotent: a job can be delivered again after its effect was written
// (a crash between the append and the ack); given job.ExpectLeafID, the handler finds that
// effect and reports it as done, so a redelivered job never produces a second entry.
type Handler interface {
	Handle(ctx context.Context, job wire.Job, file string) (wire.Result, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, job wire.Job, file string) (wire.Result, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, job wire.Job, file string) (wire.Result, error) {
	return f(ctx, job, file)
}

// SkipError ends a job as skipped with a reason. Busy marks a skip for a state that can
// pass without the file changing (a turn in progress, a write in progress, a session
// active or changing while its summary was made): sweeps try such a session again after
// their backoff instead of waiting for it to change.
type SkipError struct {
	Reason string
	Busy   bool
}

func (e *SkipError) Error() string { return "skipped: " + e.Reason }

// Skip returns an error that ends the job as skipped.
func Skip(reason string) error { return &SkipError{Reason: reason} }

// SkipBusy returns an error that ends the job as skipped because the session is busy now
// (see SkipError.Busy).
func SkipBusy(reason string) error { return &SkipError{Reason: reason, Busy: true} }

// RetryError asks for a later redelivery, no earlier than After (0: the backoff alone).
type RetryError struct {
	After time.Duration
	Err   error
}

func (e *RetryError) Error() string {
	if e.After > 0 {
		return fmt.Sprintf("retry after %s: %v", e.After, e.Err)
	}
	return fmt.Sprintf("retry: %v", e.Err)
}
func (e *RetryError) Unwrap() error             { return e.Err }
func (e *RetryError) RetryAfter() time.Duration { return e.After }

// RetryAfter marks err as transient with a hint (for example an HTTP Retry-After).
func RetryAfter(d time.Duration, err error) error { return &RetryError{After: d, Err: err} }

// Retry marks err as transient.
func Retry(err error) error { return &RetryError{Err: err} }

// PermanentError is a failure that no retry will fix.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string   { return e.Err.Error() }
func (e *PermanentError) Unwrap() error   { return e.Err }
func (e *PermanentError) Permanent() bool { return true }

// Permanent marks err as permanent: the job is terminated and dead-lettered.
func Permanent(err error) error { return &PermanentError{Err: err} }

type retryAfterer interface{ RetryAfter() time.Duration }
type permanenter interface{ Permanent() bool }

// Decision is what the worker does with a delivery.
type Decision struct {
	Outcome Outcome
	Reason  string
	Delay   time.Duration // for OutcomeRetry
	Err     error         // the handler's error, if any
	Busy    bool          // skipped for a state that passes by itself (SkipError.Busy)
}

// RedeliveryDelay is how long a failed job waits before JetStream delivers it again, after
// the attempt-th delivery failed (attempt ≥ 1): base·2^(attempt-1), capped at max, with no
// jitter, so the schedule is predictable and testable (a job is one message; the spread
// comes from jobs failing at different times). The RetryAfter hint of an error can only
// lengthen it. Not to be confused with summarize.FullJitterBackoff, the wait between HTTP
// attempts inside one LLM call.
func RedeliveryDelay(attempt int, base, max time.Duration) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := base
	for i := 1; i < attempt; i++ {
		d *= 2
		if d >= max || d <= 0 {
			return max
		}
	}
	if d > max {
		return max
	}
	return d
}

// Classify is the single place where a handler's answer becomes a Decision.
//
//   - nil error: the Result's outcome (empty = done); a Result saying retry/failed is honoured.
//   - *SkipError: skipped with its reason.
//   - an error with Permanent() true: failed.
//   - context.Canceled / DeadlineExceeded, errors with RetryAfter(), and anything else:
//     retry, delayed by RedeliveryDelay(attempt) or the hint, whichever is longer. Unknown errors are
//     treated as transient because MaxDeliver bounds them anyway.
//   - a retry on the last allowed delivery (attempt ≥ maxDeliver) becomes failed with the
//     reason "max deliveries", so the message is dead-lettered instead of stuck.
func Classify(res wire.Result, err error, attempt, maxDeliver int, base, max time.Duration) Decision {
	d := classify(res, err)
	if d.Outcome == OutcomeRetry {
		delay := RedeliveryDelay(attempt, base, max)
		var ra retryAfterer
		if errors.As(err, &ra) && ra.RetryAfter() > delay {
			delay = ra.RetryAfter()
		}
		d.Delay = delay
		if maxDeliver > 0 && attempt >= maxDeliver {
			d.Outcome = OutcomeFailed
			d.Reason = fmt.Sprintf("max deliveries (%d) exhausted: %s", maxDeliver, d.Reason)
			d.Delay = 0
		}
	}
	return d
}

func classify(res wire.Result, err error) Decision {
	if err == nil {
		switch res.Outcome {
		case "", OutcomeDone:
			return Decision{Outcome: OutcomeDone, Reason: res.Reason}
		case OutcomeSkipped:
			return Decision{Outcome: OutcomeSkipped, Reason: res.Reason, Busy: res.Busy}
		case OutcomeSuperseded:
			return Decision{Outcome: OutcomeSuperseded, Reason: res.Reason}
		case OutcomeRetry:
			return Decision{Outcome: OutcomeRetry, Reason: orDefault(res.Reason, "handler asked for a retry")}
		case OutcomeFailed:
			return Decision{Outcome: OutcomeFailed, Reason: orDefault(res.Reason, "handler reported failure")}
		default:
			return Decision{Outcome: OutcomeFailed, Reason: fmt.Sprintf("handler returned unknown outcome %q", res.Outcome)}
		}
	}
	var se *SkipError
	if errors.As(err, &se) {
		return Decision{Outcome: OutcomeSkipped, Reason: se.Reason, Busy: se.Busy}
	}
	var pe permanenter
	if errors.As(err, &pe) && pe.Permanent() {
		return Decision{Outcome: OutcomeFailed, Reason: err.Error(), Err: err}
	}
	return Decision{Outcome: OutcomeRetry, Reason: err.Error(), Err: err}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
