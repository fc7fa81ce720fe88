package fleetops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// `compactor setup`: the admin's step. It sets up what a fleet uses (ensure) and, asked to,
// upgrades a deployment of an older layout first (migrate): the workers, the sweeps and the
// clients only bind what it set up.

// SetupResult says what Setup did.
type SetupResult struct {
	Stores   []string       `json:"stores"`             // the stores set up (with those found when migrating)
	Fleet    *FleetSettings `json:"fleet,omitempty"`    // the settings record written
	Migrated *Migration     `json:"migrated,omitempty"` // what a migration moved
	Pruned   []PrunedStore  `json:"pruned,omitempty"`   // the retired stores removed (setup --prune)
}

// Migration counts what a migration moved or dropped. From layout 1 it moves keys; from
// layout 2 it moves nothing: it sets every stream and bucket up anew (rollups off, deletes
// and purges denied where unused, limits), and every key and queued job stays where it is.
type Migration struct {
	From           int `json:"from"`
	SweepRecords   int `json:"sweepRecords"`   // f.<store>.<hash> → <store>.<hash>
	AttemptCounts  int `json:"attemptCounts"`  // a.<seq>.<hash> → <store>.<seq>.<hash>
	AttemptsGone   int `json:"attemptsGone"`   // counts of job messages no longer queued: dropped
	LeasesDropped  int `json:"leasesDropped"`  // s.<store>.<token>: no worker holds them (there is none)
	ConsumersFound int `json:"consumersFound"` // stores found by their consumers compactor-<store>
}

// OldLayoutError says that the NATS holds a deployment of an older compactor.
type OldLayoutError struct{ Layout int }

func (e *OldLayoutError) Error() string {
	return fmt.Sprintf("this NATS holds a deployment of an older compactor (layout %d, this one uses %d): stop its workers, then run `compactor setup --migrate` once (docs/security.md, \"Upgrading\"); no queued job is lost", e.Layout, Layout)
}

// LiveWorkersError says that workers serve while a migration would move their keys.
type LiveWorkersError struct{ Workers []string }

func (e *LiveWorkersError) Error() string {
	return fmt.Sprintf("workers are serving on this NATS (%s): stop every worker of the older compactor first (their keys in %s expire %s after they stop), then run `compactor setup --migrate` again",
		strings.Join(e.Workers, "; "), wire.BucketWorkers, WorkerBeatTTL)
}

// LayoutOf tells which layout the NATS holds: 0 nothing of compactor's (or a setup of this
// layout under way: its streams allow direct gets from their creation), 1 the layout before
// the fleet's settings (a jobs stream without direct gets), else the settings' own.
func LayoutOf(ctx context.Context, js jetstream.JetStream) (int, error) {
	// One read, not ReadFleet's confirmed absence: what a stale answer costs here is the
	// checks below and an ensure that changes nothing, and a fresh NATS has no record.
	f, err := fleetOf(readFleetRaw(ctx, js.Conn()))
	if err == nil {
		return f.Layout, nil
	}
	var (
		ns    *NotSetUpError
		newer *NewerRecordError
	)
	if !errors.As(err, &ns) || errors.As(err, &newer) {
		return 0, err // settings of a newer schema are never rewritten by an older setup
	}
	if raw, rerr := DirectLast(ctx, js.Conn(), "KV_"+wire.BucketSettings, wire.KVSubjectRoot+wire.BucketSettings+"."+wire.SettingsKey); rerr == nil {
		var f FleetSettings
		if json.Unmarshal(raw.Data, &f) == nil && f.Layout > 0 {
			return f.Layout, nil
		}
	}
	str, err := js.Stream(ctx, wire.StreamJobs)
	switch {
	case err == nil && !str.CachedInfo().Config.AllowDirect:
		return 1, nil
	case err != nil && !errors.Is(err, jetstream.ErrStreamNotFound):
		return 0, err
	}
	return 0, nil
}

// Setup sets up the fleet's streams, buckets and the stores' consumers on nc's NATS and
// writes the fleet's settings (the admin's credentials). A deployment of an older layout
// is an *OldLayoutError, unless migrate: then its stores are found by their consumers, its
// keys moved to the store-first layout (no queued job is touched) and it is set up anew;
// a migration refuses while workers serve (*LiveWorkersError) unless force.
func Setup(ctx context.Context, nc *nats.Conn, sc SetupConfig, migrate, force bool, log *slog.Logger) (*SetupResult, error) {
	sc = sc.WithDefaults() // zero settings take the defaults
	if err := sc.ValidLimits(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return access.Guard(ctx, nc, func(ctx context.Context) (*SetupResult, error) {
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, err
		}
		return SetupWith(ctx, js, sc, migrate, force, log)
	})
}

func SetupWith(ctx context.Context, js jetstream.JetStream, sc SetupConfig, migrate, force bool, log *slog.Logger) (*SetupResult, error) {
	layout, err := LayoutOf(ctx, js)
	if err != nil {
		return nil, err
	}
	res := &SetupResult{}
	switch {
	case layout > Layout:
		return nil, fmt.Errorf("this NATS was set up for layout %d by a newer compactor; this one (layout %d) cannot set it up", layout, Layout)
	case layout > 0 && layout < Layout && !migrate:
		return nil, &OldLayoutError{Layout: layout}
	case layout == 2:
		// The same subjects and keys: ensure below updates every stream and bucket in place
		// (its changes are logged, one line per setting). Queued jobs and keys stay.
		res.Migrated = &Migration{From: 2}
		if old, err := ReadFleetAnyLayout(ctx, js.Conn()); err == nil {
			for _, st := range old.Stores {
				if !slices.Contains(sc.Stores, st) {
					sc.Stores = append(sc.Stores, st)
				}
			}
			res.Migrated.ConsumersFound = len(old.Stores)
		}
	case layout == 1:
		m, stores, err := migrateKeys(ctx, js, force, log)
		if err != nil {
			return nil, err
		}
		res.Migrated = m
		for _, st := range stores {
			if !slices.Contains(sc.Stores, st) {
				sc.Stores = append(sc.Stores, st)
			}
		}
	}
	// The record as this setup wrote it: a read of it at once may be answered by a follower
	// that has not applied the write yet.
	f, err := ensure(ctx, js, sc, log)
	if err != nil {
		return nil, err
	}
	res.Fleet, res.Stores = f, f.Stores
	return res, nil
}

