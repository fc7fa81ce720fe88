package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/compactor-dev/compactor/agents"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/storepath"
	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// A job's delivery, read top to bottom: process → admit (may it run now?) → attempt (the
// handler, with heartbeats) → finish (the one final answer, after the event) → recheck.
// Dead letters are deadletter.go's.

// jobContexts are the two contexts of running jobs: the handlers run in handlers, which
// ends first (stage two of a shutdown); the answers to JetStream, events and leases use
// answers, which ends shutdownGrace later so that a NATS outage cannot hold a shutdown.
type jobContexts struct {
	handlers, answers context.Context
}

// delivery is one message being worked, and what admission found out about it.
type delivery struct {
	msg       jetstream.Msg
	delivered uint64 // JetStream's count, busy and give-back deliveries included
	start     time.Time
	ev        wire.Event // the event being built: store, sequence, job fields
	log       *slog.Logger
	job       wire.Job
	file      string // the resolved session file
	lease     *lease
	key       string // the job's key in COMPACTOR_ATTEMPTS
	attempt   int    // handler attempts so far, this one included; 0 before counting
}

// process handles one delivery from start to its single final answer to JetStream:
// admission decides whether the handler may run now; the attempt runs it. f is the job
// running, named for the shutdown once admitted.
func (s *Service) process(jc jobContexts, f *runningJob, store string, msg jetstream.Msg) {
	if d := s.admit(jc.answers, store, msg); d != nil {
		s.running.admitted(f, d.log, d.job.Path)
		s.attempt(jc, d)
	}
}

// admit checks a delivery before any work: a valid job whose subject matches it, a file
// inside the store (found again by session id if it moved), not active, the session's
// lease, and an attempt left. Every refusal gives the delivery its answer here (dead
// letter, skip, or a delayed redelivery) and returns nil.
func (s *Service) admit(ctx context.Context, store string, msg jetstream.Msg) *delivery {
	d := &delivery{msg: msg, start: time.Now()}
	meta, err := msg.Metadata()
	if err != nil {
		log := s.log.With("subject", msg.Subject())
		log.Error("message without metadata", "err", err)
		answered(log, slog.LevelWarn, "term failed", msg.Term())
		return nil
	}
	d.delivered = meta.NumDelivered
	d.ev = wire.Event{V: wire.EventVersion, JobSeq: meta.Sequence.Stream, JobRef: wire.JobRef{Store: store}, Worker: s.worker}
	s.noteHeld(d.ev.JobSeq, "", false) // delivered again: it is decided anew
	if v, id, ok := jobHeadOf(msg.Data()); ok && v >= 1 && !slices.Contains(s.cfg.JobVersions, v) {
		s.unknownVersion(ctx, d, v, id)
		return nil
	}
	job, err := wire.DecodeJobFor(msg.Data(), s.cfg.JobVersions)
	if err == nil && (job.Store != store || job.Subject() != msg.Subject()) {
		err = fmt.Errorf("job: subject %s does not match its payload (store %q, session %q, kind %q)", msg.Subject(), job.Store, job.SessionID, job.Kind)
	}
	d.ev.JobID, d.ev.SessionID, d.ev.Path, d.ev.Kind = job.ID, job.SessionID, job.Path, job.Kind
	if err != nil {
		s.refuse(ctx, d, "invalid job", err)
		return nil
	}
	d.job, d.key = job, fleetops.AttemptKey(store, d.ev.JobSeq, job.ID)
	d.log = s.log.With("store", store, "session", job.SessionID, "kind", job.Kind, "job_seq", d.ev.JobSeq, "delivery", d.delivered)
	switch beyond, ok := s.beyondBound(ctx, d); {
	case !ok:
		answered(d.log, slog.LevelWarn, "nak failed", d.msg.NakWithDelay(s.cfg.BackoffBase))
		return nil
	case beyond:
		s.exhausted(ctx, d)
		return nil
	}
	if d.file, err = s.locate(d); err != nil {
		s.refuse(ctx, d, "refused path", err)
		return nil
	}
	if reason := s.active(d); reason != "" {
		s.finish(ctx, d, Decision{Outcome: OutcomeSkipped, Reason: reason, Busy: true}, wire.Result{})
		return nil
	}
	if !s.takeLease(ctx, d) {
		return nil
	}
	if !s.countAttempt(ctx, d) {
		return nil
	}
	if !s.leaseStillOurs(ctx, d) {
		return nil
	}
	d.log.Info("job started", "path", d.job.Path, "attempt", d.attempt)
	return d
}

