package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// A lease is a key in COMPACTOR_LEASES (bucket TTL = LeaseTTL) held by one worker while it
// works on a session. It is renewed (rewritten) at LeaseTTL/3; a crashed worker's lease
// disappears by itself after at most LeaseTTL. Leases make jobs of one session (its compact
// and branch_summary subjects, or a redelivery racing a slow original) run one at a time.
type lease struct {
	kv  *fleetops.Bucket
	key string
	val []byte
	rev uint64
	// written is when the last successful write (acquire or renewal) was sent: the
	// server stored it after that, so the lease lasts at least until written + TTL.
	written time.Time
	value   fleetops.LeaseRecord // what val says
}

// noteAttempt adds the job's attempt to the lease's value: the next renewal writes it.
func (l *lease) noteAttempt(n int) {
	l.value.Attempt = n
	if b, err := json.Marshal(l.value); err == nil {
		l.val = b
	}
}

// errLeaseBusy is returned by acquireLease when another holder has the session.
type errLeaseBusy struct {
	holder    fleetops.LeaseRecord
	remaining time.Duration
}

func (e *errLeaseBusy) Error() string {
	return fmt.Sprintf("session lease held by worker %s (job %s) for another %s", e.holder.Worker, e.holder.JobID, e.remaining.Round(time.Millisecond))
}

// leaseKey is <store>.<session token>.
func leaseKey(store, sessionID string) string { return store + "." + wire.SessionToken(sessionID) }

// leaseKeyOf is the lease a job takes: the session's, but a base job's own
// (<store>.<session token>.base). A base job writes nothing the session's other jobs read
// or write but the base itself, which it updates with a compare-and-set; it must neither
// wait for a preparation or a compaction of its session (a lease taken behind another is
// retried only after the holder's whole remaining time) nor hold them back for a summary's
// latency. Two base jobs of one slot (wire.Job.Slot) of a session still run one at a time;
// each slot has its own lease (<store>.<session token>.base<slot>).
func leaseKeyOf(store string, job wire.Job) string {
	if job.Kind == wire.KindBase {
		if job.Slot > 0 {
			return leaseKey(store, job.SessionID) + fleetops.BaseLeaseSuffix + strconv.Itoa(job.Slot)
		}
		return leaseKey(store, job.SessionID) + fleetops.BaseLeaseSuffix
	}
	return leaseKey(store, job.SessionID)
}

// acquireLease takes the lease key (leaseKey, leaseKeyOf) of a job of sessionID.
func acquireLease(ctx context.Context, kv *fleetops.Bucket, ttl time.Duration, key, sessionID, worker, jobID string, what ...fleetops.LeaseRecord) (*lease, error) {
	sent := time.Now()
	lv := fleetops.LeaseRecord{}
	if len(what) > 0 {
		lv = what[0]
	}
	lv.V, lv.Worker, lv.JobID, lv.Since, lv.SessionID = fleetops.LeaseV, worker, jobID, sent.UTC(), sessionID
	val, _ := json.Marshal(lv)
	rev, err := kv.Create(ctx, key, val)
	if err == nil {
		return &lease{kv: kv, key: key, val: val, rev: rev, written: sent, value: lv}, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return nil, fmt.Errorf("lease %s: %w", key, err)
	}
	busy := &errLeaseBusy{remaining: ttl}
	if e, gerr := kv.Get(ctx, key); gerr == nil {
		// A lease of a newer schema version is a lease all the same: the session is busy;
		// only its holder is not read.
		if fleetops.NewerThan(wire.BucketLeases, key, e.Value(), fleetops.LeaseV) == nil {
			_ = json.Unmarshal(e.Value(), &busy.holder)
		} else {
			busy.holder.Worker = "(a newer compactor's)"
		}
		busy.remaining = ttl - time.Since(e.Created())
		if busy.remaining < 0 {
			busy.remaining = 0
		}
	}
	return nil, busy
}

// renew rewrites the lease so its age restarts. An error for which leaseLost is true
// means someone else has the session; any other error (a timeout during a NATS outage)
// leaves the lease as it was, valid until written + TTL.
func (l *lease) renew(ctx context.Context) error {
	sent := time.Now()
	rev, err := l.kv.Update(ctx, l.key, l.val, l.rev)
	if err != nil {
		return fmt.Errorf("renew lease %s: %w", l.key, err)
	}
	l.rev, l.written = rev, sent
	return nil
}

// leaseLost reports whether a renewal error proves the lease is no longer ours: the key
// has another revision (it expired and someone took it, or it was deleted) or is gone.
// Timeouts and connection errors prove nothing: the lease may still be valid.
func leaseLost(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) ||
		errors.Is(err, jetstream.ErrKeyDeleted) || fleetops.IsWrongLastSeq(err)
}

// release deletes the lease if it is still ours.
func (l *lease) release(ctx context.Context) error {
	if err := l.kv.Delete(ctx, l.key, l.rev); err != nil {
		return fmt.Errorf("release lease %s: %w", l.key, err)
	}
	return nil
}