// migrateKeys moves layout 1's keys to layout 2's (docs/security.md, "Upgrading"): the
// sweep records and attempt counts under their store's name, the leases dropped (no worker
// runs: it refuses while one does, unless force). It returns the stores found by their
// consumers on COMPACTOR_JOBS. The jobs stream is only read: every queued job stays.
func migrateKeys(ctx context.Context, js jetstream.JetStream, force bool, log *slog.Logger) (*Migration, []string, error) {
	m := &Migration{From: 1}
	if !force {
		if live, err := LiveWorkers(ctx, js); err != nil {
			return nil, nil, err
		} else if len(live) > 0 {
			return nil, nil, &LiveWorkersError{Workers: live}
		}
	}
	jobs, err := js.Stream(ctx, wire.StreamJobs)
	if err != nil {
		return nil, nil, fmt.Errorf("migrate: %w", err)
	}
	stores, err := storesByConsumer(ctx, jobs)
	if err != nil {
		return nil, nil, err
	}
	m.ConsumersFound = len(stores)
	move := func(bucket string, rename func(key string) (string, bool)) (moved, dropped int, err error) {
		return migrateBucket(ctx, js, bucket, rename, log)
	}
	if m.SweepRecords, _, err = move(wire.BucketSweep, func(k string) (string, bool) {
		rest, ok := strings.CutPrefix(k, "f.")
		return rest, ok
	}); err != nil {
		return nil, nil, err
	}
	if _, m.LeasesDropped, err = move(wire.BucketLeases, func(k string) (string, bool) {
		if strings.HasPrefix(k, "s.") {
			return "", false
		}
		return k, true
	}); err != nil {
		return nil, nil, err
	}
	if m.AttemptCounts, m.AttemptsGone, err = move(wire.BucketAttempts, func(k string) (string, bool) {
		rest, ok := strings.CutPrefix(k, "a.")
		if !ok {
			return k, true
		}
		seqText, hash, _ := strings.Cut(rest, ".")
		seq, err := strconv.ParseUint(seqText, 10, 64)
		if err != nil {
			return "", false
		}
		msg, err := jobs.GetMsg(ctx, seq)
		if err != nil {
			return "", false // the job is no longer queued: its count goes with it
		}
		store, _, _ := strings.Cut(strings.TrimPrefix(msg.Subject, wire.JobsPrefix), ".")
		return store + "." + seqText + "." + hash, true
	}); err != nil {
		return nil, nil, err
	}
	return m, stores, nil
}

// storesByConsumer are the stores of the durable consumers of COMPACTOR_JOBS, sorted.
func storesByConsumer(ctx context.Context, jobs jetstream.Stream) ([]string, error) {
	var stores []string
	names := jobs.ConsumerNames(ctx)
	for name := range names.Name() {
		if st, ok := strings.CutPrefix(name, wire.ConsumerPrefix); ok && wire.ValidateStoreName(st) == nil && !strings.HasPrefix(name, wire.DLQConsumerPrefix) {
			stores = append(stores, st)
		}
	}
	if err := names.Err(); err != nil {
		return nil, fmt.Errorf("migrate: consumers of %s: %w", wire.StreamJobs, err)
	}
	slices.Sort(stores)
	return stores, nil
}

// migrateBucket renames the keys of bucket: rename says a key's new name, or that it is
// dropped (keep false); a key whose name stays is left alone. The old key is purged.
func migrateBucket(ctx context.Context, js jetstream.JetStream, bucket string, rename func(key string) (string, bool), log *slog.Logger) (moved, dropped int, err error) {
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("migrate %s: %w", bucket, err)
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("migrate %s: %w", bucket, err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	for _, k := range keys {
		to, keep := rename(k)
		if to == k {
			continue
		}
		if keep {
			e, err := kv.Get(ctx, k)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return moved, dropped, fmt.Errorf("migrate %s %s: %w", bucket, k, err)
			}
			if _, err := kv.Put(ctx, to, e.Value()); err != nil {
				return moved, dropped, fmt.Errorf("migrate %s %s: %w", bucket, k, err)
			}
			moved++
		} else {
			dropped++
		}
		if err := kv.Purge(ctx, k); err != nil {
			return moved, dropped, fmt.Errorf("migrate %s %s: %w", bucket, k, err)
		}
	}
	log.Info("migrated bucket", "bucket", bucket, "moved", moved, "dropped", dropped)
	return moved, dropped, nil
}

// LiveWorkers names the workers that reported within the last workerBeatTTL.
func LiveWorkers(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	kv, err := js.KeyValue(ctx, wire.BucketWorkers)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for k := range lister.Keys() {
		if strings.HasSuffix(k, "._owner") {
			continue
		}
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		if b, ok := BeatOf(e); ok && b.Worker != "" {
			out = append(out, fmt.Sprintf("%s for store %s, %s ago", b.Worker, b.Store, time.Since(b.At).Round(time.Second)))
		} else {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out, nil
}
