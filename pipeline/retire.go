package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Retired stores: a store that no host serves any more keeps its consumers, its keys in
// every bucket and its queued jobs until the admin removes them (`compactor setup --prune`).
// Never automatically: a store whose host is down for a while returns, and finds its jobs.

// PrunedStore is what a prune removed of one store (or would, with dryRun).
type PrunedStore struct {
	Store     string         `json:"store"`
	Consumers []string       `json:"consumers"`        // compactor-<store>, compactor-dlq-<store>
	Keys      map[string]int `json:"keys"`             // by bucket: the store's keys (<store>.…)
	Jobs      int            `json:"jobs"`             // queued jobs removed
	Dead      int            `json:"deadLetters"`      // its dead letters, kept (compactor dlq purge --store)
	Events    int            `json:"events"`           // its events, kept until they age out
	Removed   bool           `json:"removed"`          // false: a dry run
	Reason    string         `json:"reason,omitempty"` // why it was found
}

// ServedStoreError refuses a prune of a store whose workers report.
type ServedStoreError struct {
	Store   string
	Workers []string
}

func (e *ServedStoreError) Error() string {
	return fmt.Sprintf("store %s is not in the fleet's list (--store) but its workers report: %s; stop them first (their keys in %s expire %s after they stop), or give --store %s to keep it: nothing was removed",
		e.Store, strings.Join(e.Workers, "; "), BucketWorkers, workerBeatTTL, e.Store)
}

// Prune removes everything of the stores that are not in keep: each one's consumers of
// COMPACTOR_JOBS and COMPACTOR_DLQ, its keys in every store bucket, its queued jobs, and
// its name in the fleet's settings (the admin's credentials: it lists and deletes across
// stores). Its dead letters stay (the operator's: `compactor dlq purge --store S`), and
// its events until they age out. A store whose workers report (a beat in
// COMPACTOR_WORKERS within workerBeatTTL) is refused, and then nothing is removed
// (*ServedStoreError). With dryRun nothing is removed either: the result says what would be.
func Prune(ctx context.Context, nc *nats.Conn, keep []string, dryRun bool, log *slog.Logger) ([]PrunedStore, error) {
	if len(keep) == 0 {
		return nil, errors.New("prune: the fleet's list of stores is empty: give the stores to keep (--store)")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return guard(ctx, nc, func(ctx context.Context) ([]PrunedStore, error) {
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, err
		}
		return prune(ctx, js, keep, dryRun, log)
	})
}

func prune(ctx context.Context, js jetstream.JetStream, keep []string, dryRun bool, log *slog.Logger) ([]PrunedStore, error) {
	found, err := storesFound(ctx, js)
	if err != nil {
		return nil, err
	}
	var out []PrunedStore
	for _, st := range slices.Sorted(maps.Keys(found)) {
		if slices.Contains(keep, st) {
			continue
		}
		live, err := storeWorkers(ctx, js, st)
		if err != nil {
			return nil, err
		}
		if len(live) > 0 {
			return nil, &ServedStoreError{Store: st, Workers: live}
		}
		out = append(out, PrunedStore{Store: st, Keys: map[string]int{}, Reason: strings.Join(found[st], ", ")})
	}
	for i := range out {
		p := &out[i]
		if err := pruneStore(ctx, js, p, dryRun); err != nil {
			return out, fmt.Errorf("prune store %s: %w", p.Store, err)
		}
		if !dryRun {
			log.Info("retired store removed", "store", p.Store, "consumers", strings.Join(p.Consumers, ","), "keys", p.Keys, "jobs", p.Jobs,
				"dead_letters_kept", p.Dead)
		}
	}
	if dryRun || len(out) == 0 {
		return out, nil
	}
	f, err := readFleet(ctx, js.Conn())
	if err != nil {
		return out, err
	}
	f.Stores = slices.DeleteFunc(f.Stores, func(st string) bool { return !slices.Contains(keep, st) })
	return out, writeFleet(ctx, js, *f)
}

