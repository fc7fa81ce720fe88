package fleetops

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// The streams and buckets setup sets up, and the limits that bound each of them.

// EventsPerJob bounds a job's events (its retries and its final event).
const EventsPerJob = 16

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

// The consumers of the sweep records' bucket are the sweeps' watches, the only consumers a
// store's role creates: each process that sweeps (a worker, a `compactor sweep`) watches
// each of its stores' records with a consumer of its own, whose filter is that store's keys
// (what a worker's permissions allow: docs/security.md). A process of n stores holds n.
const (
	// minSweepWatches is the least room for them in an account, whatever its stores: 64
	// processes of one store at once.
	minSweepWatches = 64
	// sweepWatchesPerStore is the room per store of the account: that many processes
	// serving every store at once (a worker, a sweep, a worker restarting while the
	// server has not yet removed its predecessor's watches, other hosts of a shared store).
	sweepWatchesPerStore = 8
)

// SweepWatches bounds the consumers of the sweep records' bucket of an account of stores
// stores: 8 per store, at least 64. The bucket is the account's own (an account per host),
// so this is the room of the account's processes, which no other account's can take.
func SweepWatches(stores int) int { return max(minSweepWatches, sweepWatchesPerStore*stores) }

// settingsMaxBytes bounds the settings' bucket: one record.
const settingsMaxBytes = 1 << 20

// streamDuplicates is the duplicate window of the events stream: long enough for a
// publish retried after a lost acknowledgement (publishRetry, publishRetryFor).
const streamDuplicates = 2 * time.Minute

// kvDuplicates is the buckets' duplicate window: no record is written with a message id,
// so it is the smallest the server takes (a window is kept in the server's memory).
const KVDuplicates = 100 * time.Millisecond

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
			MaxMsgsPerSubject: EventsPerJob,
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
// workers' first, with room for sweepWatches watches of the sweep records. They are KV buckets as the client libraries read them (subjects
// $KV.<bucket>.>, one message per key, direct gets), made here rather than by the client
// library, whose buckets allow rollups: a value published with Nats-Rollup: all wiped
// every key of the bucket. A full bucket refuses a write (a new key, or a larger value)
// and keeps what it holds.
func bucketConfigs(cfg SetupConfig, sweepWatches int) []jetstream.StreamConfig {
	kv := func(bucket, desc string, ttl time.Duration, maxBytes int64) jetstream.StreamConfig {
		return jetstream.StreamConfig{Name: "KV_" + bucket, Description: desc, Subjects: []string{wire.KVSubjectRoot + bucket + ".>"},
			Retention: jetstream.LimitsPolicy, MaxMsgsPerSubject: 1, MaxAge: ttl, MaxBytes: maxBytes, MaxMsgs: maxBytes / minRecordBytes,
			Discard: jetstream.DiscardNew, Duplicates: KVDuplicates, AllowDirect: true, DenyDelete: true,
			Storage: jetstream.FileStorage, Replicas: cfg.Replicas}
	}
	rb := cfg.RecordsMaxBytes
	sweep := kv(wire.BucketSweep, "what the last sweep saw of each session file", 0, rb)
	sweep.AllowMsgTTL, sweep.MaxConsumers = true, sweepWatches // markers that expire (prune in pipeline/sweeper.go); the stores' watches
	settings := kv(wire.BucketSettings, "the fleet's settings, written by compactor setup", 0, settingsMaxBytes)
	settings.DenyPurge = true
	return []jetstream.StreamConfig{
		settings,
		kv(wire.BucketWorkers, "the workers serving each store: a key per store and worker, renewed while it works, and the store's owner", WorkerBeatTTL, rb),
		kv(wire.BucketLeases, "per-session leases of running compactor jobs", cfg.LeaseTTL, rb),
		sweep,
		kv(wire.BucketAttempts, "handler attempts per job message (crashes included)", AttemptsTTL, rb),
		kv(wire.BucketPrepared, "compaction summaries prepared ahead of time for live agents (one per session)", cfg.PreparedTTL, rb),
		kv(wire.BucketSpend, "LLM input tokens per spend-limit window (scope.window keys)", SpendTTL, rb),
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
	for _, c := range append(bucketConfigs(sc, 0), streamConfigs(sc)...) {
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

// accountSweepWatches is the room setup gives the watches of the sweep records:
// SweepWatches of the account's stores (those set up before, which the fleet's settings
// keep, and this setup's), within the account's max_consumers. The server applies that
// limit to each stream of the account, not to their sum (nats-server 2.15: a stream may
// hold as many consumers as the lower of its own limit and the account's, and a stream
// whose own limit is higher than the account's is refused), so the bucket gets at most the
// account's limit. An account whose limit is lower than its stores need (a lower
// --max-consumers) keeps that, with a warning: a worker of more stores than it allows
// watches is refused the rest until the limit is raised and setup runs again.
func accountSweepWatches(ctx context.Context, js jetstream.JetStream, sc SetupConfig, log *slog.Logger) int {
	stores := slices.Clone(sc.Stores)
	if f, err := ReadFleetAnyLayout(ctx, js.Conn()); err == nil {
		for _, st := range f.Stores {
			if !slices.Contains(stores, st) {
				stores = append(stores, st)
			}
		}
	}
	want := SweepWatches(len(stores))
	info, err := js.AccountInfo(ctx)
	if err != nil || info.Limits.MaxConsumers <= 0 || info.Limits.MaxConsumers >= want {
		return want // no limit, enough, or not known here: the server checks
	}
	limit := info.Limits.MaxConsumers
	log.Warn("the account's max_consumers is lower than the watches of the sweep records its stores need: a worker of more stores than that is refused the rest (maximum consumers limit reached) and does not sweep them; raise the account's limit (compactor auth of this version, or --max-consumers) and run compactor setup again",
		"stores", len(stores), "account_max_consumers", limit, "sweep_watches_needed", want, "needed_account_max_consumers", AccountConsumers(len(stores)))
	return limit
}
