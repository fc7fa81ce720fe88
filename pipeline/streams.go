package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Names of the JetStream resources. They are shared by every worker and client on a NATS
// deployment, and set up only by the services (`compactor run`), at start: clients open
// them and say what is missing.
const (
	BucketLeases = "COMPACTOR_LEASES"
	BucketSweep  = "COMPACTOR_SWEEP"
	// BucketAttempts counts handler attempts per job message, so a job that crashes its
	// worker is bounded by MaxDeliver like one that fails (see attempts.go).
	BucketAttempts = "COMPACTOR_ATTEMPTS"
	consumerPfx    = "compactor-"

	// maxFreeDeliveries is how many deliveries a job may spend without a handler attempt
	// (a busy session lease, or a give-back at shutdown): a delivery beyond MaxDeliver plus
	// this is dead-lettered at admission. Handler attempts, crashes included, are counted
	// in COMPACTOR_ATTEMPTS and bounded by MaxDeliver; this is only the backstop for
	// endless contention.
	maxFreeDeliveries = 50
)

// ConsumerName is the durable pull consumer of a store.
func ConsumerName(store string) string { return consumerPfx + store }

// errCodeDiscardNewPerSubject is the err_code of a publish refused because the subject
// already holds its one message (MaxMsgsPerSubject 1 + DiscardNewPerSubject).
const errCodeDiscardNewPerSubject jetstream.ErrorCode = 10077

// IsAlreadyQueued reports whether a publish error means the session already has a pending
// job of that kind. The server answers a stream full (its byte limit) with the same code:
// the description tells them apart.
func IsAlreadyQueued(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeDiscardNewPerSubject && !isStreamFull(err)
}

// isStreamFull reports whether a publish was refused because the stream holds its limit of
// bytes or messages (a stream that discards new messages).
func isStreamFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeDiscardNewPerSubject &&
		(strings.Contains(apiErr.Description, "maximum bytes") || strings.Contains(apiErr.Description, "maximum messages exceeded"))
}

type resources struct {
	js       jetstream.JetStream
	leases   *kvBucket
	sweep    *kvBucket
	attempts *kvBucket
	prepared *kvBucket
	workers  *kvBucket
	spend    *kvBucket
	cons     map[string]jetstream.Consumer // by store: compactor-<store> on COMPACTOR_JOBS
	dlqCons  map[string]jetstream.Consumer // by store: compactor-dlq-<store> on COMPACTOR_DLQ (its count)
	fleet    FleetSettings
}

// dlqConsumerPfx names a store's consumer of COMPACTOR_DLQ. Nothing fetches from it: its
// pending count is the store's dead letters, which a worker may read (the stream's
// information, which would count them too, may not be read by a store's roles).
const dlqConsumerPfx = "compactor-dlq-"

// DLQConsumerName is the consumer of COMPACTOR_DLQ that counts a store's dead letters.
func DLQConsumerName(store string) string { return dlqConsumerPfx + store }

// SetupConfig is what `compactor setup` sets up: the streams and buckets of a fleet's NATS
// account, and the consumers of each store.
type SetupConfig struct {
	Stores          []string
	Replicas        int
	AckWait         time.Duration
	MaxDeliver      int
	LeaseTTL        time.Duration
	DuplicateWindow time.Duration
	PreparedTTL     time.Duration
	JobsMaxAge      time.Duration
	JobsMaxBytes    int64
	EventsMaxAge    time.Duration
	EventsMaxBytes  int64
	DLQMaxBytes     int64
	RecordsMaxBytes int64
}

// Validate checks what setup would set up (a zero setting: its default), naming the field
// of the first that is wrong.
func (sc SetupConfig) Validate() error {
	return Config{DuplicateWindow: sc.DuplicateWindow, JobsMaxAge: sc.JobsMaxAge, JobsMaxBytes: sc.JobsMaxBytes,
		EventsMaxAge: sc.EventsMaxAge, EventsMaxBytes: sc.EventsMaxBytes, DLQMaxBytes: sc.DLQMaxBytes,
		RecordsMaxBytes: sc.RecordsMaxBytes}.withDefaults().setupConfig().validLimits()
}