// locate resolves the job's path inside its store. A file renamed or moved while queued
// is found again by session id: Pi's file names end in it.
func (s *Service) locate(d *delivery) (string, error) {
	root := s.roots[d.ev.Store]
	file, err := storepath.Resolve(root, d.job.Path)
	if errors.Is(err, storepath.ErrNotExist) {
		var rel string
		rel, file, err = storepath.Refind(root, d.job.Path, d.job.SessionID)
		if err == nil {
			d.log.Info("session file moved while queued; found it by session id", "old_path", d.job.Path, "path", rel)
			d.ev.Path, d.job.Path = rel, rel
		}
	}
	if err != nil {
		return file, err
	}
	// The session a job names is the file's: its lease, its records (preparation, base,
	// attempts) and its bounds (one job per session, kind and slot) are keyed by that id, so
	// a job naming another id for the same file would hold other leases and records than
	// the file's jobs do. The header is found as the read finds it (after blank lines, of
	// any length); one that cannot be read is refused, else the check could be passed by.
	id, err := storepath.HeaderID(root, d.job.Path)
	if err != nil {
		return "", fmt.Errorf("session file header: %w", err)
	}
	if id != "" && id != d.job.SessionID {
		return "", fmt.Errorf("session file %q holds session %s, the job names session %s", d.job.Path, id, d.job.SessionID)
	}
	return file, nil
}

// active returns why the session is left alone for now (modified within Idle), or "".
func (s *Service) active(d *delivery) string {
	// A preparation or a base writes nothing to the session: live sessions are what it is for.
	if d.job.Force || s.cfg.Idle <= 0 || d.job.Kind == wire.KindPrepare || d.job.Kind == wire.KindBase {
		return ""
	}
	fi, err := os.Stat(d.file)
	if err != nil {
		return ""
	}
	if age := time.Since(fi.ModTime()); age < s.cfg.Idle {
		return fmt.Sprintf("active: modified %s ago (idle threshold %s; use force)", age.Round(time.Second), s.cfg.Idle)
	}
	return ""
}

// takeLease acquires the session's lease; when another job holds it, the delivery comes
// back after the holder's remaining time (this costs no attempt).
func (s *Service) takeLease(ctx context.Context, d *delivery) bool {
	l, err := acquireLease(ctx, s.res.leases, s.leaseTTL(), leaseKeyOf(d.ev.Store, d.job), d.job.SessionID, s.worker, d.job.ID,
		fleetops.LeaseRecord{Path: d.job.Path, Kind: d.job.Kind, Delivery: d.delivered})
	if err == nil {
		d.lease = l
		return true
	}
	var busy *errLeaseBusy
	delay := s.cfg.LeaseBusyDelay
	if errors.As(err, &busy) {
		delay = min(max(busy.remaining, s.cfg.LeaseBusyDelay), s.leaseTTL())
	}
	d.log.Debug("session busy; job delayed", "reason", err, "delay", delay)
	answered(d.log, slog.LevelWarn, "nak failed", d.msg.NakWithDelay(delay))
	return false
}

