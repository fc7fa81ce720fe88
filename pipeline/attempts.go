package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Attempts are counted per job message in COMPACTOR_ATTEMPTS, before the handler is
// called. JetStream's NumDelivered cannot be the count: deliveries that never reach the
// handler (the session's lease is busy, a give-back at shutdown) must not use up a job's
// attempts, and a delivery whose worker crashed never reports anything. Counting the
// attempts that started makes a crash cost one attempt, like a failure, and survives
// worker restarts: a job that crashes every worker it reaches is dead-lettered after
// MaxDeliver attempts (MaxDeliver + 1 deliveries), not after the consumer's backstop.

// attemptsTTL is how long the count of a job message is kept after its last change:
// far longer than any wait between two deliveries (BackoffMax is minutes). The key is
// deleted when the job gets its final answer.
const attemptsTTL = 7 * 24 * time.Hour

// attemptKey names the count of one job message: <store>.<seq>.<hash of the job id>. The
// job id is part of it so that a recreated stream (sequences start again at 1) does not
// inherit old counts.
func attemptKey(store string, seq uint64, jobID string) string {
	sum := sha256.Sum256([]byte(jobID))
	return store + "." + strconv.FormatUint(seq, 10) + "." + hex.EncodeToString(sum[:8])
}

// addAttempts adds delta to the count under key and returns the new count.
func addAttempts(ctx context.Context, kv *kvBucket, key string, delta int) (int, error) {
	n, _, err := addCount(ctx, kv, "attempts", key, delta, 0)
	return n, err
}

// addCount adds delta to the decimal count under key (never below 0), with optimistic
// concurrency: a write that lost to another is read and tried again. With limit > 0, a
// count already at limit or more is not added to: over is true and nothing is written.
// what names the count in errors.
func addCount(ctx context.Context, kv *kvBucket, what, key string, delta, limit int) (n int, over bool, err error) {
	for range 10 {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			n := max(delta, 0)
			_, err := kv.Create(ctx, key, []byte(strconv.Itoa(n)))
			if err == nil {
				return n, false, nil
			}
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue
			}
			return 0, false, fmt.Errorf("%s %s: %w", what, key, err)
		}
		if err != nil {
			return 0, false, fmt.Errorf("%s %s: %w", what, key, err)
		}
		n, _ := strconv.Atoi(string(e.Value()))
		if limit > 0 && n >= limit {
			return n, true, nil
		}
		n = max(n+delta, 0)
		_, err = kv.Update(ctx, key, []byte(strconv.Itoa(n)), e.Revision())
		if err == nil {
			return n, false, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !isWrongLastSeq(err) {
			return 0, false, fmt.Errorf("%s %s: %w", what, key, err)
		}
	}
	return 0, false, fmt.Errorf("%s %s: too many concurrent updates", what, key)
}

func clearAttempts(ctx context.Context, kv *kvBucket, key string) error {
	if err := kv.Delete(ctx, key); err != nil {
		return fmt.Errorf("attempts %s: %w", key, err)
	}
	return nil
}
