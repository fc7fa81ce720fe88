package fleetops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The fleet's settings: what `compactor setup` set up, written by it into
// COMPACTOR_SETTINGS (key "fleet"), read by every worker at start and every
// workerBeatEvery. A worker that is not the admin cannot read a stream's configuration
// (the request that reads it can also list every store's subjects, see kv.go), so it
// learns the settings it must follow here: a lease is renewed from the fleet's lease TTL,
// not from the process's own flag.

// Layout is the version of what `compactor setup` sets up (docs/security.md, "Layout"), so
// that a worker refuses a NATS set up for another one: 1 has no settings record; 2 puts
// every subject and key under its store's name; 3 keeps those names, and sets up every
// stream and bucket without rollups, with deletes and purges only where they are used and
// with byte and message limits (streams.go), on a NATS account of its own per host
// (compactor auth).
const Layout = 3

// FleetSettings is the settings record.
type FleetSettings struct {
	// V is the record's schema version (settingsV); Layout the layout of the subjects
	// and keys it was set up for.
	V               int      `json:"v"`
	Layout          int      `json:"layout"`
	LeaseTTL        Duration `json:"leaseTtl"`
	AckWait         Duration `json:"ackWait"`
	MaxDeliver      int      `json:"maxDeliver"`
	DuplicateWindow Duration `json:"duplicateWindow"`
	PreparedTTL     Duration `json:"preparedTtl"`
	Replicas        int      `json:"replicas"`
	// The limits of the jobs and events streams (absent in a record written by a setup
	// that set none).
	JobsMaxAge     Duration `json:"jobsMaxAge,omitempty"`
	JobsMaxBytes   int64    `json:"jobsMaxBytes,omitempty"`
	EventsMaxAge   Duration `json:"eventsMaxAge,omitempty"`
	EventsMaxBytes int64    `json:"eventsMaxBytes,omitempty"`
	// The limits of the dead letters' stream and of each bucket (since layout 3).
	DLQMaxBytes     int64 `json:"dlqMaxBytes,omitempty"`
	RecordsMaxBytes int64 `json:"recordsMaxBytes,omitempty"`
	// Stores are the stores set up in this NATS account (each has its consumers).
	Stores []string  `json:"stores"`
	By     string    `json:"by,omitempty"` // host and process of the setup
	At     time.Time `json:"at"`
}

// Duration is a time.Duration written as Go writes it ("1m30s").
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

// NotSetUpError says that what a worker or client needs has not been set up (or not by
// this version): only `compactor setup` (the admin's) sets it up.
type NotSetUpError struct {
	What   string // what is missing or different
	Remedy string // the command that fixes it
	Err    error  // the cause, when there is one (a *NewerRecordError)
}

func (e *NotSetUpError) Error() string {
	return e.What + ": " + e.Remedy
}

func (e *NotSetUpError) Unwrap() error { return e.Err }

// absentFor is how long ReadFleet keeps asking before it calls the settings record
// missing, and absentWait the wait before each read again (absentWait(1) first): a
// replicated stream's followers answer direct gets, and one that has not applied a setup's
// write yet answers "no message" (and, while the stream's servers elect a leader, nothing
// answers at all). A record written a moment ago, by this process or a setup started just
// before it, is thus read as missing for some milliseconds, seconds on a loaded cluster; a
// missing record is rare and ends the start, so it is worth a few seconds to confirm.
const absentFor = 3 * time.Second

func absentWait(n int) time.Duration { return doubling(25*time.Millisecond, 800*time.Millisecond, n) }

// absent reports whether a read of the settings record found none: no message, or no
// server answering for the bucket.
func absent(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrMsgNotFound)
}

// ReadFleet reads the settings record. Missing, also when asked again for absentFor: a
// *NotSetUpError.
func ReadFleet(ctx context.Context, nc *nats.Conn) (*FleetSettings, error) {
	m, err := readFleetRaw(ctx, nc)
	for n, until := 1, time.Now().Add(absentFor); absent(err) && time.Now().Add(absentWait(n)).Before(until); n++ {
		if werr := wait(ctx, absentWait(n)); werr != nil {
			return nil, fmt.Errorf("fleet settings: %w", werr)
		}
		m, err = readFleetRaw(ctx, nc)
	}
	return fleetOf(m, err)
}