// leaseStillOurs renews the lease before the handler runs when admission took long enough
// for it to age (the heartbeat renews it only once the handler runs). Counting the attempt
// is a round trip to a replicated bucket: during a cluster election it can block for
// longer than the lease lives, the lease expires, another worker takes the session, and
// this one would then run its handler beside that worker's. A lease that cannot be renewed
// is not relied on: the attempt is uncounted and the job comes back after LeaseBusyDelay.
func (s *Service) leaseStillOurs(ctx context.Context, d *delivery) bool {
	every := s.leaseTTL() / 3
	if time.Since(d.lease.written) < every {
		return true
	}
	left := s.leaseTTL() - time.Since(d.lease.written)
	rctx, cancel := context.WithTimeout(ctx, max(min(every, left), time.Millisecond))
	err := d.lease.renew(rctx)
	cancel()
	if err == nil {
		return true
	}
	d.log.Warn("lease aged during admission and was not renewed; job delayed", "lost", leaseLost(err), "err", err)
	_, uerr := fleetops.AddAttempts(ctx, s.res.attempts, d.key, -1)
	answered(d.log, slog.LevelDebug, "attempt of a delayed job not uncounted", uerr)
	if !leaseLost(err) {
		d.releaseLease(ctx)
	}
	d.lease = nil
	answered(d.log, slog.LevelWarn, "nak failed", d.msg.NakWithDelay(s.cfg.LeaseBusyDelay))
	return false
}

// countAttempt counts this attempt in COMPACTOR_ATTEMPTS before the handler runs. A job
// whose MaxDeliver attempts all ended without an answer (their workers crashed or lost
// NATS mid-job) is dead-lettered here instead of being tried again.
func (s *Service) countAttempt(ctx context.Context, d *delivery) bool {
	n, err := fleetops.AddAttempts(ctx, s.res.attempts, d.key, 1)
	// NumDelivered also counts busy deliveries: it can only end a job early, not late.
	if !answered(d.log, slog.LevelWarn, "attempt not counted; using the delivery count", err) {
		d.attempt, d.ev.Attempt = int(d.delivered), int(d.delivered)
		return true
	}
	d.attempt, d.ev.Attempt = n, n
	if n <= s.cfg.MaxDeliver {
		if d.lease != nil {
			d.lease.noteAttempt(n)
		}
		return true
	}
	d.ev.Attempt = n - 1
	s.finish(ctx, d, Decision{Outcome: OutcomeFailed,
		Reason: fmt.Sprintf("max deliveries (%d) exhausted: %d attempts ended without an answer (the worker crashed or lost NATS mid-job)", s.cfg.MaxDeliver, n-1)}, wire.Result{})
	return false
}

// refuse dead-letters a delivery before any handler ran (an invalid job, a refused path).
func (s *Service) refuse(ctx context.Context, d *delivery, cause string, err error) {
	ev := d.ev
	ev.Attempt = int(d.delivered)
	log := s.log.With("store", ev.Store, "subject", d.msg.Subject(), "job_seq", ev.JobSeq)
	reason := cause + ": " + err.Error()
	if s.deadLetter(ctx, d.dead(ev, log, cause, reason, err)) {
		log.Warn("job refused and dead-lettered", "path", ev.Path, "reason", reason)
	}
}

// dead is this delivery's job as a dead job: ev is its event, log carries its identity.
func (d *delivery) dead(ev wire.Event, log *slog.Logger, cause, reason string, err error) deadJob {
	return deadJob{msg: d.msg, subject: d.msg.Subject(), payload: d.msg.Data(), deliveries: d.delivered,
		cause: cause, reason: reason, err: err, ev: ev, start: d.start, log: log}
}

