package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Names of the JetStream resources. They are shared by every worker and client on a NATS
// deployment, and set up only by the services (`compactor run`), at start: clients open
// them and say what is missing.
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
	leases   *kvBucket
	sweep    *kvBucket
	attempts *kvBucket
	prepared *kvBucket
	workers  *kvBucket
	cons     map[string]jetstream.Consumer // by store
}

// ensure sets up every stream, bucket and the stores' consumers, as only a service does
// (clients open them: see open). Each is created with a create-only request; when that
// fails because it exists, it is read again and updated from what the server holds, and
// only where this process's configuration differs (one log line per setting changed).
// Replicas are never lowered: a stream or bucket with more replicas than cfg.Replicas (an
// operator raised it, or another service asked for more) keeps them. So two processes
// starting together cannot undo each other's replicas: neither writes a configuration it
// did not read first, and the loser of a create race only raises. What is left is two
// services whose other settings differ (a fleet in the middle of a configuration change)
// updating the same stream within the same few milliseconds: the later update wins for
// those settings.
//
// The workers bucket is set up first: a client that sees COMPACTOR_JOBS can count on it.
func ensure(ctx context.Context, js jetstream.JetStream, cfg Config, log *slog.Logger) (*resources, error) {
	r := &resources{js: js, cons: map[string]jetstream.Consumer{}}
	for _, b := range bucketConfigs(cfg, r) {
		kv, err := ensureBucket(ctx, js, b.cfg, log)
		if err != nil {
			return nil, err
		}
		*b.dst = kv
	}
	for _, st := range streamConfigs(cfg, r) {
		str, err := ensureStream(ctx, js, st.cfg, log)
		if err != nil {
			return nil, err
		}
		*st.dst = str
	}
	for _, st := range cfg.Stores {
		c, err := ensureConsumer(ctx, js, StreamJobs, consumerConfig(cfg, st.Name), log)
		if err != nil {
			return nil, err
		}
		r.cons[st.Name] = c
	}
	return r, nil
}

type streamSpec struct {
	dst *jetstream.Stream
	cfg jetstream.StreamConfig
}

// streamConfigs are the streams a service sets up, each with where it goes in r.
func streamConfigs(cfg Config, r *resources) []streamSpec {
	out := []streamSpec{
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
	for i := range out {
		out[i].cfg.Storage, out[i].cfg.Replicas = jetstream.FileStorage, cfg.Replicas
	}
	return out
}

type bucketSpec struct {
	dst **kvBucket
	cfg jetstream.KeyValueConfig
}

// bucketConfigs are the buckets a service sets up, the workers' first.
func bucketConfigs(cfg Config, r *resources) []bucketSpec {
	out := []bucketSpec{
		{&r.workers, jetstream.KeyValueConfig{Bucket: BucketWorkers, Description: "the workers serving each store: a key per store and worker, renewed while it works", TTL: workerBeatTTL}},
		{&r.leases, jetstream.KeyValueConfig{Bucket: BucketLeases, Description: "per-session leases of running compactor jobs", TTL: cfg.LeaseTTL}},
		{&r.sweep, jetstream.KeyValueConfig{Bucket: BucketSweep, Description: "what the last sweep saw of each session file"}},
		{&r.attempts, jetstream.KeyValueConfig{Bucket: BucketAttempts, Description: "handler attempts per job message (crashes included)", TTL: attemptsTTL}},
		{&r.prepared, jetstream.KeyValueConfig{Bucket: BucketPrepared, Description: "compaction summaries prepared ahead of time for live agents (one per session)", TTL: cfg.PreparedTTL}},
	}
	for i := range out {
		out[i].cfg.History, out[i].cfg.Storage, out[i].cfg.Replicas = 1, jetstream.FileStorage, cfg.Replicas
	}
	return out
}

// consumerConfig is the durable pull consumer of a store.
func consumerConfig(cfg Config, store string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       ConsumerName(store),
		Description:   "compactor workers of store " + store,
		FilterSubject: jobsPrefix + store + ".>",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    cfg.MaxDeliver + maxFreeDeliveries,
		MaxAckPending: 10000,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// maxCreateRounds bounds create, read, update rounds on a stream that keeps being deleted
// and created by someone else meanwhile.
const maxCreateRounds = 5

// ensureStream creates the stream with a create-only request, or, when it exists,
// updates it from what the server holds where want differs (see reconcile).
func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, log *slog.Logger) (jetstream.Stream, error) {
	for round := 1; ; round++ {
		// Created, or found with exactly this configuration (the server answers a create of
		// an identical stream with the stream).
		str, err := js.CreateStream(ctx, want)
		if err == nil {
			return str, nil
		}
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil, fmt.Errorf("create stream %s: %w", want.Name, explainReplicas(err, want.Replicas))
		}
		str, err = js.Stream(ctx, want.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) && round < maxCreateRounds {
			continue // deleted since: create it again
		}
		if err != nil {
			return nil, fmt.Errorf("read stream %s: %w", want.Name, err)
		}
		next, ok, err := reconcile("stream", want.Name, str.CachedInfo().Config, want, log)
		if err != nil || ok {
			return str, err
		}
		str, err = js.UpdateStream(ctx, next)
		if errors.Is(err, jetstream.ErrStreamNotFound) && round < maxCreateRounds {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("update stream %s: %w", want.Name, explainReplicas(err, next.Replicas))
		}
		return str, nil
	}
}