// validLimits checks the streams' limits (zero: the default). A stream's age limit may not
// be shorter than its duplicate window (the server refuses it).
func (sc SetupConfig) validLimits() error {
	switch {
	case sc.JobsMaxAge < 0 || sc.JobsMaxAge > 0 && sc.JobsMaxAge < max(sc.DuplicateWindow, time.Second):
		return configError("JobsMaxAge", "%s: want at least the duplicate window (%s)", sc.JobsMaxAge, sc.DuplicateWindow)
	case sc.EventsMaxAge < 0 || sc.EventsMaxAge > 0 && sc.EventsMaxAge < time.Second:
		return configError("EventsMaxAge", "%s: want at least 1s", sc.EventsMaxAge)
	case sc.JobsMaxBytes < 0 || sc.JobsMaxBytes > 0 && sc.JobsMaxBytes < 1<<10:
		return configError("JobsMaxBytes", "%d: want at least 1 KiB", sc.JobsMaxBytes)
	case sc.EventsMaxBytes < 0 || sc.EventsMaxBytes > 0 && sc.EventsMaxBytes < 1<<10:
		return configError("EventsMaxBytes", "%d: want at least 1 KiB", sc.EventsMaxBytes)
	case sc.DLQMaxBytes < 0 || sc.DLQMaxBytes > 0 && sc.DLQMaxBytes < 64<<10:
		return configError("DLQMaxBytes", "%d: want at least 64 KiB", sc.DLQMaxBytes)
	case sc.RecordsMaxBytes < 0 || sc.RecordsMaxBytes > 0 && sc.RecordsMaxBytes < 64<<10:
		return configError("RecordsMaxBytes", "%d: want at least 64 KiB", sc.RecordsMaxBytes)
	}
	return nil
}

// setupConfig is the part of a service's configuration that setup applies.
func (c Config) setupConfig() SetupConfig {
	sc := SetupConfig{Replicas: c.Replicas, AckWait: c.AckWait, MaxDeliver: c.MaxDeliver, LeaseTTL: c.LeaseTTL,
		DuplicateWindow: c.DuplicateWindow, PreparedTTL: c.PreparedTTL, JobsMaxAge: c.JobsMaxAge, JobsMaxBytes: c.JobsMaxBytes,
		EventsMaxAge: c.EventsMaxAge, EventsMaxBytes: c.EventsMaxBytes, DLQMaxBytes: c.DLQMaxBytes, RecordsMaxBytes: c.RecordsMaxBytes}
	for _, st := range c.Stores {
		sc.Stores = append(sc.Stores, st.Name)
	}
	return sc
}

// withDefaults fills sc's zero settings with the defaults.
func (sc SetupConfig) withDefaults() SetupConfig {
	stores := sc.Stores
	sc = Config{Replicas: sc.Replicas, AckWait: sc.AckWait, MaxDeliver: sc.MaxDeliver, LeaseTTL: sc.LeaseTTL, DuplicateWindow: sc.DuplicateWindow,
		PreparedTTL: sc.PreparedTTL, JobsMaxAge: sc.JobsMaxAge, JobsMaxBytes: sc.JobsMaxBytes, EventsMaxAge: sc.EventsMaxAge,
		EventsMaxBytes: sc.EventsMaxBytes, DLQMaxBytes: sc.DLQMaxBytes, RecordsMaxBytes: sc.RecordsMaxBytes}.withDefaults().setupConfig()
	sc.Stores = stores
	return sc
}

