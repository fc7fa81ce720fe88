package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// How a job becomes a dead letter: one helper (deadLetter) for the three paths that find
// a job dead: refused at admission, failed at finish, or its deliveries exhausted (the
// max-deliveries advisory). Reading and acting on the dead letters is dlq.go's.

// deadJob is a job message found dead, by any of the three paths that find one: admit
// refuses a delivery before a handler runs (refuse: an invalid job, a path outside its
// store), finish fails one (a permanent error, or its attempts used up), and JetStream's
// max-deliveries advisory names a message whose deliveries ended without a final answer
// (exhausted).
type deadJob struct {
	msg        jetstream.Msg // the delivery that found the job dead; nil for the advisory's
	subject    string        // the job's subject
	payload    []byte
	deliveries uint64
	cause      string // the label of compactor_dead_letters_total
	reason     string
	err        error
	ev         Event        // the job's event: identity and attempt (made the failed event here)
	start      time.Time    // when its delivery began; zero for the advisory's
	log        *slog.Logger // with the job's identity
}

// deadLetter is the one way a job becomes a dead letter, whichever path found it dead. The
// dead letter is written first (one per job message: its id makes a second one, from two
// paths racing, a duplicate); when it cannot be, nothing else happens: a delivery comes back
// after BackoffBase, and false is returned. Then the dead letter is counted, the failed
// event recorded, and the message gets its final answer:
//   - a delivery is terminated after its event, as every job is answered after its event: a
//     worker that dies between the two leaves the job to be delivered again, never a job
//     answered without the event that `enqueue --wait` waits for;
//   - a message whose deliveries are over (the advisory's) is deleted before it: nothing
//     would deliver it again, and no event may say failed while it still blocks its
//     session's subject.
func (s *Service) deadLetter(ctx context.Context, j deadJob) bool {
	dl := newDeadLetter(j.subject, j.ev.JobSeq, j.payload, j.reason, j.err, j.deliveries, s.worker)
	notWritten := "dead letter not written; job kept for redelivery"
	if j.msg == nil {
		notWritten = "dead letter for exhausted job not written"
	}
	if !answered(j.log, slog.LevelError, notWritten, publishDeadLetter(ctx, s.res.js, dl)) {
		if j.msg != nil {
			answered(j.log, slog.LevelWarn, "nak failed", j.msg.NakWithDelay(s.cfg.BackoffBase))
		}
		return false
	}
	if j.msg == nil {
		err := s.res.jobs.DeleteMsg(ctx, j.ev.JobSeq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			err = nil // gone already: the end sought
		}
		if !answered(j.log, slog.LevelError, "exhausted job not deleted", err) {
			return false
		}
	}
	s.m.deadLtrs.WithLabelValues(j.ev.Store, j.cause).Inc()
	ev := j.ev
	ev.Outcome, ev.Reason = OutcomeFailed, j.reason
	if j.err != nil {
		ev.Error = j.err.Error()
	}
	start := j.start
	if start.IsZero() {
		start = time.Now() // the advisory's job ran nowhere here: its event has no duration
	}
	s.record(ctx, j.log, j.subject, ev, start)
	if j.msg != nil {
		answered(j.log, slog.LevelWarn, "term failed", j.msg.TermWithReason(j.reason))
	}
	return true
}

// watchMaxDeliveries handles JetStream's max-deliveries advisory: a message whose last
// allowed delivery ended without a final answer (a worker crashed, or a busy lease on the
// last delivery) would otherwise stay in the work queue and block its session's subject
// forever. It is copied to the dead letters and deleted.
func (s *Service) watchMaxDeliveries(ctx context.Context, bg *tasks) ([]*nats.Subscription, error) {
	var subs []*nats.Subscription
	for _, st := range s.cfg.Stores {
		store := st.Name
		subj := "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + StreamJobs + "." + ConsumerName(store)
		sub, err := s.nc.Subscribe(subj, func(m *nats.Msg) {
			var adv struct {
				StreamSeq  uint64 `json:"stream_seq"`
				Deliveries uint64 `json:"deliveries"`
			}
			if err := json.Unmarshal(m.Data, &adv); err != nil || adv.StreamSeq == 0 {
				return
			}
			bg.goTask(func() { s.exhausted(ctx, store, adv.StreamSeq, adv.Deliveries) })
		})
		if err != nil {
			return nil, fmt.Errorf("subscribe %s: %w", subj, err)
		}
		subs = append(subs, sub)
	}
	return subs, nil
}

// exhausted dead-letters the job message at seq, whose deliveries are over without a final
// answer, unless it is already gone.
func (s *Service) exhausted(ctx context.Context, store string, seq, deliveries uint64) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raw, err := s.res.jobs.GetMsg(ctx, seq)
	if err != nil {
		return // already gone (acked, terminated, or handled by another worker)
	}
	job, _ := decodeJob(raw.Data, s.cfg.JobVersions)
	ev := Event{V: 1, JobID: job.ID, JobSeq: seq, Store: store, SessionID: job.SessionID, Path: job.Path, Kind: job.Kind,
		Attempt: int(deliveries), Worker: s.worker}
	log := s.log.With("store", store, "job_seq", seq)
	if v, id, ok := jobHeadOf(raw.Data); ok && v >= 1 && !slices.Contains(s.cfg.JobVersions, v) {
		// Its deliveries went by waiting for a worker that understands it: queued again.
		s.requeueStored(ctx, log, ev, raw.Subject, raw.Data, deliveries, id)
		return
	}
	reason := fmt.Sprintf("max deliveries exhausted after %d deliveries without a final answer", deliveries)
	if s.deadLetter(ctx, deadJob{subject: raw.Subject, payload: raw.Data, deliveries: deliveries, cause: "max deliveries",
		reason: reason, ev: ev, log: log}) {
		answered(log, slog.LevelDebug, "attempt count not cleared; it expires by itself", clearAttempts(ctx, s.res.attempts, attemptKey(seq, job.ID)))
	}
}