// ensureBucket is ensureStream for a KV bucket: created by a create-only request, or
// updated from the stream the server holds.
func ensureBucket(ctx context.Context, js jetstream.JetStream, want jetstream.KeyValueConfig, log *slog.Logger) (*kvBucket, error) {
	name := "KV_" + want.Bucket
	for round := 1; ; round++ {
		_, err := js.CreateKeyValue(ctx, want)
		if err == nil {
			return openBucket(js, want.Bucket), nil
		}
		if !errors.Is(err, jetstream.ErrBucketExists) {
			return nil, fmt.Errorf("create bucket %s: %w", want.Bucket, explainReplicas(err, want.Replicas))
		}
		str, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) && round < maxCreateRounds {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read bucket %s: %w", want.Bucket, err)
		}
		// The settings of a bucket as the stream under it holds them (the client library
		// derives the duplicate window from the TTL).
		dup := 2 * time.Minute
		if want.TTL > 0 && want.TTL < dup {
			dup = want.TTL
		}
		sc := jetstream.StreamConfig{Name: name, Description: want.Description, MaxAge: want.TTL, Duplicates: dup,
			MaxMsgsPerSubject: int64(want.History), Replicas: want.Replicas}
		next, ok, err := reconcile("bucket", want.Bucket, str.CachedInfo().Config, sc, log)
		if err != nil {
			return nil, err
		}
		if !ok {
			_, err = js.UpdateStream(ctx, next)
			if errors.Is(err, jetstream.ErrStreamNotFound) && round < maxCreateRounds {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("update bucket %s: %w", want.Bucket, explainReplicas(err, next.Replicas))
			}
		}
		return openBucket(js, want.Bucket), nil
	}
}

// ensureConsumer creates a durable consumer with a create-only request, or updates the
// one the server holds where want differs.
func ensureConsumer(ctx context.Context, js jetstream.JetStream, stream string, want jetstream.ConsumerConfig, log *slog.Logger) (jetstream.Consumer, error) {
	for round := 1; ; round++ {
		c, err := js.CreateConsumer(ctx, stream, want)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, jetstream.ErrConsumerExists) {
			return nil, fmt.Errorf("create consumer %s: %w", want.Durable, err)
		}
		c, err = js.Consumer(ctx, stream, want.Durable)
		if errors.Is(err, jetstream.ErrConsumerNotFound) && round < maxCreateRounds {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read consumer %s: %w", want.Durable, err)
		}
		have := c.CachedInfo().Config
		next := have
		var changes []change
		differ(&changes, "description", &next.Description, want.Description)
		differ(&changes, "filter_subject", &next.FilterSubject, want.FilterSubject)
		differ(&changes, "ack_wait", &next.AckWait, want.AckWait)
		differ(&changes, "max_deliver", &next.MaxDeliver, want.MaxDeliver)
		differ(&changes, "max_ack_pending", &next.MaxAckPending, want.MaxAckPending)
		if len(changes) == 0 {
			return c, nil
		}
		logChanges(log, "consumer", want.Durable, changes)
		c, err = js.UpdateConsumer(ctx, stream, next)
		if errors.Is(err, jetstream.ErrConsumerNotFound) && round < maxCreateRounds {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("update consumer %s: %w", want.Durable, err)
		}
		return c, nil
	}
}

// change is one setting an update changes.
type change struct {
	setting  string
	old, new any
}

