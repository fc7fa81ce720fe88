package fleetops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// Names of the JetStream resources. They are shared by every worker and client on a NATS
// deployment, and set up only by the services (`compactor run`), at start: clients open
// them and say what is missing.
const (
	// MaxFreeDeliveries is how many deliveries a job may spend without a handler attempt
	// (a busy session lease, or a give-back at shutdown): a delivery beyond MaxDeliver plus
	// this is dead-lettered at admission. Handler attempts, crashes included, are counted
	// in COMPACTOR_ATTEMPTS and bounded by MaxDeliver; this is only the backstop for
	// endless contention.
	MaxFreeDeliveries = 50
)

// ConsumerName is the durable pull consumer of a store.
func ConsumerName(store string) string { return wire.ConsumerPrefix + store }

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

// DLQConsumerName is the consumer of COMPACTOR_DLQ that counts a store's dead letters.
func DLQConsumerName(store string) string { return wire.DLQConsumerPrefix + store }

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
func ensure(ctx context.Context, js jetstream.JetStream, sc SetupConfig, log *slog.Logger) (*FleetSettings, error) {
	if err := fitsAccount(ctx, js, sc, log); err != nil {
		return nil, err
	}
	for _, cfg := range append(bucketConfigs(sc, accountSweepWatches(ctx, js, sc, log)), streamConfigs(sc)...) {
		if _, err := ensureStream(ctx, js, cfg, log); err != nil {
			return nil, err
		}
	}
	for _, st := range sc.Stores {
		if _, err := ensureConsumer(ctx, js, wire.StreamJobs, StoreConsumerConfig(sc, st), log); err != nil {
			return nil, err
		}
		if _, err := ensureConsumer(ctx, js, wire.StreamDLQ, DLQConsumerConfig(st), log); err != nil {
			return nil, err
		}
	}
	f, err := writeFleetAdding(ctx, js, FleetSettings{LeaseTTL: Duration(sc.LeaseTTL), AckWait: Duration(sc.AckWait), MaxDeliver: sc.MaxDeliver,
		DuplicateWindow: Duration(sc.DuplicateWindow), PreparedTTL: Duration(sc.PreparedTTL), Replicas: sc.Replicas, Stores: slices.Clone(sc.Stores),
		JobsMaxAge: Duration(sc.JobsMaxAge), JobsMaxBytes: sc.JobsMaxBytes, EventsMaxAge: Duration(sc.EventsMaxAge), EventsMaxBytes: sc.EventsMaxBytes,
		DLQMaxBytes: sc.DLQMaxBytes, RecordsMaxBytes: sc.RecordsMaxBytes})
	if err != nil {
		return nil, err
	}
	if len(f.Stores) > 1 {
		log.Info("stores that share this NATS account trust each other: each store's keys can reach what the others hold through JetStream's replies; give each host its own account (compactor auth, docs/security.md)",
			"stores", strings.Join(f.Stores, ","))
	}
	return f, nil
}

// writeFleetAdding writes the settings record f with the stores it already lists added to
// f's, and returns the record written. The record is read and written as one step (written
// only if no other setup wrote it in between, else read again after ConflictWait): two
// setups of different stores at once both keep theirs (a store missing from the record is
// one the operator's view does not show).
func writeFleetAdding(ctx context.Context, js jetstream.JetStream, f FleetSettings) (*FleetSettings, error) {
	kv := OpenBucket(js, wire.BucketSettings)
	mine := slices.Clone(f.Stores)
	for attempt := 0; ; attempt++ {
		var rev uint64
		stores := slices.Clone(mine)
		e, err := kv.Last(ctx, wire.SettingsKey)
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
		w := stamped(f)
		b, err := json.Marshal(w)
		if err != nil {
			return nil, err
		}
		_, err = kv.Update(ctx, wire.SettingsKey, b, rev)
		if err == nil {
			return &w, nil
		}
		if !IsWrongLastSeq(err) || attempt == 20 {
			return nil, fmt.Errorf("write fleet settings: %w", err)
		}
		if err := AfterConflict(ctx, attempt+1); err != nil {
			return nil, fmt.Errorf("write fleet settings: %w", err)
		}
	}
}
