package agents

import (
	"context"
	"sync"
)

// Work a worker starts in answer to a bridge it served: what the request leads to but its
// requester must not wait for (a base after an extract answered Pi's hook).

type afterKey struct{}

// AfterReplies collects the work deferred past a bridge's reply.
type AfterReplies struct {
	mu sync.Mutex
	fs []func(context.Context)
}

// WithAfterReply is ctx carrying a, whose work AfterReply defers.
func WithAfterReply(ctx context.Context, a *AfterReplies) context.Context {
	return context.WithValue(ctx, afterKey{}, a)
}

// AfterReply has f run once the reply to the bridge request ctx belongs to is sent, in the
// worker's background: bounded by the worker's life, not by the request's deadline, and
// beside the bridges, not in one's place. Outside a bridge request f runs at once.
func AfterReply(ctx context.Context, f func(context.Context)) {
	a, _ := ctx.Value(afterKey{}).(*AfterReplies)
	if a == nil {
		f(ctx)
		return
	}
	a.mu.Lock()
	a.fs = append(a.fs, f)
	a.mu.Unlock()
}

// Run runs the deferred work.
func (a *AfterReplies) Run(ctx context.Context) {
	a.mu.Lock()
	fs := a.fs
	a.fs = nil
	a.mu.Unlock()
	for _, f := range fs {
		f(ctx)
	}
}
