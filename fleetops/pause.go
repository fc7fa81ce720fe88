package fleetops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Pausing a store: an operator (compactor pause, the console) writes a record in
// COMPACTOR_SETTINGS under paused.<store>; the store's workers read it before each fetch
// (at most every pauseCheckEvery) and, while it says paused, fetch nothing: the jobs they
// hold run to their end, the queue keeps what it has (sweeps and agents still enqueue), and
// /readyz, /metrics (compactor_store_paused), the workers' beats (status) and the console
// say so. Resuming writes the record again with Paused false. Only the operator and the
// admin may write the record; a worker may read its own store's (docs/security.md).

// pauseV is the schema version of a pause record.
const pauseV = 1

// PauseRecord is a store's pause record.
type PauseRecord struct {
	V      int       `json:"v"`
	Store  string    `json:"store"`
	Paused bool      `json:"paused"`
	Reason string    `json:"reason,omitempty"`
	By     string    `json:"by,omitempty"` // who wrote it: a host and process, or the console's user
	At     time.Time `json:"at"`
}

// PauseKey is the record's key.
func PauseKey(store string) string { return wire.PauseKeyPrefix + store }

// SetPaused writes a store's pause record (the operator's or the admin's right). by says who
// paused it, reason why (both shown by status and the console).
func SetPaused(ctx context.Context, nc *nats.Conn, store string, paused bool, reason, by string) (PauseRecord, error) {
	if err := wire.ValidateStoreName(store); err != nil {
		return PauseRecord{}, err
	}
	if by == "" {
		host, _ := os.Hostname()
		by = fmt.Sprintf("%s pid %d", host, os.Getpid())
	}
	rec := PauseRecord{V: pauseV, Store: store, Paused: paused, Reason: reason, By: by, At: time.Now().UTC()}
	b, err := json.Marshal(rec)
	if err != nil {
		return rec, err
	}
	return access.Guard(ctx, nc, func(ctx context.Context) (PauseRecord, error) {
		// A pause is read by the workers of the account it is written in: a store of
		// another account would never see it (docs/security.md, "The design").
		f, err := ReadFleet(ctx, nc)
		if err != nil {
			return rec, fmt.Errorf("pause record of store %s: %w", store, err)
		}
		if !slices.Contains(f.Stores, store) {
			return rec, fmt.Errorf("store %s is not set up in this account (its stores: %s): its workers would never read this pause record; nothing was written (the store's account's operator key, or --credentials, pauses it)",
				store, strings.Join(f.Stores, ", "))
		}
		js, err := jetstream.New(nc)
		if err != nil {
			return rec, err
		}
		if _, err := OpenBucket(js, wire.BucketSettings).Put(ctx, PauseKey(store), b); err != nil {
			if Unavailable(err) {
				err = Diagnose(ctx, js, "KV_"+wire.BucketSettings, err)
			}
			return rec, fmt.Errorf("pause record of store %s: %w", store, err)
		}
		return rec, nil
	})
}

// ReadPaused reads a store's pause record; a store never paused has none (nil, nil).
func ReadPaused(ctx context.Context, nc *nats.Conn, store string) (*PauseRecord, error) {
	m, err := DirectLast(ctx, nc, "KV_"+wire.BucketSettings, wire.KVSubjectRoot+wire.BucketSettings+"."+PauseKey(store))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pause record of store %s: %w", store, err)
	}
	if opOf(m.Header) != jetstream.KeyValuePut {
		return nil, nil
	}
	return PauseOf(store, m.Data)
}

// PauseOf reads a pause record. One of a newer schema is taken as paused (what a newer
// compactor wrote there is a pause, whatever else it says).
func PauseOf(store string, data []byte) (*PauseRecord, error) {
	if v, ok := RecordV(data); ok && v > pauseV {
		return &PauseRecord{V: v, Store: store, Paused: true, Reason: "a newer compactor's pause record"}, nil
	}
	var r PauseRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("pause record of store %s: %w", store, err)
	}
	r.Store = store
	return &r, nil
}
