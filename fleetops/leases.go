package fleetops

import "time"

// LeaseRecord is the value of a session's lease in COMPACTOR_LEASES: which worker holds
// the session for which job, since when.
type LeaseRecord struct {
	V      int       `json:"v"` // leaseV
	Worker string    `json:"worker"`
	JobID  string    `json:"jobId"`
	Since  time.Time `json:"since"`
	// What the job is, for an operator's view of running jobs (status, the console):
	// absent in a lease of an older compactor. Attempt is written from the first renewal
	// after the attempt was counted; Delivery is JetStream's count of the job's deliveries.
	SessionID string `json:"sessionId,omitempty"`
	Path      string `json:"path,omitempty"`
	Kind      string `json:"kind,omitempty"`
	Delivery  uint64 `json:"delivery,omitempty"`
	Attempt   int    `json:"attempt,omitempty"`
}

// BaseLeaseSuffix ends a base job's lease key (leaseKeyOf).
const BaseLeaseSuffix = ".base"
