package pipeline

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/compactor-dev/compactor/wire"
)

// Work a worker starts in answer to a request it served: what the request leads to but its
// requester must not wait for (a base after an extract answered Pi's hook: internal/cli's
// bridger). AfterReply defers such work past the reply; Follow queues the job it asks for.

// followEvery is how often Follow tries again while the session's job of that kind is
// pending; followFor is how long it tries at most.
const (
	followEvery = time.Second
	followFor   = 10 * time.Minute
)

type afterKey struct{}

// afterReply collects the work deferred past a bridge's reply.
type afterReply struct {
	mu sync.Mutex
	fs []func(context.Context)
}

func withAfterReply(ctx context.Context, a *afterReply) context.Context {
	return context.WithValue(ctx, afterKey{}, a)
}

// AfterReply has f run once the reply to the bridge request ctx belongs to is sent, in the
// worker's background: bounded by the worker's life, not by the request's deadline, and
// beside the bridges, not in one's place. Outside a bridge request f runs at once.
func AfterReply(ctx context.Context, f func(context.Context)) {
	a, _ := ctx.Value(afterKey{}).(*afterReply)
	if a == nil {
		f(ctx)
		return
	}
	a.mu.Lock()
	a.fs = append(a.fs, f)
	a.mu.Unlock()
}

func (a *afterReply) run(ctx context.Context) {
	a.mu.Lock()
	fs := a.fs
	a.fs = nil
	a.mu.Unlock()
	for _, f := range fs {
		f(ctx)
	}
}

// Follow queues a job this worker decided on in answer to a request (its store's, with the
// worker's own permissions). The queue keeps one job of a kind per session: while another
// one is pending, Follow tries again every second until it has ended (at most 10 minutes,
// and not past ctx), so that a request made in the moment the pending job ends is not
// lost. It returns how the job was queued (or that this very job is already pending).
func (s *Service) Follow(ctx context.Context, job wire.Job) (EnqueueResult, error) {
	if s.res == nil || s.res.js == nil {
		return EnqueueResult{}, fmt.Errorf("follow %s: the service has not started", job.Kind)
	}
	give := time.Now().Add(followFor)
	for {
		r, err := publishJob(ctx, s.res.js, &job)
		if err != nil || !r.AlreadyQueued || !r.Other {
			return r, err
		}
		if time.Now().After(give) {
			return r, fmt.Errorf("follow %s: the session's pending %s job (%s) did not end within %s", job.ID, job.Kind, r.JobID, followFor)
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(followEvery):
		}
	}
}