// readFleetRaw is one read of the settings record.
func readFleetRaw(ctx context.Context, nc *nats.Conn) (*jetstream.RawStreamMsg, error) {
	return DirectLast(ctx, nc, "KV_"+wire.BucketSettings, wire.KVSubjectRoot+wire.BucketSettings+"."+wire.SettingsKey)
}

// fleetOf is the settings record of one read's answer m, err.
func fleetOf(m *jetstream.RawStreamMsg, err error) (*FleetSettings, error) {
	if absent(err) {
		return nil, &NotSetUpError{What: "this NATS holds no fleet settings (bucket " + wire.BucketSettings + ", key " + wire.SettingsKey + ")",
			Remedy: "no `compactor setup` of this version has run here: run `compactor setup --store NAME...` with the admin's credentials (a deployment of an older compactor: `compactor setup --migrate`), or `compactor run --setup` on a single host"}
	}
	if err != nil {
		return nil, fmt.Errorf("fleet settings: %w", err)
	}
	if opOf(m.Header) != jetstream.KeyValuePut {
		return nil, &NotSetUpError{What: "the fleet settings were deleted", Remedy: "run `compactor setup` again"}
	}
	if err := NewerThan(wire.BucketSettings, wire.SettingsKey, m.Data, settingsV); err != nil {
		var nr *NewerRecordError
		errors.As(err, &nr)
		return nil, &NotSetUpError{What: fmt.Sprintf("the fleet's settings (bucket %s, key %s) are of schema version %d, newer than this compactor reads (%d)", wire.BucketSettings, wire.SettingsKey, nr.V, nr.Known),
			Remedy: "a newer compactor's `compactor setup` wrote them: run the workers, clients and setup of that version (docs/upgrading.md); this one neither follows nor rewrites them", Err: err}
	}
	var f FleetSettings
	if err := json.Unmarshal(m.Data, &f); err != nil {
		return nil, fmt.Errorf("fleet settings: %w", err)
	}
	if f.Layout != Layout {
		return nil, &NotSetUpError{What: fmt.Sprintf("this NATS was set up for layout %d, this compactor uses layout %d", f.Layout, Layout),
			Remedy: "run `compactor setup --migrate` with the compactor of the newer layout (docs/security.md, \"Upgrading\")"}
	}
	return &f, nil
}

// ReadFleetAnyLayout reads the settings record whatever the layout it names (setup reads an
// older one to keep its stores).
func ReadFleetAnyLayout(ctx context.Context, nc *nats.Conn) (*FleetSettings, error) {
	m, err := readFleetRaw(ctx, nc)
	if err != nil {
		return nil, err
	}
	if opOf(m.Header) != jetstream.KeyValuePut {
		return nil, jetstream.ErrKeyNotFound
	}
	var f FleetSettings
	if err := json.Unmarshal(m.Data, &f); err != nil {
		return nil, fmt.Errorf("fleet settings: %w", err)
	}
	return &f, nil
}

// settingsRecord is f as the settings record holds it: this version and layout, when and
// by whom.
func settingsRecord(f FleetSettings) ([]byte, error) { return json.Marshal(stamped(f)) }

// stamped is f with this version and layout, when and by whom.
func stamped(f FleetSettings) FleetSettings {
	host, _ := os.Hostname()
	f.V, f.Layout, f.At, f.By = settingsV, Layout, time.Now().UTC(), fmt.Sprintf("%s pid %d", host, os.Getpid())
	return f
}

// writeFleet writes the settings record (the admin's).
func writeFleet(ctx context.Context, js jetstream.JetStream, f FleetSettings) error {
	b, err := settingsRecord(f)
	if err != nil {
		return err
	}
	if _, err := OpenBucket(js, wire.BucketSettings).Put(ctx, wire.SettingsKey, b); err != nil {
		return fmt.Errorf("write fleet settings: %w", err)
	}
	return nil
}
