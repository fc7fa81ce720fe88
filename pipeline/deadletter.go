package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// deadLetter refuses a delivery before any handler ran: dead letter, Term, failed event.
func (s *Service) deadLetter(ctx context.Context, d *delivery, cause string, err error) {
	msg, ev := d.msg, d.ev
	log := s.log.With("store", ev.Store, "subject", msg.Subject(), "job_seq", ev.JobSeq)
	reason := cause + ": " + err.Error()
	dl := newDeadLetter(msg.Subject(), ev.JobSeq, msg.Data(), reason, err, d.delivered, s.worker)
	if perr := publishDeadLetter(ctx, s.res.js, dl); perr != nil {
		log.Error("dead letter not written; job kept for redelivery", "err", perr)
		_ = msg.NakWithDelay(s.cfg.BackoffBase)
		return
	}
	s.m.deadLtrs.WithLabelValues(ev.Store, cause).Inc()
	ev.Outcome, ev.Reason, ev.Error, ev.Attempt = OutcomeFailed, reason, err.Error(), int(d.delivered)
	log.Warn("job refused and dead-lettered", "path", ev.Path, "reason", reason)
	s.record(ctx, log, msg.Subject(), ev, d.start) // the event before the final answer, as in finish
	_ = msg.TermWithReason(reason)
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

func (s *Service) exhausted(ctx context.Context, store string, seq, deliveries uint64) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raw, err := s.res.jobs.GetMsg(ctx, seq)
	if err != nil {
		return // already gone (acked, terminated, or handled by another worker)
	}
	reason := fmt.Sprintf("max deliveries exhausted after %d deliveries without a final answer", deliveries)
	dl := newDeadLetter(raw.Subject, seq, raw.Data, reason, nil, deliveries, s.worker)
	if err := publishDeadLetter(ctx, s.res.js, dl); err != nil {
		s.log.Error("dead letter for exhausted job not written", "seq", seq, "err", err)
		return
	}
	if err := s.res.jobs.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		s.log.Error("exhausted job not deleted", "seq", seq, "err", err)
		return
	}
	s.m.deadLtrs.WithLabelValues(store, "max deliveries").Inc()
	job, _ := DecodeJob(raw.Data)
	_ = clearAttempts(ctx, s.res.attempts, attemptKey(seq, job.ID))
	ev := Event{V: 1, JobID: job.ID, JobSeq: seq, Store: store, SessionID: job.SessionID, Path: job.Path, Kind: job.Kind,
		Outcome: OutcomeFailed, Reason: reason, Attempt: int(deliveries), Worker: s.worker}
	s.record(ctx, s.log.With("store", store, "job_seq", seq), raw.Subject, ev, time.Now())
}
