package fleetops

import "time"

// The buckets' names and lifetimes that are not setup's settings.

// BucketSpend holds the spend counts, one key per limit's scope and window.
const BucketSpend = "COMPACTOR_SPEND"

// SpendTTL keeps a day's count a day after its last change.
const SpendTTL = 49 * time.Hour

// SpendFleetScope is the first token of the fleet-wide counts' keys: '=' may be in a key but
// not in a store's name, so no store's keys (<store>.spend.<window>) can be confused with it.
const SpendFleetScope = "=fleet"

// AttemptsTTL is how long the count of a job message is kept after its last change:
// far longer than any wait between two deliveries (BackoffMax is minutes). The key is
// deleted when the job gets its final answer.
const AttemptsTTL = 7 * 24 * time.Hour
