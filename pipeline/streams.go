package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Names of the JetStream resources. They are shared by every worker and enqueuer on a NATS
// deployment, and created or updated idempotently by every Service at start.
const (
	StreamJobs   = "COMPACTOR_JOBS"
	StreamEvents = "COMPACTOR_EVENTS"
	StreamDLQ    = "COMPACTOR_DLQ"
	BucketLeases = "COMPACTOR_LEASES"
	BucketSweep  = "COMPACTOR_SWEEP"
	// BucketAttempts counts handler attempts per job message, so a job that crashes its
	// worker is bounded by MaxDeliver like one that fails (see attempts.go).
	BucketAttempts = "COMPACTOR_ATTEMPTS"
	consumerPfx    = "compactor-"
	eventsPerSess  = 32

	// maxFreeDeliveries is how many deliveries a job may spend without a handler attempt
	// (a busy session lease, or a give-back at shutdown): the consumer's MaxDeliver is
	// Config.MaxDeliver plus this. Handler attempts, crashes included, are counted in
	// COMPACTOR_ATTEMPTS and bounded by Config.MaxDeliver; this is only the backstop for
	// endless contention, caught by the max-deliveries advisory.
	maxFreeDeliveries = 50
)

// ConsumerName is the durable pull consumer of a store.
func ConsumerName(store string) string { return consumerPfx + store }

// errCodeDiscardNewPerSubject is the err_code of a publish refused because the subject
// already holds its one message (MaxMsgsPerSubject 1 + DiscardNewPerSubject).
const errCodeDiscardNewPerSubject jetstream.ErrorCode = 10077

// IsAlreadyQueued reports whether a publish error means the session already has a pending
// job of that kind.
func IsAlreadyQueued(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeDiscardNewPerSubject
}

type resources struct {
	js       jetstream.JetStream
	jobs     jetstream.Stream
	events   jetstream.Stream
	dlq      jetstream.Stream
	leases   jetstream.KeyValue
	sweep    jetstream.KeyValue
	attempts jetstream.KeyValue
	prepared jetstream.KeyValue
	cons     map[string]jetstream.Consumer // by store
}

// ensure creates or updates every stream, bucket and the stores' consumers. Replicas are
// never lowered: a stream or bucket that already has more replicas than cfg.Replicas (an
// operator raised it) keeps them, so a worker restarted with the default does not undo a
// cluster's fault tolerance.
func ensure(ctx context.Context, js jetstream.JetStream, cfg Config, log *slog.Logger) (*resources, error) {
	r := &resources{js: js, cons: map[string]jetstream.Consumer{}}
	streams := []struct {
		dst *jetstream.Stream
		cfg jetstream.StreamConfig
	}{
		{&r.jobs, jetstream.StreamConfig{
			Name:                 StreamJobs,
			Description:          "compactor jobs: one pending job per session and kind",
			Subjects:             []string{jobsPrefix + ">"},
			Retention:            jetstream.WorkQueuePolicy,
			MaxMsgsPerSubject:    1,
			Discard:              jetstream.DiscardNew,
			DiscardNewPerSubject: true,
			Duplicates:           cfg.DuplicateWindow,
		}},
		{&r.events, jetstream.StreamConfig{
			Name:              StreamEvents,
			Description:       "compactor job results (metadata only)",
			Subjects:          []string{eventsPrefix + ">"},
			Retention:         jetstream.LimitsPolicy,
			MaxAge:            DefaultEventsMaxAge,
			MaxMsgsPerSubject: eventsPerSess,
			Discard:           jetstream.DiscardOld,
		}},
		{&r.dlq, jetstream.StreamConfig{
			Name:        StreamDLQ,
			Description: "compactor dead letters: refused, failed or exhausted jobs",
			Subjects:    []string{dlqPrefix + ">"},
			Retention:   jetstream.LimitsPolicy,
			MaxAge:      DefaultDLQMaxAge,
			Discard:     jetstream.DiscardOld,
			Duplicates:  cfg.DuplicateWindow,
		}},
	}
	for _, st := range streams {
		sc := st.cfg
		sc.Storage = jetstream.FileStorage
		var err error
		if sc.Replicas, err = keepReplicas(ctx, js, sc.Name, cfg.Replicas, log); err != nil {
			return nil, err
		}
		str, err := js.CreateOrUpdateStream(ctx, sc)
		if err != nil {
			return nil, fmt.Errorf("ensure stream %s: %w", sc.Name, explainReplicas(err, sc.Replicas))
		}
		*st.dst = str
	}
	buckets := []struct {
		dst *jetstream.KeyValue
		cfg jetstream.KeyValueConfig
	}{
		{&r.leases, jetstream.KeyValueConfig{Bucket: BucketLeases, Description: "per-session leases of running compactor jobs", TTL: cfg.LeaseTTL}},
		{&r.sweep, jetstream.KeyValueConfig{Bucket: BucketSweep, Description: "what the last sweep saw of each session file"}},
		{&r.attempts, jetstream.KeyValueConfig{Bucket: BucketAttempts, Description: "handler attempts per job message (crashes included)", TTL: attemptsTTL}},
		{&r.prepared, jetstream.KeyValueConfig{Bucket: BucketPrepared, Description: "compaction summaries prepared ahead of time for live agents (one per session)", TTL: cfg.PreparedTTL}},
	}
	for _, b := range buckets {
		kc := b.cfg
		kc.History, kc.Storage = 1, jetstream.FileStorage
		var err error
		if kc.Replicas, err = keepReplicas(ctx, js, "KV_"+kc.Bucket, cfg.Replicas, log); err != nil {
			return nil, err
		}
		kv, err := js.CreateOrUpdateKeyValue(ctx, kc)
		if err != nil {
			return nil, fmt.Errorf("ensure bucket %s: %w", kc.Bucket, explainReplicas(err, kc.Replicas))
		}
		*b.dst = kv
	}
	for _, st := range cfg.Stores {
		c, err := js.CreateOrUpdateConsumer(ctx, StreamJobs, jetstream.ConsumerConfig{
			Durable:       ConsumerName(st.Name),
			Description:   "compactor workers of store " + st.Name,
			FilterSubject: jobsPrefix + st.Name + ".>",
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       cfg.AckWait,
			MaxDeliver:    cfg.MaxDeliver + maxFreeDeliveries,
			MaxAckPending: 10000,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		if err != nil {
			return nil, fmt.Errorf("ensure consumer %s: %w", ConsumerName(st.Name), err)
		}
		r.cons[st.Name] = c
	}
	return r, nil
}

// keepReplicas returns the replica count to configure on stream name: want, or the
// stream's current count when that is higher. A stream that exists but cannot be read
// (its leader is being elected) is an error, retried by ensureUntil: updating it blind
// could lower its replicas.
func keepReplicas(ctx context.Context, js jetstream.JetStream, name string, want int, log *slog.Logger) (int, error) {
	str, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return want, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read stream %s: %w", name, err)
	}
	have := str.CachedInfo().Config.Replicas
	if have > want {
		log.Info("keeping the replicas set on the server (higher than --replicas)", "stream", name, "replicas", have, "configured", want)
		return have, nil
	}
	return want, nil
}

// explainReplicas adds what an operator can do to the errors a replica count causes.
func explainReplicas(err error, replicas int) error {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return err
	}
	switch apiErr.ErrorCode {
	case errCodeReplicasNotSupported:
		return fmt.Errorf("%w (--replicas %d needs a clustered NATS; this server is not clustered: use --replicas 1)", err, replicas)
	case errCodeInsufficientResources, errCodeClusterNoPeers:
		return fmt.Errorf("%w (%d replicas need %d JetStream servers up in the cluster)", err, replicas, replicas)
	}
	return err
}

