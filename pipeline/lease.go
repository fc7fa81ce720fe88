package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A lease is a key in COMPACTOR_LEASES (bucket TTL = LeaseTTL) held by one worker while it
// works on a session. It is renewed (rewritten) at LeaseTTL/3; a crashed worker's lease
// disappears by itself after at most LeaseTTL. Leases make jobs of one session (its compact
// and branch_summary subjects, or a redelivery racing a slow original) run one at a time.
type lease struct {
	kv  jetstream.KeyValue
	key string
	val []byte
	rev uint64
}

type leaseValue struct {
	Worker string    `json:"worker"`
	JobID  string    `json:"jobId"`
	Since  time.Time `json:"since"`
}

// errLeaseBusy is returned by acquireLease when another holder has the session.
type errLeaseBusy struct {
	holder    leaseValue
	remaining time.Duration
}

func (e *errLeaseBusy) Error() string {
	return fmt.Sprintf("session lease held by worker %s (job %s) for another %s", e.holder.Worker, e.holder.JobID, e.remaining.Round(time.Millisecond))
}

func leaseKey(store, sessionID string) string { return "s." + store + "." + SessionToken(sessionID) }

func acquireLease(ctx context.Context, kv jetstream.KeyValue, ttl time.Duration, store, sessionID, worker, jobID string) (*lease, error) {
	key := leaseKey(store, sessionID)
	val, _ := json.Marshal(leaseValue{Worker: worker, JobID: jobID, Since: time.Now().UTC()})
	rev, err := kv.Create(ctx, key, val)
	if err == nil {
		return &lease{kv: kv, key: key, val: val, rev: rev}, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return nil, fmt.Errorf("lease %s: %w", key, err)
	}
	busy := &errLeaseBusy{remaining: ttl}
	if e, gerr := kv.Get(ctx, key); gerr == nil {
		_ = json.Unmarshal(e.Value(), &busy.holder)
		busy.remaining = ttl - time.Since(e.Created())
		if busy.remaining < 0 {
			busy.remaining = 0
		}
	}
	return nil, busy
}

// renew rewrites the lease so its age restarts; it fails if someone else took it over.
func (l *lease) renew(ctx context.Context) error {
	rev, err := l.kv.Update(ctx, l.key, l.val, l.rev)
	if err != nil {
		return fmt.Errorf("renew lease %s: %w", l.key, err)
	}
	l.rev = rev
	return nil
}

// release deletes the lease if it is still ours.
func (l *lease) release(ctx context.Context) error {
	if err := l.kv.Delete(ctx, l.key, jetstream.LastRevision(l.rev)); err != nil {
		return fmt.Errorf("release lease %s: %w", l.key, err)
	}
	return nil
}

// freeKey counts the deliveries of one job message (by stream sequence) that did not reach
// the handler: busy leases and give-backs at shutdown. They are subtracted from
// NumDelivered so contention does not use up a job's attempts. The key lives in the lease
// bucket and expires with its TTL; busy delays are kept below LeaseTTL/2 so it is
// refreshed in time.
func freeKey(seq uint64) string { return fmt.Sprintf("free.%d", seq) }

func freeDeliveries(ctx context.Context, kv jetstream.KeyValue, seq uint64) int {
	e, err := kv.Get(ctx, freeKey(seq))
	if err != nil {
		return 0
	}
	var n int
	_ = json.Unmarshal(e.Value(), &n)
	return n
}

func addFreeDelivery(ctx context.Context, kv jetstream.KeyValue, seq uint64) {
	for range 5 {
		e, err := kv.Get(ctx, freeKey(seq))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			if _, err := kv.Create(ctx, freeKey(seq), []byte("1")); err == nil {
				return
			}
			continue
		}
		if err != nil {
			return
		}
		var n int
		_ = json.Unmarshal(e.Value(), &n)
		b, _ := json.Marshal(n + 1)
		if _, err := kv.Update(ctx, freeKey(seq), b, e.Revision()); err == nil {
			return
		}
	}
}
