package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// How a job becomes a dead letter: one helper (deadLetter) for the paths that find a job
// dead: refused at admission, failed at finish, or its deliveries used up. Reading and
// acting on the dead letters is dlq.go's.

// deadJob is a job message found dead, by any of the paths that find one: admit refuses a
// delivery before a handler runs (refuse: an invalid job, a path outside its store, its
// deliveries used up without an answer), and finish fails one (a permanent error, or its
// attempts used up). Every path has the delivery in hand: no worker needs to read or
// delete a message of the stream by its sequence, which a permission cannot limit to a
// store.
type deadJob struct {
	msg        jetstream.Msg // the delivery that found the job dead
	subject    string        // the job's subject
	payload    []byte
	deliveries uint64
	cause      string // the label of compactor_dead_letters_total
	reason     string
	err        error
	ev         wire.Event   // the job's event: identity and attempt (made the failed event here)
	start      time.Time    // when its delivery began
	log        *slog.Logger // with the job's identity
}

// deadLetter is the one way a job becomes a dead letter, whichever path found it dead. The
// dead letter is written first (one per job message: its id makes a second one, from two
// paths racing, a duplicate); when it cannot be, nothing else happens: the delivery comes
// back after BackoffBase, and false is returned. Then the dead letter is counted, the
// failed event recorded, and the delivery is terminated after its event, as every job is
// answered after its event: a worker that dies between the two leaves the job to be
// delivered again, never a job answered without the event that `enqueue --wait` waits for.
func (s *Service) deadLetter(ctx context.Context, j deadJob) bool {
	dl := wire.NewDeadLetter(j.subject, j.ev.JobSeq, j.payload, j.reason, j.err, j.deliveries, s.worker)
	if !answered(j.log, slog.LevelError, "dead letter not written; job kept for redelivery", publishDeadLetter(ctx, s.res.js, dl)) {
		answered(j.log, slog.LevelWarn, "nak failed", j.msg.NakWithDelay(s.cfg.BackoffBase))
		return false
	}
	s.m.deadLtrs.WithLabelValues(j.ev.Store, j.cause).Inc()
	ev := j.ev
	ev.Outcome, ev.Reason = OutcomeFailed, j.reason
	if j.err != nil {
		ev.Error = j.err.Error()
	}
	s.record(ctx, j.log, j.subject, ev, j.start)
	answered(j.log, slog.LevelWarn, "term failed", j.msg.TermWithReason(j.reason))
	return true
}

// exhausted dead-letters a delivery beyond MaxDeliver plus maxFreeDeliveries: the job's
// deliveries ended again and again without a final answer (busy leases, give-backs), and
// it would otherwise block its session's subject forever. Its attempt count goes with it.
func (s *Service) exhausted(ctx context.Context, d *delivery) {
	ev := d.ev
	ev.Attempt = int(d.delivered)
	reason := fmt.Sprintf("max deliveries exhausted after %d deliveries without a final answer", d.delivered)
	if s.deadLetter(ctx, d.dead(ev, d.log, "max deliveries", reason, nil)) {
		d.log.Warn("job dead-lettered: its deliveries are used up", "path", d.job.Path, "deliveries", d.delivered)
		answered(d.log, slog.LevelDebug, "attempt count not cleared; it expires by itself", clearAttempts(ctx, s.res.attempts, d.key))
	}
}