// JetStream API error codes the pipeline tells apart (nats-server's errors.json).
const (
	errCodeClusterNoPeers        jetstream.ErrorCode = 10005 // "no suitable peers for placement": too few servers up (yet)
	errCodeClusterNotAvail       jetstream.ErrorCode = 10008 // "JetStream system temporarily unavailable"
	errCodeClusterNotLeader      jetstream.ErrorCode = 10009
	errCodeInsufficientResources jetstream.ErrorCode = 10023
	errCodeReplicasNotSupported  jetstream.ErrorCode = 10074 // replicas > 1 on a server that is not clustered
	errCodeStreamOffline         jetstream.ErrorCode = 10118
	errCodeStreamOfflineReason   jetstream.ErrorCode = 10194
)

// transient reports whether a JetStream error may go away by itself: a timeout, no
// responders, a cluster electing a leader or missing a peer for a while.
func transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrDisconnected) {
		return true
	}
	if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case errCodeDiscardNewPerSubject:
			return false // "already queued" is a 503 too, and an answer
		case errCodeClusterNoPeers, errCodeClusterNotAvail, errCodeClusterNotLeader, errCodeInsufficientResources, errCodeStreamOffline, errCodeStreamOfflineReason:
			return true
		}
		return apiErr.Code == 503
	}
	return false
}

// ensureUntil runs ensure until it succeeds, a permanent error occurs, or timeout passes:
// a cluster that is electing leaders (after a node restart) answers with timeouts and
// "temporarily unavailable" for a few seconds, which must not stop a worker from starting.
func ensureUntil(ctx context.Context, js jetstream.JetStream, cfg Config, log *slog.Logger) (*resources, error) {
	deadline := time.Now().Add(cfg.StartupTimeout)
	wait := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		res, err := ensure(ctx, js, cfg, log)
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		if !transient(err) {
			if unavailable(err) {
				return nil, diagnose(ctx, js, StreamJobs, err)
			}
			return nil, err
		}
		if time.Now().Add(wait).After(deadline) {
			return nil, fmt.Errorf("JetStream not ready after %s (%d attempts; --startup-timeout): %w", cfg.StartupTimeout, attempt, diagnose(ctx, js, StreamJobs, err))
		}
		log.Warn("JetStream not ready; retrying", "attempt", attempt, "retry_in", wait.String(), "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// pendingJobs counts the messages still in COMPACTOR_JOBS for the given stores (in a
// work-queue stream a message stays until it is acked or terminated).
func pendingJobs(ctx context.Context, s jetstream.Stream, stores []Store) (uint64, error) {
	var n uint64
	for _, st := range stores {
		c, err := countSubjects(ctx, s, jobsPrefix+st.Name+".>")
		if err != nil {
			return 0, fmt.Errorf("jobs stream info: %w", err)
		}
		n += c
	}
	return n, nil
}