// ensure sets up every stream, bucket and the stores' consumers and writes the fleet's
// settings, as only the admin does (`compactor setup`, `run --setup`, the embedded
// server's service; the others bind them: see bind). Each is created with a create-only
// request; when that fails because it exists, it is read again and updated from what the
// server holds, and only where this process's configuration differs (one log line per
// setting changed). Replicas are never lowered: a stream or bucket with more replicas than
// sc.Replicas (an operator raised it, or another setup asked for more) keeps them. So two
// processes starting together cannot undo each other's replicas: neither writes a
// configuration it did not read first, and the loser of a create race only raises. What
// is left is two setups whose other settings differ updating the same stream within the
// same few milliseconds: the later update wins for those settings.
//
// Before it creates anything it checks that the limits fit the account's JetStream
// storage (fitsAccount). The fleet's settings record keeps every store set up so far in
// this account, with this setup's values.
func ensure(ctx context.Context, js jetstream.JetStream, sc SetupConfig, log *slog.Logger) error {
	if err := fitsAccount(ctx, js, sc, log); err != nil {
		return err
	}
	for _, cfg := range append(bucketConfigs(sc), streamConfigs(sc)...) {
		if _, err := ensureStream(ctx, js, cfg, log); err != nil {
			return err
		}
	}
	for _, st := range sc.Stores {
		if _, err := ensureConsumer(ctx, js, wire.StreamJobs, consumerConfig(sc, st), log); err != nil {
			return err
		}
		if _, err := ensureConsumer(ctx, js, wire.StreamDLQ, dlqConsumerConfig(st), log); err != nil {
			return err
		}
	}
	stores, err := writeFleetAdding(ctx, js, FleetSettings{LeaseTTL: Duration(sc.LeaseTTL), AckWait: Duration(sc.AckWait), MaxDeliver: sc.MaxDeliver,
		DuplicateWindow: Duration(sc.DuplicateWindow), PreparedTTL: Duration(sc.PreparedTTL), Replicas: sc.Replicas, Stores: slices.Clone(sc.Stores),
		JobsMaxAge: Duration(sc.JobsMaxAge), JobsMaxBytes: sc.JobsMaxBytes, EventsMaxAge: Duration(sc.EventsMaxAge), EventsMaxBytes: sc.EventsMaxBytes,
		DLQMaxBytes: sc.DLQMaxBytes, RecordsMaxBytes: sc.RecordsMaxBytes})
	if err != nil {
		return err
	}
	if len(stores) > 1 {
		log.Info("stores that share this NATS account trust each other: each store's keys can reach what the others hold through JetStream's replies; give each host its own account (compactor auth, docs/security.md)",
			"stores", strings.Join(stores, ","))
	}
	return nil
}

// writeFleetAdding writes the settings record f with the stores it already lists added to
// f's, and returns them. The record is read and written as one step (written only if no
// other setup wrote it in between, else read again): two setups of different stores at
// once both keep theirs (a store missing from the record is one the operator's view does
// not show).
func writeFleetAdding(ctx context.Context, js jetstream.JetStream, f FleetSettings) ([]string, error) {
	kv := openBucket(js, BucketSettings)
	mine := slices.Clone(f.Stores)
	for attempt := 0; ; attempt++ {
		var rev uint64
		stores := slices.Clone(mine)
		e, err := kv.last(ctx, settingsKey)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return nil, fmt.Errorf("write fleet settings: %w", err)
		default:
			rev = e.rev
			var old FleetSettings
			if e.op == jetstream.KeyValuePut && json.Unmarshal(e.value, &old) == nil {
				for _, st := range old.Stores {
					if !slices.Contains(stores, st) {
						stores = append(stores, st)
					}
				}
			}
		}
		slices.Sort(stores)
		f.Stores = stores
		b, err := settingsRecord(f)
		if err != nil {
			return nil, err
		}
		_, err = kv.Update(ctx, settingsKey, b, rev)
		if err == nil {
			return stores, nil
		}
		if !isWrongLastSeq(err) || attempt == 20 {
			return nil, fmt.Errorf("write fleet settings: %w", err)
		}
	}
}

