package fleetops

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
)

// Attempts are counted per job message in COMPACTOR_ATTEMPTS, before the handler is
// called. JetStream's NumDelivered cannot be the count: deliveries that never reach the
// handler (the session's lease is busy, a give-back at shutdown) must not use up a job's
// attempts, and a delivery whose worker crashed never reports anything. Counting the
// attempts that started makes a crash cost one attempt, like a failure, and survives
// worker restarts: a job that crashes every worker it reaches is dead-lettered after
// MaxDeliver attempts (MaxDeliver + 1 deliveries), not after the consumer's backstop.

// AttemptKey names the count of one job message: <store>.<seq>.<hash of the job id>. The
// job id is part of it so that a recreated stream (sequences start again at 1) does not
// inherit old counts.
func AttemptKey(store string, seq uint64, jobID string) string {
	sum := sha256.Sum256([]byte(jobID))
	return store + "." + strconv.FormatUint(seq, 10) + "." + hex.EncodeToString(sum[:8])
}

// AddAttempts adds delta to the count under key and returns the new count.
func AddAttempts(ctx context.Context, kv *Bucket, key string, delta int) (int, error) {
	n, _, err := AddCount(ctx, kv, "attempts", key, delta, 0)
	return n, err
}

// AddCount adds delta to the count under key (never below 0), with optimistic
// concurrency: a write that lost to another is read and tried again. With limit > 0, a
// count already at limit or more is not added to: over is true and nothing is written.
// what names the count in errors. A count of a newer schema version is left as it is (a
// *NewerRecordError).
func AddCount(ctx context.Context, kv *Bucket, what, key string, delta, limit int) (n int, over bool, err error) {
	c, err := UpdateCount(ctx, kv, what, key, func(c *CountRecord) bool {
		if limit > 0 && c.N >= limit {
			over = true
			return false
		}
		c.N = max(c.N+delta, 0)
		return true
	})
	return c.N, over, err
}

// UpdateCount applies change to the count record under key (a zero record when there is
// none) and writes it if change says so, with optimistic concurrency: a write that lost
// to another is read and tried again. It returns the record as it stands. A record this
// version cannot read (a newer schema version: a *NewerRecordError, or a damaged value) is
// not written.
func UpdateCount(ctx context.Context, kv *Bucket, what, key string, change func(*CountRecord) bool) (CountRecord, error) {
	for n := range 10 {
		if n > 0 {
			if err := AfterConflict(ctx, n); err != nil {
				return CountRecord{}, fmt.Errorf("%s %s: %w", what, key, err)
			}
		}
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			c := CountRecord{V: CountV}
			if !change(&c) {
				return c, nil
			}
			_, err := kv.Create(ctx, key, c.Bytes())
			if err == nil {
				return c, nil
			}
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue
			}
			return CountRecord{}, fmt.Errorf("%s %s: %w", what, key, err)
		}
		if err != nil {
			return CountRecord{}, fmt.Errorf("%s %s: %w", what, key, err)
		}
		c, err := ParseCount(kv.Name(), key, e.Value())
		if err != nil {
			return CountRecord{}, err
		}
		if !change(&c) {
			return c, nil
		}
		_, err = kv.Update(ctx, key, c.Bytes(), e.Revision())
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !IsWrongLastSeq(err) {
			return CountRecord{}, fmt.Errorf("%s %s: %w", what, key, err)
		}
	}
	return CountRecord{}, fmt.Errorf("%s %s: too many concurrent updates", what, key)
}

func ClearAttempts(ctx context.Context, kv *Bucket, key string) error {
	if err := kv.Delete(ctx, key); err != nil {
		return fmt.Errorf("attempts %s: %w", key, err)
	}
	return nil
}