// differ notes a change and applies it to *have when want is set (not the zero value: a
// zero setting is the server's default, which the server writes back filled in) and
// differs from it.
func differ[T comparable](changes *[]change, setting string, have *T, want T) {
	var zero T
	if want != zero && *have != want {
		*changes = append(*changes, change{setting, *have, want})
		*have = want
	}
}

func logChanges(log *slog.Logger, kind, name string, changes []change) {
	for _, c := range changes {
		log.Info("updating a setting on the server: this process's configuration differs", kind, name,
			"setting", c.setting, "old", fmt.Sprint(c.old), "new", fmt.Sprint(c.new))
	}
}

// reconcile returns the configuration to update a stream to: what the server holds (have)
// with want's settings where they differ, and the replicas raised to want's but never
// lowered. ok means there is nothing to update. Settings a stream cannot change
// (retention, storage) are an error that names them.
func reconcile(kind, name string, have, want jetstream.StreamConfig, log *slog.Logger) (next jetstream.StreamConfig, ok bool, err error) {
	if want.Retention != have.Retention && want.Retention != 0 {
		return have, false, fmt.Errorf("%s %s: its retention on the server is %s, compactor needs %s; the setting cannot be changed (delete the %s to let `compactor run` create it again)", kind, name, have.Retention, want.Retention, kind)
	}
	next = have
	var changes []change
	differ(&changes, "description", &next.Description, want.Description)
	if len(want.Subjects) > 0 && !slices.Equal(have.Subjects, want.Subjects) {
		changes = append(changes, change{"subjects", have.Subjects, want.Subjects})
		next.Subjects = want.Subjects
	}
	differ(&changes, "max_msgs_per_subject", &next.MaxMsgsPerSubject, want.MaxMsgsPerSubject)
	differ(&changes, "discard", &next.Discard, want.Discard)
	differ(&changes, "discard_new_per_subject", &next.DiscardNewPerSubject, want.DiscardNewPerSubject)
	differ(&changes, "max_age", &next.MaxAge, want.MaxAge)
	differ(&changes, "duplicate_window", &next.Duplicates, want.Duplicates)
	switch {
	case want.Replicas > have.Replicas:
		changes = append(changes, change{"replicas", have.Replicas, want.Replicas})
		next.Replicas = want.Replicas
	case want.Replicas < have.Replicas:
		log.Info("keeping the replicas set on the server (higher than --replicas)", kind, name, "replicas", have.Replicas, "configured", want.Replicas)
	}
	if len(changes) == 0 {
		return have, true, nil
	}
	logChanges(log, kind, name, changes)
	return next, false, nil
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

// open binds what a client uses (the jobs stream, the sweeps' bucket), set up by a
// service. It creates and changes nothing: what is missing is a *StreamError naming it,
// which says that `compactor run` sets it up.
func open(ctx context.Context, js jetstream.JetStream, _ Config, _ *slog.Logger) (*resources, error) {
	r := &resources{js: js, cons: map[string]jetstream.Consumer{}}
	str, err := js.Stream(ctx, StreamJobs)
	if err != nil {
		return nil, missing(StreamJobs, err)
	}
	r.jobs = str
	if _, err := js.KeyValue(ctx, BucketSweep); err != nil {
		return nil, missing("KV_"+BucketSweep, err)
	}
	r.sweep = openBucket(js, BucketSweep)
	return r, nil
}

// missing turns a not-found error on stream (a bucket's is KV_<bucket>) into the
// *StreamError that says a service sets it up.
func missing(stream string, err error) error {
	if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) {
		return &StreamError{Stream: stream, Kind: ErrNoService}
	}
	return fmt.Errorf("open %s: %w", stream, err)
}

// ensureUntil sets up (a service: ensure) or opens (a client: open) the resources, again
// until it succeeds, a permanent error occurs, or timeout passes: a cluster that is
// electing leaders (after a node restart) answers with timeouts and "temporarily
// unavailable" for a few seconds, which must not stop a worker from starting.
func ensureUntil(ctx context.Context, js jetstream.JetStream, cfg Config, log *slog.Logger) (*resources, error) {
	setup := ensure
	if cfg.Client {
		setup = open
	}
	deadline := time.Now().Add(cfg.StartupTimeout)
	wait := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		res, err := setup(ctx, js, cfg, log)
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		if se := (*StreamError)(nil); errors.As(err, &se) {
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