// bind opens what a worker (or a client, cfg.Client) uses, as it was set up, and checks
// that it is there: the fleet's settings, each bucket and the jobs stream (a direct get in
// the first store's part of each: the requests a store's roles may make), and each
// store's consumers. It creates and changes nothing. What is missing or different is a
// *NotSetUpError that names it and the command that sets it up.
func bind(ctx context.Context, js jetstream.JetStream, cfg Config, log *slog.Logger) (*resources, error) {
	fleet, err := readFleet(ctx, js.Conn())
	if err != nil {
		return nil, err
	}
	r := &resources{js: js, cons: map[string]jetstream.Consumer{}, dlqCons: map[string]jetstream.Consumer{}, fleet: *fleet}
	r.leases, r.sweep, r.attempts = openBucket(js, BucketLeases), openBucket(js, BucketSweep), openBucket(js, BucketAttempts)
	r.prepared, r.workers, r.spend = openBucket(js, wire.BucketPrepared), openBucket(js, BucketWorkers), openBucket(js, BucketSpend)
	probe := cfg.Stores[0].Name
	buckets := []*kvBucket{r.sweep, r.workers}
	if !cfg.Client {
		buckets = []*kvBucket{r.leases, r.attempts, r.sweep, r.prepared, r.workers, r.spend}
	}
	for _, b := range buckets {
		if _, err := b.last(ctx, probe+"._probe"); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, probeError("bucket "+b.name, err)
		}
	}
	if _, err := directLast(ctx, js.Conn(), wire.StreamJobs, wire.JobsPrefix+probe+"._probe"); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, probeError("stream "+wire.StreamJobs, err)
	}
	if cfg.Client {
		return r, nil
	}
	for _, st := range cfg.Stores {
		c, err := bindConsumer(ctx, js, wire.StreamJobs, consumerConfig(SetupConfig{}, st.Name))
		if err != nil {
			return nil, err
		}
		r.cons[st.Name] = c
		if c, err = bindConsumer(ctx, js, wire.StreamDLQ, dlqConsumerConfig(st.Name)); err != nil {
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
	store := strings.TrimPrefix(strings.TrimPrefix(want.Durable, dlqConsumerPfx), consumerPfx)
	remedy := fmt.Sprintf("run `compactor setup --store %s` with the admin's credentials, or `compactor run --setup`", store)
	c, err := js.Consumer(ctx, stream, want.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, &NotSetUpError{What: fmt.Sprintf("consumer %s of %s does not exist", want.Durable, stream), Remedy: remedy}
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, &NotSetUpError{What: fmt.Sprintf("stream %s does not exist", stream), Remedy: remedy}
	}
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", want.Durable, err)
	}
	have := c.CachedInfo().Config
	switch {
	case have.FilterSubject != want.FilterSubject:
		return nil, &NotSetUpError{What: fmt.Sprintf("consumer %s of %s takes %q, not the store's %q", want.Durable, stream, have.FilterSubject, want.FilterSubject), Remedy: remedy}
	case want.MaxDeliver != 0 && have.MaxDeliver != want.MaxDeliver:
		return nil, &NotSetUpError{What: fmt.Sprintf("consumer %s of %s was set up by an older compactor (max_deliver %d)", want.Durable, stream, have.MaxDeliver),
			Remedy: "run `compactor setup --migrate` (docs/security.md, \"Upgrading\")"}
	}
	return c, nil
}

// eventsPerJob bounds a job's events (its retries and its final event).
const eventsPerJob = 16

// deadLettersPerSession bounds the dead letters kept of one session: beyond it the oldest go.
const deadLettersPerSession = 64

// The smallest message each stream is sized for: a stream's message limit is its byte limit
// over it, so that a flood of tiny messages (whose count, not their bytes, costs the server
// its memory: an index entry each) is bounded as its bytes are. A job, an event or a
// record of compactor's is larger than these.
const (
	minJobBytes        = 512
	minEventBytes      = 512
	minDeadLetterBytes = 1024
	minRecordBytes     = 512
)

// sweepWatches bounds the consumers of the sweep records' bucket: one watch per worker
// process and per running sweep of each store (the only consumers a store's role creates).
const sweepWatches = 64

// settingsMaxBytes bounds the settings' bucket: one record.
const settingsMaxBytes = 1 << 20

// streamDuplicates is the duplicate window of the events stream: long enough for a
// publish retried after a lost acknowledgement (publishRetry, publishRetryFor).
const streamDuplicates = 2 * time.Minute

// kvDuplicates is the buckets' duplicate window: no record is written with a message id,
// so it is the smallest the server takes (a window is kept in the server's memory).
const kvDuplicates = 100 * time.Millisecond

