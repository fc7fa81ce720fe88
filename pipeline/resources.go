package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The JetStream resources a worker (or a client) binds at start: what setup set up, opened
// and checked, the stores' consumers, and the retries while a cluster settles.

type resources struct {
	js       jetstream.JetStream
	leases   *fleetops.Bucket
	sweep    *fleetops.Bucket
	attempts *fleetops.Bucket
	prepared *fleetops.Bucket
	workers  *fleetops.Bucket
	spend    *fleetops.Bucket
	cons     map[string]jetstream.Consumer // by store: compactor-<store> on COMPACTOR_JOBS
	dlqCons  map[string]jetstream.Consumer // by store: compactor-dlq-<store> on COMPACTOR_DLQ (its count)
	fleet    fleetops.FleetSettings
}

// setupConfig is the part of a service's configuration that setup applies.
func (c Config) setupConfig() fleetops.SetupConfig {
	sc := fleetops.SetupConfig{Replicas: c.Replicas, AckWait: c.AckWait, MaxDeliver: c.MaxDeliver, LeaseTTL: c.LeaseTTL,
		DuplicateWindow: c.DuplicateWindow, PreparedTTL: c.PreparedTTL, JobsMaxAge: c.JobsMaxAge, JobsMaxBytes: c.JobsMaxBytes,
		EventsMaxAge: c.EventsMaxAge, EventsMaxBytes: c.EventsMaxBytes, DLQMaxBytes: c.DLQMaxBytes, RecordsMaxBytes: c.RecordsMaxBytes}
	for _, st := range c.Stores {
		sc.Stores = append(sc.Stores, st.Name)
	}
	return sc
}

// bind opens what a worker (or a client, cfg.Client) uses, as it was set up, and checks
// that it is there: the fleet's settings, each bucket and the jobs stream (a direct get in
// the first store's part of each: the requests a store's roles may make), and each
// store's consumers. It creates and changes nothing. What is missing or different is a
// *NotSetUpError that names it and the command that sets it up. settings are the fleet's
// settings as this process's own setup just wrote them (nil: read them).
func bind(ctx context.Context, js jetstream.JetStream, cfg Config, settings *fleetops.FleetSettings, log *slog.Logger) (*resources, error) {
	if settings == nil {
		var err error
		if settings, err = fleetops.ReadFleet(ctx, js.Conn()); err != nil {
			return nil, err
		}
	}
	r := &resources{js: js, cons: map[string]jetstream.Consumer{}, dlqCons: map[string]jetstream.Consumer{}, fleet: *settings}
	r.leases, r.sweep, r.attempts = fleetops.OpenBucket(js, wire.BucketLeases), fleetops.OpenBucket(js, wire.BucketSweep), fleetops.OpenBucket(js, wire.BucketAttempts)
	r.prepared, r.workers, r.spend = fleetops.OpenBucket(js, wire.BucketPrepared), fleetops.OpenBucket(js, wire.BucketWorkers), fleetops.OpenBucket(js, wire.BucketSpend)
	probe := cfg.Stores[0].Name
	buckets := []*fleetops.Bucket{r.sweep, r.workers}
	if !cfg.Client {
		buckets = []*fleetops.Bucket{r.leases, r.attempts, r.sweep, r.prepared, r.workers, r.spend}
	}
	for _, b := range buckets {
		if _, err := b.Last(ctx, probe+"._probe"); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, probeError("bucket "+b.Name(), err)
		}
	}
	if _, err := fleetops.DirectLast(ctx, js.Conn(), wire.StreamJobs, wire.JobsPrefix+probe+"._probe"); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, probeError("stream "+wire.StreamJobs, err)
	}
	if cfg.Client {
		return r, nil
	}
	for _, st := range cfg.Stores {
		c, err := bindConsumer(ctx, js, wire.StreamJobs, fleetops.StoreConsumerConfig(fleetops.SetupConfig{}, st.Name))
		if err != nil {
			return nil, err
		}
		r.cons[st.Name] = c
		if c, err = bindConsumer(ctx, js, wire.StreamDLQ, fleetops.DLQConsumerConfig(st.Name)); err != nil {
			return nil, err
		}
		r.dlqCons[st.Name] = c
	}
	return r, nil
}

