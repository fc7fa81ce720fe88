package wire

// The KV buckets and consumers of a fleet: their names, and the layout of their keys, which
// start with the store's name so that one NATS permission says "this store's keys only"
// ($KV.<bucket>.<store>.>, docs/security.md).
const (
	BucketLeases = "COMPACTOR_LEASES"
	BucketSweep  = "COMPACTOR_SWEEP"
	// BucketAttempts counts handler attempts per job message, so that a job that crashes its
	// worker is bounded by its deliveries like one that fails.
	BucketAttempts = "COMPACTOR_ATTEMPTS"
	// BucketWorkers holds the workers' keys, <store>.<worker>, whose values are their beats,
	// and each store's owner, <store>._owner, whose value is the owner's identity.
	BucketWorkers = "COMPACTOR_WORKERS"
	// BucketSpend holds the spend counts, one key per limit's scope and window.
	BucketSpend = "COMPACTOR_SPEND"
	// BucketSettings holds the fleet's settings (key SettingsKey) and the stores' pause
	// records (PauseKeyPrefix<store>).
	BucketSettings = "COMPACTOR_SETTINGS"
)

// SettingsKey is the fleet's settings record in BucketSettings.
const SettingsKey = "fleet"

// PauseKeyPrefix starts a store's pause key in COMPACTOR_SETTINGS: paused.<store>.
const PauseKeyPrefix = "paused."

// SpendFleetScope is the first token of the fleet-wide counts' keys: '=' may be in a key but
// not in a store's name, so no store's keys (<store>.spend.<window>) can be confused with it.
const SpendFleetScope = "=fleet"

// ConsumerPrefix starts the name of a store's durable consumer of COMPACTOR_JOBS.
const ConsumerPrefix = "compactor-"

// DLQConsumerPrefix names a store's consumer of COMPACTOR_DLQ. Nothing fetches from it: its
// pending count is the store's dead letters, which a worker may read (the stream's
// information, which would count them too, may not be read by a store's roles).
const DLQConsumerPrefix = "compactor-dlq-"