// streamConfigs are the streams setup sets up, each with the settings it needs and no
// other (docs/security.md, "Streams and buckets"): no rollups anywhere (a message with
// Nats-Rollup would purge the subject or the stream), deletes through the API only where
// an operator deletes (dead letters), purges only where `setup --prune` purges (a retired
// store's queued jobs), direct gets where a role reads that way, and byte and message
// limits on every one.
func streamConfigs(cfg SetupConfig) []jetstream.StreamConfig {
	out := []jetstream.StreamConfig{
		{
			Name:                 wire.StreamJobs,
			Description:          "compactor jobs: one pending job per session and kind",
			Subjects:             []string{wire.JobsPrefix + ">"},
			Retention:            jetstream.WorkQueuePolicy,
			MaxAge:               cfg.JobsMaxAge,
			MaxBytes:             cfg.JobsMaxBytes,
			MaxMsgs:              cfg.JobsMaxBytes / minJobBytes,
			MaxMsgsPerSubject:    1,
			Discard:              jetstream.DiscardNew,
			DiscardNewPerSubject: true,
			Duplicates:           cfg.DuplicateWindow,
			AllowDirect:          true,
			DenyDelete:           true,
		},
		{
			Name:              wire.StreamEvents,
			Description:       "compactor job results (metadata only)",
			Subjects:          []string{wire.EventsPrefix + ">"},
			Retention:         jetstream.LimitsPolicy,
			MaxAge:            cfg.EventsMaxAge,
			MaxBytes:          cfg.EventsMaxBytes,
			MaxMsgs:           cfg.EventsMaxBytes / minEventBytes,
			MaxMsgsPerSubject: eventsPerJob,
			Discard:           jetstream.DiscardOld,
			Duplicates:        streamDuplicates,
			AllowDirect:       true,
			DenyDelete:        true,
			DenyPurge:         true,
		},
		{
			Name:              wire.StreamDLQ,
			Description:       "compactor dead letters: refused, failed or exhausted jobs",
			Subjects:          []string{wire.DLQPrefix + ">"},
			Retention:         jetstream.LimitsPolicy,
			MaxAge:            DefaultDLQMaxAge,
			MaxBytes:          cfg.DLQMaxBytes,
			MaxMsgs:           cfg.DLQMaxBytes / minDeadLetterBytes,
			MaxMsgsPerSubject: deadLettersPerSession,
			Discard:           jetstream.DiscardOld,
			Duplicates:        cfg.DuplicateWindow,
			DenyPurge:         true,
		},
	}
	for i := range out {
		out[i].Storage, out[i].Replicas = jetstream.FileStorage, cfg.Replicas
	}
	return out
}

// bucketConfigs are the streams of the buckets setup sets up, the settings' and the
// workers' first. They are KV buckets as the client libraries read them (subjects
// $KV.<bucket>.>, one message per key, direct gets), made here rather than by the client
// library, whose buckets allow rollups: a value published with Nats-Rollup: all wiped
// every key of the bucket. A full bucket refuses a write (a new key, or a larger value)
// and keeps what it holds.
func bucketConfigs(cfg SetupConfig) []jetstream.StreamConfig {
	kv := func(bucket, desc string, ttl time.Duration, maxBytes int64) jetstream.StreamConfig {
		return jetstream.StreamConfig{Name: "KV_" + bucket, Description: desc, Subjects: []string{wire.KVSubjectRoot + bucket + ".>"},
			Retention: jetstream.LimitsPolicy, MaxMsgsPerSubject: 1, MaxAge: ttl, MaxBytes: maxBytes, MaxMsgs: maxBytes / minRecordBytes,
			Discard: jetstream.DiscardNew, Duplicates: kvDuplicates, AllowDirect: true, DenyDelete: true,
			Storage: jetstream.FileStorage, Replicas: cfg.Replicas}
	}
	rb := cfg.RecordsMaxBytes
	sweep := kv(BucketSweep, "what the last sweep saw of each session file", 0, rb)
	sweep.AllowMsgTTL, sweep.MaxConsumers = true, sweepWatches // markers that expire (prune in sweep.go); the stores' watches
	settings := kv(BucketSettings, "the fleet's settings, written by compactor setup", 0, settingsMaxBytes)
	settings.DenyPurge = true
	return []jetstream.StreamConfig{
		settings,
		kv(BucketWorkers, "the workers serving each store: a key per store and worker, renewed while it works, and the store's owner", workerBeatTTL, rb),
		kv(BucketLeases, "per-session leases of running compactor jobs", cfg.LeaseTTL, rb),
		sweep,
		kv(BucketAttempts, "handler attempts per job message (crashes included)", attemptsTTL, rb),
		kv(wire.BucketPrepared, "compaction summaries prepared ahead of time for live agents (one per session)", cfg.PreparedTTL, rb),
		kv(BucketSpend, "LLM input tokens per spend-limit window (scope.window keys)", spendTTL, rb),
	}
}

