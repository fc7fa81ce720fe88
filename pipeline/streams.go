package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Names of the JetStream resources. They are shared by every worker and enqueuer on a NATS
// deployment, and created or updated idempotently by every Service at start.
const (
	StreamJobs    = "COMPACTOR_JOBS"
	StreamEvents  = "COMPACTOR_EVENTS"
	StreamDLQ     = "COMPACTOR_DLQ"
	BucketLeases  = "COMPACTOR_LEASES"
	BucketSweep   = "COMPACTOR_SWEEP"
	consumerPfx   = "compactor-"
	eventsPerSess = 32

	// maxFreeDeliveries is how many deliveries a job may spend without a handler attempt
	// (a busy session lease, or a give-back at shutdown): the consumer's MaxDeliver is
	// Config.MaxDeliver plus this, and the worker subtracts the free ones it counted.
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
	prepared jetstream.KeyValue
	cons     map[string]jetstream.Consumer // by store
}

// ensure creates or updates every stream, bucket and the stores' consumers.
func ensure(ctx context.Context, js jetstream.JetStream, cfg Config) (*resources, error) {
	r := &resources{js: js, cons: map[string]jetstream.Consumer{}}
	var err error
	r.jobs, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:                 StreamJobs,
		Description:          "compactor jobs: one pending job per session and kind",
		Subjects:             []string{jobsPrefix + ">"},
		Retention:            jetstream.WorkQueuePolicy,
		MaxMsgsPerSubject:    1,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		Duplicates:           cfg.DuplicateWindow,
		Storage:              jetstream.FileStorage,
		Replicas:             cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", StreamJobs, err)
	}
	r.events, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:              StreamEvents,
		Description:       "compactor job results (metadata only)",
		Subjects:          []string{eventsPrefix + ">"},
		Retention:         jetstream.LimitsPolicy,
		MaxAge:            DefaultEventsMaxAge,
		MaxMsgsPerSubject: eventsPerSess,
		Discard:           jetstream.DiscardOld,
		Storage:           jetstream.FileStorage,
		Replicas:          cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", StreamEvents, err)
	}
	r.dlq, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        StreamDLQ,
		Description: "compactor dead letters: refused, failed or exhausted jobs",
		Subjects:    []string{dlqPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      DefaultDLQMaxAge,
		Discard:     jetstream.DiscardOld,
		Duplicates:  cfg.DuplicateWindow,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", StreamDLQ, err)
	}
	r.leases, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      BucketLeases,
		Description: "per-session leases of running compactor jobs",
		TTL:         cfg.LeaseTTL,
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure bucket %s: %w", BucketLeases, err)
	}
	r.sweep, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      BucketSweep,
		Description: "what the last sweep saw of each session file",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure bucket %s: %w", BucketSweep, err)
	}
	if r.prepared, err = ensurePrepared(ctx, js, cfg); err != nil {
		return nil, err
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

// pendingJobs counts the messages still in COMPACTOR_JOBS for the given stores (in a
// work-queue stream a message stays until it is acked or terminated).
func pendingJobs(ctx context.Context, s jetstream.Stream, stores []Store) (uint64, error) {
	var n uint64
	for _, st := range stores {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(jobsPrefix+st.Name+".>"))
		if err != nil {
			return 0, fmt.Errorf("jobs stream info: %w", err)
		}
		for _, c := range info.State.Subjects {
			n += c
		}
	}
	return n, nil
}
