package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultClientURL is where clients (enqueue, sweep) look for NATS when none is configured:
// the embedded server of a `compactor run` on this machine.
var DefaultClientURL = fmt.Sprintf("nats://%s:%d", DefaultEmbeddedHost, DefaultEmbeddedPort)

// EnqueueResult says what happened to an enqueue.
type EnqueueResult struct {
	JobID string `json:"jobId"`
	// Seq is the stream sequence of the job message that will answer this request: the new
	// one, the original of a duplicate, or the pending job when AlreadyQueued.
	Seq uint64 `json:"seq"`
	// Duplicate: the same request (same Nats-Msg-Id) was stored within the duplicate window.
	Duplicate bool `json:"duplicate,omitempty"`
	// AlreadyQueued: a job of this kind is pending or running for the session (err_code
	// 10077). When it is the same request (JobID equals the request's id) it answers the
	// request; otherwise (Other) the request was not queued: with wait, Enqueue waits for
	// that job to end and then queues the request.
	AlreadyQueued bool `json:"alreadyQueued,omitempty"`
	Other         bool `json:"other,omitempty"`
	// WaitedFor lists the other requests' jobs that ran before this one (wait only).
	WaitedFor []string `json:"waitedFor,omitempty"`
	// Event is the job's final event when waiting.
	Event *wire.Event `json:"event,omitempty"`
}