// fitsAccount checks, before anything is created, that the limits of every stream and
// bucket fit the account's JetStream storage: the server reserves each stream's byte
// limit, and refuses a stream that does not fit with words that do not say which limit to
// lower. Streams of this account that are not compactor's count with their own limits.
// An account without a storage limit is bounded by the server's (max_file_store), which
// an account cannot read: the server's refusal is explained then (explainStorage).
func fitsAccount(ctx context.Context, js jetstream.JetStream, sc SetupConfig, log *slog.Logger) error {
	info, err := js.AccountInfo(ctx)
	if err != nil || info.Limits.MaxStore <= 0 {
		return nil // not known here: the server checks
	}
	mine := map[string]int64{}
	for _, c := range append(bucketConfigs(sc), streamConfigs(sc)...) {
		mine[c.Name] = c.MaxBytes * int64(max(c.Replicas, 1))
	}
	var want, others int64
	for _, v := range mine {
		want += v
	}
	var unbounded []string
	names := js.ListStreams(ctx)
	for si := range names.Info() {
		if _, ok := mine[si.Config.Name]; ok {
			continue
		}
		if si.Config.MaxBytes <= 0 {
			unbounded = append(unbounded, si.Config.Name)
			continue
		}
		others += si.Config.MaxBytes * int64(max(si.Config.Replicas, 1))
	}
	if len(unbounded) > 0 {
		log.Warn("streams of this account have no byte limit: their growth is not reserved and can take the storage the limits of compactor's streams reserve", "streams", strings.Join(unbounded, ","))
	}
	if want+others > info.Limits.MaxStore {
		return &LimitsError{Need: want, Others: others, Account: info.Limits.MaxStore}
	}
	log.Info("the streams' and buckets' limits fit the account's storage", "reserved_bytes", want, "others_bytes", others, "account_bytes", info.Limits.MaxStore)
	return nil
}

// LimitsError says that the streams' and buckets' limits do not fit the account's storage.
type LimitsError struct {
	Need, Others, Account int64
}

func (e *LimitsError) Error() string {
	return fmt.Sprintf("the limits of compactor's streams and buckets reserve %d bytes (replicas included) and the account's other streams %d, more than the account's JetStream storage (%d): lower --jobs-max-bytes, --events-max-bytes, --dlq-max-bytes or --records-max-bytes, or raise the account's storage (compactor auth --max-storage); nothing was set up",
		e.Need, e.Others, e.Account)
}

// consumerConfig is the durable pull consumer of a store. Its deliveries are not bounded
// here (MaxDeliver -1): a worker bounds them with the message in hand (admit), so that no
// worker needs the right to read or delete a message of the stream by its sequence.
func consumerConfig(cfg SetupConfig, store string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       ConsumerName(store),
		Description:   "compactor workers of store " + store,
		FilterSubject: wire.JobsPrefix + store + ".>",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: 10000,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// dlqConsumerConfig is the consumer that counts a store's dead letters.
func dlqConsumerConfig(store string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       DLQConsumerName(store),
		Description:   "counts the dead letters of store " + store + " (nothing fetches from it)",
		FilterSubject: wire.DLQPrefix + store + ".>",
		AckPolicy:     jetstream.AckNonePolicy,
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
	differ(&changes, "max_bytes", &next.MaxBytes, want.MaxBytes)
	differ(&changes, "duplicate_window", &next.Duplicates, want.Duplicates)
	differ(&changes, "max_msgs", &next.MaxMsgs, want.MaxMsgs)
	differ(&changes, "max_consumers", &next.MaxConsumers, want.MaxConsumers)
	differ(&changes, "allow_direct", &next.AllowDirect, want.AllowDirect)
	differ(&changes, "allow_msg_ttl", &next.AllowMsgTTL, want.AllowMsgTTL) // never turned off: the server refuses it
	// What a message's headers may do, set as this version wants it whatever the server
	// holds (a bucket made by the client library allows rollups); a deny once set stays
	// (the server refuses to lift it).
	if have.AllowRollup != want.AllowRollup {
		changes = append(changes, change{"allow_rollup_hdrs", have.AllowRollup, want.AllowRollup})
		next.AllowRollup = want.AllowRollup
	}
	differ(&changes, "deny_delete", &next.DenyDelete, want.DenyDelete)
	differ(&changes, "deny_purge", &next.DenyPurge, want.DenyPurge)
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
	case errCodeStorageExceeded:
		return fmt.Errorf("%w (the server reserves every stream's byte limit: the limits of compactor's streams and buckets do not fit the JetStream storage left to this account or server; lower --jobs-max-bytes, --events-max-bytes, --dlq-max-bytes or --records-max-bytes, or raise the account's storage (compactor auth --max-storage) or the server's max_file_store)", err)
	}
	return err
}

