package pipeline

import (
	"context"

	"github.com/compactor-dev/compactor/wire"
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