// probeError explains a probe of a bucket or stream that did not answer. Nothing answers
// a direct get of a stream that does not exist or does not allow them, and, for a moment,
// of one whose servers are electing a leader: the start retries it within StartupTimeout,
// and says what it means if it lasts.
func probeError(what string, err error) error {
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("%s answers no direct get (it does not exist or was set up by an older compactor: run `compactor setup`, or `compactor setup --migrate`; or its servers are electing a leader): %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// bindConsumer opens a store's consumer and checks the settings that make it the store's.
func bindConsumer(ctx context.Context, js jetstream.JetStream, stream string, want jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	store := strings.TrimPrefix(strings.TrimPrefix(want.Durable, wire.DLQConsumerPrefix), wire.ConsumerPrefix)
	remedy := fmt.Sprintf("run `compactor setup --store %s` with the admin's credentials, or `compactor run --setup`", store)
	c, err := js.Consumer(ctx, stream, want.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, &fleetops.NotSetUpError{What: fmt.Sprintf("consumer %s of %s does not exist", want.Durable, stream), Remedy: remedy}
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, &fleetops.NotSetUpError{What: fmt.Sprintf("stream %s does not exist", stream), Remedy: remedy}
	}
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", want.Durable, err)
	}
	have := c.CachedInfo().Config
	switch {
	case have.FilterSubject != want.FilterSubject:
		return nil, &fleetops.NotSetUpError{What: fmt.Sprintf("consumer %s of %s takes %q, not the store's %q", want.Durable, stream, have.FilterSubject, want.FilterSubject), Remedy: remedy}
	case want.MaxDeliver != 0 && have.MaxDeliver != want.MaxDeliver:
		return nil, &fleetops.NotSetUpError{What: fmt.Sprintf("consumer %s of %s was set up by an older compactor (max_deliver %d)", want.Durable, stream, have.MaxDeliver),
			Remedy: "run `compactor setup --migrate` (docs/security.md, \"Upgrading\")"}
	}
	return c, nil
}

// ensureUntil sets up (the admin: ensure, then bind) or binds (a worker or client) the
// resources, again until it succeeds, a permanent error occurs, or timeout passes: a
// cluster that is electing leaders (after a node restart) answers with timeouts and
// "temporarily unavailable" for a few seconds, which must not stop a worker from
// starting. What is not set up, and a permission the server refused, are said at once.
// then, when given, runs on the bound resources within the same retries (the stores'
// claims, which a cluster settling after a setup's changes can also time out).
func ensureUntil(ctx context.Context, js jetstream.JetStream, cfg Config, log *slog.Logger, then func(context.Context, *resources) error) (*resources, error) {
	deadline := time.Now().Add(cfg.StartupTimeout)
	wait := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		res, err := access.Guard(ctx, js.Conn(), func(ctx context.Context) (*resources, error) {
			var written *fleetops.FleetSettings
			if cfg.Setup && !cfg.Client {
				// The embedded server is this service's own: an older layout on it is
				// migrated at once (a migration refuses while other workers serve).
				sr, err := fleetops.SetupWith(ctx, js, cfg.setupConfig(), cfg.NATS.URL == "", false, log)
				if err != nil {
					return nil, err
				}
				written = sr.Fleet
			}
			res, err := bind(ctx, js, cfg, written, log)
			if err == nil && then != nil {
				err = then(ctx, res)
			}
			return res, err
		})
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		var (
			se *fleetops.StreamError
			ns *fleetops.NotSetUpError
			pe *access.PermissionError
			oe *fleetops.OldLayoutError
			le *fleetops.LiveWorkersError
			we *fleetops.OwnerError
		)
		if errors.As(err, &se) || errors.As(err, &ns) || errors.As(err, &pe) || errors.As(err, &oe) || errors.As(err, &le) || errors.As(err, &we) {
			return nil, err
		}
		if !fleetops.Transient(err) {
			if fleetops.Unavailable(err) {
				return nil, fleetops.Diagnose(ctx, js, wire.StreamJobs, err)
			}
			return nil, err
		}
		if time.Now().Add(wait).After(deadline) {
			return nil, fmt.Errorf("JetStream not ready after %s (%d attempts; --startup-timeout): %w", cfg.StartupTimeout, attempt, fleetops.Diagnose(ctx, js, wire.StreamJobs, err))
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

// pendingJobs counts the jobs of the given stores not answered yet: queued, running, or
// waiting for a retry's delay (each store's consumer says it of its own).
func pendingJobs(ctx context.Context, cons map[string]jetstream.Consumer, stores []Store) (uint64, error) {
	var n uint64
	for _, st := range stores {
		ci, err := cons[st.Name].Info(ctx)
		if err != nil {
			return 0, fmt.Errorf("consumer %s: %w", fleetops.ConsumerName(st.Name), err)
		}
		n += ci.NumPending + uint64(ci.NumAckPending)
	}
	return n, nil
}