// attempt runs the handler on an admitted delivery, with heartbeats, and gives the
// delivery its answer: the classified outcome, or a give-back when a shutdown cancelled it.
func (s *Service) attempt(jc jobContexts, d *delivery) {
	t := &paidAccount{s: s, store: d.ev.Store}
	hctx, cancel := context.WithCancel(withPaidAccount(jc.handlers, t))
	hbDone := make(chan struct{})
	go s.heartbeat(hctx, cancel, d, hbDone)
	res, herr := s.cfg.Handler.Handle(hctx, d.job, d.file)
	cancel()
	<-hbDone

	if h := holdOf(herr); h != nil {
		// Refused its first paid call (ReserveLLM): a wait, not a failure.
		s.hold(jc.answers, d, h)
		return
	}
	s.settleSpend(jc.answers, t, res.LLMInputTokens, herr == nil)
	if herr != nil && jc.handlers.Err() != nil {
		// Stage two of a shutdown cancelled this job: give it back without using an attempt.
		s.handBack(jc.answers, d, handBackShutdown, 0, "")
		d.log.Info("job given back at shutdown", "path", d.job.Path, "err", herr)
		return
	}
	if res.LLMModel == "" {
		t.mu.Lock()
		res.LLMModel = t.model
		t.mu.Unlock()
	}
	dec := Classify(res, herr, d.attempt, s.cfg.MaxDeliver, s.cfg.BackoffBase, s.cfg.BackoffMax)
	s.finish(jc.answers, d, dec, res)
	if dec.Outcome == OutcomeDone && d.job.Kind == wire.KindCompact && res.EntryID != "" {
		agents.Forget(jc.answers, s.res.prepared, s.log, d.ev.Store, d.job.SessionID) // compacted past it
	}
	if dec.Outcome == OutcomeDone || dec.Outcome == OutcomeSkipped {
		s.recheck(jc.answers, d.log, d.job, d.file, res)
	}
}

// heartbeat tells JetStream the job is alive (InProgress resets AckWait) and renews the
// lease at LeaseTTL/3. Only a renewal refused for a wrong revision or a missing key means
// the lease is lost (someone else took the session): the handler is cancelled at once.
// Other failures (NATS unreachable) are retried every second while the lease lasts; the
// handler is cancelled only when the lease TTL has passed since the last successful
// renewal was sent, since from then on another worker may take the session. The TTL is the
// fleet's, the lease bucket's own (leaseTTL), never this process's flag.
func (s *Service) heartbeat(ctx context.Context, cancel context.CancelFunc, d *delivery, done chan<- struct{}) {
	defer close(done)
	ackT := time.NewTicker(s.cfg.AckWait / 3)
	defer ackT.Stop()
	every := s.leaseTTL() / 3
	leaseT := time.NewTimer(every)
	defer leaseT.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-ackT.C:
			answered(d.log, slog.LevelWarn, "in-progress heartbeat failed", d.msg.InProgress())
		case <-leaseT.C:
			every = s.leaseTTL() / 3 // the fleet's, which setup may have changed meanwhile
			left := s.leaseTTL() - time.Since(d.lease.written)
			rctx, rcancel := context.WithTimeout(ctx, max(min(every, left), time.Millisecond))
			err := d.lease.renew(rctx)
			rcancel()
			next := every
			switch {
			case err == nil:
				if failures > 0 {
					d.log.Info("lease renewed again", "failures", failures)
				}
				failures = 0
			case ctx.Err() != nil:
				return
			case leaseLost(err):
				d.log.Error("lease lost; cancelling job", "err", err)
				cancel()
				return
			default:
				failures++
				left = s.leaseTTL() - time.Since(d.lease.written)
				if left <= 0 {
					d.log.Error("lease not renewed within its TTL; another worker may take the session: cancelling job",
						"ttl_s", seconds(s.leaseTTL()), "failures", failures, "err", err)
					cancel()
					return
				}
				d.log.Warn("lease renewal failed; retrying while the lease lasts", "left_s", seconds(left), "err", err)
				next = min(time.Second, left)
			}
			leaseT.Reset(next)
		}
	}
}

