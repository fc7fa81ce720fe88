package fleetops

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Schema versions of the KV records. Every value this package writes into a bucket is a
// JSON object that names its schema version ("v"), as jobs do: a fleet is never on one
// version, so a record may be read by an older compactor than the one that wrote it. The
// rule is the jobs': a change that readers of the older version may ignore (a field
// added) keeps the version; a change they would misread raises it. A reader that meets a
// version newer than the one it knows never overwrites that record with its own older
// shape, never deletes it on the strength of what it cannot read, and says so; what it
// does instead is decided per record (docs/upgrading.md, "Records of a newer version"):
//
//   - a sweep record: the file is left to the newer sweeps (not assessed, not pruned);
//   - a lease: the session is busy, whatever the holder;
//   - a beat: the worker is counted, its fields are not (no job version is taken as
//     understood by it);
//   - a store's owner record: the store cannot be claimed nor swept (two directories
//     serving one store is what the record prevents);
//   - an attempt count: the attempt is not counted (the delivery count bounds the job);
//     a hand-back is not counted;
//   - a spend count: the window is taken as full (the job waits for the window's end);
//   - a prepared value: not replaced by an older one (engine.Prepared has its own v);
//   - the fleet's settings: a worker does not start (or keeps those it started with), and
//     an older setup does not rewrite them.
//
// A record without "v" was written before records carried versions: version 1's shape.
const (
	SweepRecordV = 1 // COMPACTOR_SWEEP <store>.<hash>: sweepRecord
	LeaseV       = 1 // COMPACTOR_LEASES <store>.<token>: leaseValue
	BeatV        = 1 // COMPACTOR_WORKERS <store>.<worker>: WorkerBeat
	OwnerV       = 1 // COMPACTOR_WORKERS <store>._owner: ownerRecord
	CountV       = 1 // COMPACTOR_ATTEMPTS <store>.<seq>.<hash>, COMPACTOR_SPEND <store>.spend.<window>, =fleet.<window>: countRecord
	settingsV    = 1 // COMPACTOR_SETTINGS fleet: FleetSettings
)

// RecordV reads a record's schema version: its "v", or 1 when it has none (written before
// records carried versions). ok is false when the value is no JSON object or its "v" is
// not a whole number of at least 1: a damaged record, not a newer one.
func RecordV(data []byte) (v int, ok bool) {
	var head struct {
		V json.RawMessage `json:"v"`
	}
	if json.Unmarshal(data, &head) != nil {
		return 0, false
	}
	if head.V == nil {
		return 1, true
	}
	n, err := strconv.Atoi(string(head.V))
	if err != nil || n < 1 {
		return 0, false
	}
	return n, true
}

// NewerRecordError is a record of a schema version newer than this compactor reads: it is
// left as it is.
type NewerRecordError struct {
	Bucket, Key string
	V, Known    int
}

func (e *NewerRecordError) Error() string {
	return fmt.Sprintf("%s %s is a record of schema version %d, newer than this compactor reads (%d): a newer compactor wrote it; it is left as it is (docs/upgrading.md)",
		e.Bucket, e.Key, e.V, e.Known)
}

// NewerThan returns a *NewerRecordError when data is a record of a version above known.
func NewerThan(bucket, key string, data []byte, known int) error {
	if v, ok := RecordV(data); ok && v > known {
		return &NewerRecordError{Bucket: bucket, Key: key, V: v, Known: known}
	}
	return nil
}

// CountRecord is a count (attempts of a job message, tokens of a spend window). Version 1
// was first a bare decimal (the count alone); such a value still reads as N.
type CountRecord struct {
	V int `json:"v"`
	N int `json:"n"`
	// HandedBack counts the deliveries of a job message that a worker handed back without
	// working it (a job version it does not work, a spend limit, a shutdown): they do not
	// count against the job's delivery bound (attempts only).
	HandedBack int `json:"handedBack,omitempty"`
}

// ParseCount reads a count record.
func ParseCount(bucket, key string, data []byte) (CountRecord, error) {
	s := strings.TrimSpace(string(data))
	if n, err := strconv.Atoi(s); err == nil {
		return CountRecord{V: CountV, N: n}, nil
	}
	if err := NewerThan(bucket, key, data, CountV); err != nil {
		return CountRecord{}, err
	}
	var c CountRecord
	if err := json.Unmarshal(data, &c); err != nil {
		return CountRecord{}, fmt.Errorf("%s %s: not a count: %q", bucket, key, clip(s, 40))
	}
	c.V = CountV
	return c, nil
}

func (c CountRecord) Bytes() []byte {
	c.V = CountV
	b, _ := json.Marshal(c)
	return b
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
