package pipeline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go/jetstream"
)

func publishDeadLetter(ctx context.Context, js jetstream.JetStream, dl wire.DeadLetter) error {
	b, err := json.Marshal(dl)
	if err != nil {
		return fmt.Errorf("dead letter: %w", err)
	}
	// One record per job message, even if two workers (or the advisory path) race.
	if err := publishRetry(ctx, js, wire.DLQSubjectFor(dl.Subject), b, "dlq:"+strconv.FormatUint(dl.JobSeq, 10)); err != nil {
		return fmt.Errorf("dead letter for job %d: %w", dl.JobSeq, err)
	}
	return nil
}

func publishEvent(ctx context.Context, js jetstream.JetStream, jobSubject string, ev wire.Event) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("event: %w", err)
	}
	// A fresh id per event: a retry of a publish that was stored after all is dropped.
	var id [12]byte
	_, _ = rand.Read(id[:])
	if err := publishRetry(ctx, js, wire.EventSubjectFor(jobSubject, ev.JobSeq), b, "ev:"+hex.EncodeToString(id[:])); err != nil {
		return fmt.Errorf("event for job %d: %w", ev.JobSeq, err)
	}
	return nil
}

// publishRetryFor bounds publishRetry: a final event or a dead letter survives a leader
// election or a short outage, and a long outage does not hold a job slot forever.
const publishRetryFor = time.Minute

// publishRetry publishes with a message id (so that a retried publish is stored once),
// retrying transient failures with backoff for up to publishRetryFor or until ctx ends.
func publishRetry(ctx context.Context, js jetstream.JetStream, subject string, data []byte, msgID string) error {
	deadline := time.Now().Add(publishRetryFor)
	wait := 100 * time.Millisecond
	for {
		_, err := js.Publish(ctx, subject, data, jetstream.WithMsgID(msgID))
		if err == nil || !transient(err) || ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}
