package fleetops

import (
	"time"

	"github.com/compactor-dev/compactor/access"
)

// Defaults of what setup sets up: every zero field of SetupConfig takes the value here
// (SetupConfig.WithDefaults), and so does a worker's configuration of the same settings.
const (
	DefaultAckWait         = 60 * time.Second
	DefaultMaxDeliver      = 5
	DefaultLeaseTTL        = 90 * time.Second
	DefaultDuplicateWindow = 2 * time.Minute
	DefaultEventsMaxAge    = 24 * time.Hour
	DefaultEventsMaxBytes  = 256 << 20
	DefaultJobsMaxAge      = 7 * 24 * time.Hour
	DefaultJobsMaxBytes    = 256 << 20
	DefaultDLQMaxAge       = 30 * 24 * time.Hour
	DefaultDLQMaxBytes     = 256 << 20
	// DefaultRecordsMaxBytes is each bucket's limit (the fleet's settings' excepted: 1 MiB).
	DefaultRecordsMaxBytes = 128 << 20
)

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
func (sc SetupConfig) Validate() error { return sc.WithDefaults().ValidLimits() }

// ValidLimits checks the streams' limits (zero: the default). A stream's age limit may not
// be shorter than its duplicate window (the server refuses it).
func (sc SetupConfig) ValidLimits() error {
	switch {
	case sc.JobsMaxAge < 0 || sc.JobsMaxAge > 0 && sc.JobsMaxAge < max(sc.DuplicateWindow, time.Second):
		return access.ConfigErrorf("JobsMaxAge", "%s: want at least the duplicate window (%s)", sc.JobsMaxAge, sc.DuplicateWindow)
	case sc.EventsMaxAge < 0 || sc.EventsMaxAge > 0 && sc.EventsMaxAge < time.Second:
		return access.ConfigErrorf("EventsMaxAge", "%s: want at least 1s", sc.EventsMaxAge)
	case sc.JobsMaxBytes < 0 || sc.JobsMaxBytes > 0 && sc.JobsMaxBytes < 1<<10:
		return access.ConfigErrorf("JobsMaxBytes", "%d: want at least 1 KiB", sc.JobsMaxBytes)
	case sc.EventsMaxBytes < 0 || sc.EventsMaxBytes > 0 && sc.EventsMaxBytes < 1<<10:
		return access.ConfigErrorf("EventsMaxBytes", "%d: want at least 1 KiB", sc.EventsMaxBytes)
	case sc.DLQMaxBytes < 0 || sc.DLQMaxBytes > 0 && sc.DLQMaxBytes < 64<<10:
		return access.ConfigErrorf("DLQMaxBytes", "%d: want at least 64 KiB", sc.DLQMaxBytes)
	case sc.RecordsMaxBytes < 0 || sc.RecordsMaxBytes > 0 && sc.RecordsMaxBytes < 64<<10:
		return access.ConfigErrorf("RecordsMaxBytes", "%d: want at least 64 KiB", sc.RecordsMaxBytes)
	}
	return nil
}

// WithDefaults fills sc's zero settings with the defaults.
func (sc SetupConfig) WithDefaults() SetupConfig {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	set(&sc.AckWait, DefaultAckWait)
	if sc.MaxDeliver == 0 {
		sc.MaxDeliver = DefaultMaxDeliver
	}
	set(&sc.LeaseTTL, DefaultLeaseTTL)
	set(&sc.DuplicateWindow, DefaultDuplicateWindow)
	set(&sc.PreparedTTL, DefaultPreparedTTL)
	set(&sc.JobsMaxAge, DefaultJobsMaxAge)
	set(&sc.EventsMaxAge, DefaultEventsMaxAge)
	if sc.JobsMaxBytes == 0 {
		sc.JobsMaxBytes = DefaultJobsMaxBytes
	}
	if sc.EventsMaxBytes == 0 {
		sc.EventsMaxBytes = DefaultEventsMaxBytes
	}
	if sc.DLQMaxBytes == 0 {
		sc.DLQMaxBytes = DefaultDLQMaxBytes
	}
	if sc.RecordsMaxBytes == 0 {
		sc.RecordsMaxBytes = DefaultRecordsMaxBytes
	}
	if sc.Replicas == 0 {
		sc.Replicas = 1
	}
	return sc
}