// finish ends a delivery: it gives the session's lease back, then records the event and
// gives JetStream its one answer (an ack, a delayed Nak for a retry, or a dead letter and
// Term), in the order that loses nothing when the worker dies between two steps.
func (s *Service) finish(ctx context.Context, d *delivery, dec Decision, res wire.Result) {
	ev, log, msg := d.ev, d.log, d.msg
	ev.Outcome, ev.Reason, ev.Busy = dec.Outcome, dec.Reason, dec.Busy
	ev.EntryID, ev.TokensBefore, ev.TokensAfter, ev.LLMTokens = res.EntryID, res.TokensBefore, res.TokensAfter, res.LLMTokens
	ev.LLMInputTokens, ev.LLMCachedInputTokens, ev.LLMOutputTokens = res.LLMInputTokens, res.LLMCachedInputTokens, res.LLMOutputTokens
	ev.LLMModel = res.LLMModel
	if res.PiUnknown != "" {
		ev.PiUnknown = res.PiUnknown
		s.m.countPiUnknown(ev.Store, res.PiUnknown)
	}
	if dec.Err != nil {
		ev.Error = dec.Err.Error()
	}
	// The session's lease goes first: the job's effect on the session is durable by now, and
	// a client that sees the event below may enqueue the session's next job at once, which
	// must not find the lease still held (it would wait for the lease's whole remaining TTL).
	// A worker that dies before its answer leaves the job to be delivered again, which takes
	// the lease again and finds its effect.
	d.releaseLease(ctx)
	// A final event is published before the job's final answer to JetStream: a worker that
	// dies between the two leaves the job to be delivered again (it then finds its effect and
	// reports it again), never a job answered without its event, which `enqueue --wait`
	// would wait for in vain.
	switch dec.Outcome {
	case OutcomeDone, OutcomeSkipped, OutcomeSuperseded:
		s.record(ctx, log, msg.Subject(), ev, d.start)
		// DoubleAck: once it returns, the subject is free and a follow-up enqueue is accepted.
		answered(log, slog.LevelWarn, "ack failed; the job will be redelivered and refused as already done", msg.DoubleAck(ctx))
	case OutcomeFailed:
		if !s.deadLetter(ctx, d.dead(ev, log, string(OutcomeFailed), dec.Reason, dec.Err)) {
			return
		}
	case OutcomeRetry:
		// Not final: the job keeps its attempt count, and its retry event, which nobody
		// waits for, follows the answer.
		ev.RetryInMs = dec.Delay.Milliseconds()
		answered(log, slog.LevelWarn, "nak failed", msg.NakWithDelay(dec.Delay))
		s.record(ctx, log, msg.Subject(), ev, d.start)
		return
	}
	if d.attempt > 0 || d.delivered > 1 {
		answered(log, slog.LevelDebug, "attempt count not cleared; it expires by itself", fleetops.ClearAttempts(ctx, s.res.attempts, d.key))
	}
}

// releaseLease gives the session's lease back, if the delivery holds it.
func (d *delivery) releaseLease(ctx context.Context) {
	if d.lease != nil {
		answered(d.log, slog.LevelWarn, "lease release failed; it expires by itself", d.lease.release(ctx))
		d.lease = nil
	}
}

// recheck closes the gap of a trigger that arrived while the job ran: such an enqueue was
// refused as "already queued" (the running job's message still occupied the subject). After
// a compaction, if the session is over budget again and its leaf is not the one this job
// produced or refused, a new job is enqueued for the new leaf.
func (s *Service) recheck(ctx context.Context, log *slog.Logger, job wire.Job, file string, res wire.Result) {
	if s.cfg.Assessor == nil || job.Kind != wire.KindCompact {
		return
	}
	known := res.LeafID
	if known == "" && res.Outcome != OutcomeSkipped {
		known = res.EntryID
	}
	if known == "" {
		known = job.ExpectLeafID
	}
	if known == "" {
		return
	}
	a, err := s.cfg.Assessor.Assess(ctx, file)
	if err != nil {
		log.Warn("re-check after job failed", "err", err)
		return
	}
	if !a.Eligible() || a.LeafID == known {
		return
	}
	next := wire.Job{Kind: wire.KindCompact, Store: job.Store, Path: job.Path, SessionID: job.SessionID, Reason: "recheck",
		ExpectLeafID: a.LeafID, OnlyOverBudget: true, Policy: job.Policy, Counter: job.Counter,
		KeepRecentTokens: job.KeepRecentTokens, Instructions: job.Instructions}
	r, err := fleetops.PublishJob(ctx, s.res.js, &next)
	switch {
	case err != nil:
		log.Warn("re-enqueue after job failed", "err", err)
	case r.AlreadyQueued:
		log.Debug("re-check: a job is already queued")
	default:
		log.Info("session still over budget after job; re-enqueued", "leaf", a.LeafID, "tokens", a.Tokens)
	}
}