// storesFound names every store found on the NATS, with where: its consumers, its keys in
// the store buckets, its queued jobs, the fleet's settings.
func storesFound(ctx context.Context, js jetstream.JetStream) (map[string][]string, error) {
	found := map[string][]string{}
	note := func(st, where string) {
		if wire.ValidateStoreName(st) == nil && !slices.Contains(found[st], where) {
			found[st] = append(found[st], where)
		}
	}
	for _, stream := range []string{wire.StreamJobs, wire.StreamDLQ} {
		str, err := js.Stream(ctx, stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		names := str.ConsumerNames(ctx)
		for name := range names.Name() {
			if st, ok := strings.CutPrefix(name, dlqConsumerPfx); ok {
				note(st, "consumer "+name)
			} else if st, ok := strings.CutPrefix(name, consumerPfx); ok {
				note(st, "consumer "+name)
			}
		}
		if err := names.Err(); err != nil {
			return nil, fmt.Errorf("consumers of %s: %w", stream, err)
		}
	}
	for _, b := range storeBuckets {
		subjects, err := subjectsOf(ctx, js, "KV_"+b, wire.KVSubjectRoot+b+".>")
		if err != nil {
			return nil, err
		}
		for subj := range subjects {
			st, _, _ := strings.Cut(strings.TrimPrefix(subj, wire.KVSubjectRoot+b+"."), ".")
			note(st, "keys in "+b)
		}
	}
	jobs, err := subjectsOf(ctx, js, wire.StreamJobs, wire.JobsPrefix+">")
	if err != nil {
		return nil, err
	}
	for subj := range jobs {
		st, _, _ := strings.Cut(strings.TrimPrefix(subj, wire.JobsPrefix), ".")
		note(st, "queued jobs")
	}
	if f, err := readFleet(ctx, js.Conn()); err == nil {
		for _, st := range f.Stores {
			note(st, "the fleet's settings")
		}
	}
	return found, nil
}

// subjectsOf counts the messages of a stream by subject under filter (none when the
// stream does not exist).
func subjectsOf(ctx context.Context, js jetstream.JetStream, stream, filter string) (map[string]uint64, error) {
	str, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	info, err := str.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, fmt.Errorf("subjects of %s: %w", stream, err)
	}
	return info.State.Subjects, nil
}

// storeWorkers names the workers of store that reported within workerBeatTTL.
func storeWorkers(ctx context.Context, js jetstream.JetStream, store string) ([]string, error) {
	beats, _, err := readBeats(ctx, openBucket(js, BucketWorkers), store)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, b := range beats {
		out = append(out, fmt.Sprintf("%s on %s", b.Worker, orDash(b.Host)))
	}
	return out, nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// pruneStore counts (and, unless dryRun, removes) one store's consumers, keys and jobs.
func pruneStore(ctx context.Context, js jetstream.JetStream, p *PrunedStore, dryRun bool) error {
	for _, c := range []struct{ stream, name string }{{wire.StreamJobs, ConsumerName(p.Store)}, {wire.StreamDLQ, DLQConsumerName(p.Store)}} {
		_, err := js.Consumer(ctx, c.stream, c.name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		p.Consumers = append(p.Consumers, c.name)
		if !dryRun {
			if err := js.DeleteConsumer(ctx, c.stream, c.name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				return fmt.Errorf("delete consumer %s: %w", c.name, err)
			}
		}
	}
	purge := func(stream, filter string) (int, error) {
		subjects, err := subjectsOf(ctx, js, stream, filter)
		if err != nil || len(subjects) == 0 || dryRun {
			return len(subjects), err
		}
		str, err := js.Stream(ctx, stream)
		if err != nil {
			return 0, err
		}
		if err := str.Purge(ctx, jetstream.WithPurgeSubject(filter)); err != nil {
			return 0, fmt.Errorf("purge %s of %s: %w", filter, stream, err)
		}
		return len(subjects), nil
	}
	for _, b := range storeBuckets {
		n, err := purge("KV_"+b, wire.KVSubjectRoot+b+"."+p.Store+".>")
		if err != nil {
			return err
		}
		if n > 0 {
			p.Keys[b] = n
		}
	}
	var err error
	if p.Jobs, err = purge(wire.StreamJobs, wire.JobsPrefix+p.Store+".>"); err != nil {
		return err
	}
	count := func(stream, filter string) (int, error) {
		subjects, err := subjectsOf(ctx, js, stream, filter)
		n := 0
		for _, c := range subjects {
			n += int(c)
		}
		return n, err
	}
	if p.Dead, err = count(wire.StreamDLQ, wire.DLQPrefix+p.Store+".>"); err != nil {
		return err
	}
	if p.Events, err = count(wire.StreamEvents, wire.EventsPrefix+p.Store+".>"); err != nil {
		return err
	}
	p.Removed = !dryRun
	return nil
}