// publishJob validates and publishes a job. A refusal because the session already has a
// pending job of that kind is reported as AlreadyQueued with that job's sequence and id
// (read by a direct get of the job's subject, which a store's roles may make).
func publishJob(ctx context.Context, js jetstream.JetStream, job *wire.Job) (EnqueueResult, error) {
	job.Normalize(time.Now())
	if err := job.Validate(); err != nil {
		return EnqueueResult{}, fmt.Errorf("enqueue: %w", err)
	}
	data, err := json.Marshal(job)
	if err != nil {
		return EnqueueResult{}, fmt.Errorf("enqueue: %w", err)
	}
	for attempt := 0; ; attempt++ {
		ack, err := js.Publish(ctx, job.Subject(), data, jetstream.WithMsgID(job.ID), jetstream.WithExpectStream(wire.StreamJobs))
		if err == nil {
			return EnqueueResult{JobID: job.ID, Seq: ack.Sequence, Duplicate: ack.Duplicate}, nil
		}
		if pe := refusal(ctx); pe != nil {
			return EnqueueResult{}, pe
		}
		if isStreamFull(err) {
			return EnqueueResult{}, fmt.Errorf("enqueue %s: not queued: stream %s is full: it holds as many queued jobs as its size limit allows (--jobs-max-bytes of compactor setup); are the stores' workers running (compactor status, compactor_queue_pending)?: %w",
				job.Subject(), wire.StreamJobs, err)
		}
		if !IsAlreadyQueued(err) {
			if unavailable(err) {
				// No responders (no stream takes the subject), a timeout (no leader), ...:
				// find out which, so the operator reads the real problem.
				return EnqueueResult{}, fmt.Errorf("enqueue %s: %w", job.Subject(), diagnose(ctx, js, wire.StreamJobs, err))
			}
			return EnqueueResult{}, fmt.Errorf("enqueue %s: %w", job.Subject(), err)
		}
		pending, gerr := directLast(ctx, js.Conn(), wire.StreamJobs, job.Subject())
		if gerr == nil {
			var pj wire.Job
			_ = json.Unmarshal(pending.Data, &pj)
			return EnqueueResult{JobID: pj.ID, Seq: pending.Sequence, AlreadyQueued: true, Other: pj.ID != job.ID}, nil
		}
		if !errors.Is(gerr, jetstream.ErrMsgNotFound) || attempt >= 20 {
			return EnqueueResult{}, fmt.Errorf("enqueue %s: already queued, and the pending job cannot be read: %w", job.Subject(), gerr)
		}
		// The pending job finished between the refusal and the lookup: publish again.
		select {
		case <-ctx.Done():
			return EnqueueResult{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// EnqueueOption adjusts one Enqueue call.
type EnqueueOption func(*enqueueOptions)

type enqueueOptions struct {
	onWaiting func(jobID string, seq uint64)
}

// OnWaiting has a waiting Enqueue call f when another request's job holds the session's
// subject and the call starts waiting for it to end, so that a caller can say why it waits
// (and a test can act on that moment rather than on a guessed duration).
func OnWaiting(f func(jobID string, seq uint64)) EnqueueOption {
	return func(o *enqueueOptions) { o.onWaiting = f }
}

// Enqueue publishes job (filling v, requestedAt and id) and, with wait, waits up to timeout
// (0 = until ctx ends) for the job's final event: done, skipped or failed.
//
// The wait cannot miss its event: a subscription to the session's event subjects is made
// before publishing, so a fast worker's event is seen; and the last event of the job's own
// subject (compactor.events.<store>.<session>.<job seq>) is read once the job's sequence is
// known, so that the event of a job that ended before this request (a duplicate of a
// finished request) is found too. Events are matched by job id and job sequence. Both are
// requests a store's agent may make; a refusal ends the call at once (*PermissionError).
func Enqueue(ctx context.Context, nc *nats.Conn, job wire.Job, wait bool, timeout time.Duration, opts ...EnqueueOption) (EnqueueResult, error) {
	return guard(ctx, nc, func(ctx context.Context) (EnqueueResult, error) { return enqueue(ctx, nc, job, wait, timeout, opts...) })
}

func enqueue(ctx context.Context, nc *nats.Conn, job wire.Job, wait bool, timeout time.Duration, opts ...EnqueueOption) (EnqueueResult, error) {
	var o enqueueOptions
	for _, opt := range opts {
		opt(&o)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return EnqueueResult{}, fmt.Errorf("enqueue: %w", err)
	}
	if !wait {
		return publishJob(ctx, js, &job)
	}
	if err := wire.ValidateStoreName(job.Store); err != nil {
		return EnqueueResult{}, fmt.Errorf("enqueue: %w", err)
	}
	if job.SessionID == "" {
		return EnqueueResult{}, errors.New("enqueue: job: sessionId is empty")
	}
	events := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(wire.EventSubject(job.Store, job.SessionID)+".*", events)
	if err != nil {
		return EnqueueResult{}, fmt.Errorf("enqueue: watch events: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.FlushWithContext(ctx); err != nil {
		return EnqueueResult{}, fmt.Errorf("enqueue: watch events: %w", err)
	}

	var waited []string
	var done uint64 // the other job last waited for: its message may linger briefly after its event
	for {
		res, err := publishJob(ctx, js, &job)
		if err != nil {
			return res, err
		}
		if res.Other && res.Seq == done {
			select {
			case <-ctx.Done():
				return res, fmt.Errorf("enqueue: waiting for job %s (seq %d) to leave the queue: %w", res.JobID, res.Seq, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		if res.Other && o.onWaiting != nil {
			o.onWaiting(res.JobID, res.Seq)
		}
		ev, err := waitFinal(ctx, nc, events, job.Store, job.SessionID, res.Seq, res.JobID)
		if errors.Is(err, context.DeadlineExceeded) {
			// A timeout alone tells nothing: say where the job is and who serves its store.
			err = fmt.Errorf("%w: %s", err, whyWaiting(ctx, js, job.Store, job.Subject(), res.Seq))
		}
		if err != nil {
			return res, err
		}
		if !res.Other {
			res.Event, res.WaitedFor = ev, waited
			return res, nil
		}
		// Another request held the subject; it has ended, so the subject is free (its final
		// event is published just before its DoubleAck: the loop above waits that out).
		waited, done = append(waited, res.JobID), res.Seq
	}
}

// waitFinal returns the final event of the job with that sequence and id: the last one on
// its subject when it ended already, else the one that comes. The events stream is the
// truth, the subscription only the fast path: an event published while this connection was
// away (a reconnect, a slow-consumer cut) never reaches the subscription, so the stream is
// read again from time to time (finalPollMin, doubling to finalPollMax). A read that fails
// is tried again; the last failure is part of the error when ctx ends first.
func waitFinal(ctx context.Context, nc *nats.Conn, events <-chan *nats.Msg, store, sessionID string, seq uint64, jobID string) (*wire.Event, error) {
	final := func(data []byte) *wire.Event {
		var ev wire.Event
		// An event is the job's only if it names the job's store and session as its subject
		// does (foreign.go): the subject alone is the store's, its fields are what a worker
		// of the store wrote.
		if json.Unmarshal(data, &ev) != nil || ev.JobSeq != seq || ev.JobID != jobID || !ev.Final() ||
			ev.Store != store || wire.SessionToken(ev.SessionID) != wire.SessionToken(sessionID) {
			return nil
		}
		return &ev
	}
	poll := time.NewTimer(0) // the first read at once: the job may have ended already
	defer poll.Stop()
	every := finalPollMin
	var readErr error
	for {
		select {
		case <-ctx.Done():
			if pe := refusal(ctx); pe != nil {
				return nil, pe
			}
			if readErr != nil {
				return nil, fmt.Errorf("enqueue: job %s (seq %d) did not end in time (the last read of its events failed: %v): %w", jobID, seq, readErr, ctx.Err())
			}
			return nil, fmt.Errorf("enqueue: job %s (seq %d) did not end in time: %w", jobID, seq, ctx.Err())
		case m := <-events:
			if delivered(m) {
				continue // not published by a worker (see delivered)
			}
			if ev := final(m.Data); ev != nil {
				return ev, nil
			}
		case <-poll.C:
			rctx, cancel := context.WithTimeout(ctx, finalReadTimeout)
			m, err := directLast(rctx, nc, wire.StreamEvents, wire.JobEventSubject(store, sessionID, seq))
			cancel()
			switch {
			case err == nil:
				if ev := final(m.Data); ev != nil {
					return ev, nil
				}
				readErr = nil
			case errors.Is(err, jetstream.ErrMsgNotFound):
				readErr = nil
			default:
				if pe := refusal(ctx); pe != nil {
					return nil, pe
				}
				readErr = err
			}
			poll.Reset(every)
			every = min(2*every, finalPollMax)
		}
	}
}

// How often waitFinal reads the events stream besides listening (see waitFinal), and how
// long one read may take.
const (
	finalPollMin     = 500 * time.Millisecond
	finalPollMax     = 5 * time.Second
	finalReadTimeout = 5 * time.Second
)
