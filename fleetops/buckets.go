package fleetops

import "time"

// The buckets' names and lifetimes that are not setup's settings.

// SpendTTL keeps a day's count a day after its last change.
const SpendTTL = 49 * time.Hour

// AttemptsTTL is how long the count of a job message is kept after its last change:
// far longer than any wait between two deliveries (BackoffMax is minutes). The key is
// deleted when the job gets its final answer.
const AttemptsTTL = 7 * 24 * time.Hour
