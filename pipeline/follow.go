package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/wire"
)

// Work a worker starts in answer to a request it served: what the request leads to but its
// requester must not wait for (a base after an extract answered Pi's hook: the worker's
// Bridger). agents.AfterReply defers such work past the reply; Follow queues the job it asks
// for.

// followEvery is how often Follow tries again while the session's job of that kind is
// pending; followFor is how long it tries at most.
const (
	followEvery = time.Second
	followFor   = 10 * time.Minute
)

// Follow queues a job this worker decided on in answer to a request (its store's, with the
// worker's own permissions). The queue keeps one job of a kind per session: while another
// one is pending, Follow tries again every second until it has ended (at most 10 minutes,
// and not past ctx), so that a request made in the moment the pending job ends is not
// lost. It returns how the job was queued (or that this very job is already pending).
func (s *Service) Follow(ctx context.Context, job wire.Job) (fleetops.EnqueueResult, error) {
	if s.res == nil || s.res.js == nil {
		return fleetops.EnqueueResult{}, fmt.Errorf("follow %s: the service has not started", job.Kind)
	}
	give := time.Now().Add(followFor)
	for {
		r, err := fleetops.PublishJob(ctx, s.res.js, &job)
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

// Queue queues a job this worker decided on once, without waiting for a pending job of its
// kind to end: AlreadyQueued says one is pending (a base job that is fine to fold into the
// pending one, such as a merge).
func (s *Service) Queue(ctx context.Context, job wire.Job) (fleetops.EnqueueResult, error) {
	if s.res == nil || s.res.js == nil {
		return fleetops.EnqueueResult{}, fmt.Errorf("queue %s: the service has not started", job.Kind)
	}
	return fleetops.PublishJob(ctx, s.res.js, &job)
}