// JetStream API error codes the pipeline tells apart (nats-server's errors.json).
const (
	errCodeClusterNoPeers        jetstream.ErrorCode = 10005 // "no suitable peers for placement": too few servers up (yet)
	errCodeClusterNotAvail       jetstream.ErrorCode = 10008 // "JetStream system temporarily unavailable"
	errCodeClusterNotLeader      jetstream.ErrorCode = 10009
	errCodeInsufficientResources jetstream.ErrorCode = 10023
	errCodeStorageExceeded       jetstream.ErrorCode = 10047 // "insufficient storage resources available"
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
		res, err := guard(ctx, js.Conn(), func(ctx context.Context) (*resources, error) {
			if cfg.Setup && !cfg.Client {
				// The embedded server is this service's own: an older layout on it is
				// migrated at once (a migration refuses while other workers serve).
				if _, err := setup(ctx, js, cfg.setupConfig(), cfg.NATS.URL == "", false, log); err != nil {
					return nil, err
				}
			}
			res, err := bind(ctx, js, cfg, log)
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
			se *StreamError
			ns *NotSetUpError
			pe *PermissionError
			oe *OldLayoutError
			le *LiveWorkersError
			we *OwnerError
		)
		if errors.As(err, &se) || errors.As(err, &ns) || errors.As(err, &pe) || errors.As(err, &oe) || errors.As(err, &le) || errors.As(err, &we) {
			return nil, err
		}
		if !transient(err) {
			if unavailable(err) {
				return nil, diagnose(ctx, js, wire.StreamJobs, err)
			}
			return nil, err
		}
		if time.Now().Add(wait).After(deadline) {
			return nil, fmt.Errorf("JetStream not ready after %s (%d attempts; --startup-timeout): %w", cfg.StartupTimeout, attempt, diagnose(ctx, js, wire.StreamJobs, err))
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
			return 0, fmt.Errorf("consumer %s: %w", ConsumerName(st.Name), err)
		}
		n += ci.NumPending + uint64(ci.NumAckPending)
	}
	return n, nil
}

// Transient reports whether a JetStream error may go away by itself (a timeout, a cluster
// electing a leader): worth trying again within a startup timeout.
func Transient(err error) bool { return transient(err) }

// What setup makes in a NATS account, for the account's limits (compactor auth).
// operatorConsumers is the room an account keeps for the operator's and the admin's reads
// at once: a console's four (its watches of the workers, the leases and the pause records,
// and the events), status's three, dlq's, and the admin's tools. A store's worker cannot
// take it: the only consumers it may create are its sweep watches, which their bucket
// bounds (sweepWatches).
const operatorConsumers = 24

// AccountStreams is how many streams setup makes in an account: the streams and the
// buckets (each bucket is a stream).
func AccountStreams() int {
	sc := SetupConfig{}.withDefaults()
	return len(streamConfigs(sc)) + len(bucketConfigs(sc))
}

// AccountStorage is the file storage setup's default limits reserve in an account, with
// replicas replicas of each stream.
func AccountStorage(replicas int) int64 {
	sc := SetupConfig{Replicas: max(replicas, 1)}.withDefaults()
	var n int64
	for _, c := range append(bucketConfigs(sc), streamConfigs(sc)...) {
		n += c.MaxBytes * int64(c.Replicas)
	}
	return n
}

// AccountConsumers is the most consumers an account of n stores uses: two per store (its
// jobs' and its dead letters' count), the watches of its sweep records, and the
// operator's and the admin's reads.
func AccountConsumers(stores int) int { return 2*stores + sweepWatches + operatorConsumers }
