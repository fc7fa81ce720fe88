package sweep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/outcome"
	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// Memo is this process's copy of its stores' part of COMPACTOR_SWEEP, so a sweep decides
// "unchanged" with a stat and a map lookup instead of one NATS round trip per file. It is
// loaded by one KV watcher per store (each of the store's keys only, as a store's worker
// may watch: a process of n stores holds n consumers of the bucket, which setup gives room
// for, fleetops.SweepWatches), started at the first sweep and kept until Close: a watcher delivers every
// record once, then every later write by any process (other sweepers, the workers that
// note job outcomes). A copy a moment behind is harmless: a record it lacks only makes
// the sweep read that file again.
type Memo struct {
	mu    sync.RWMutex
	recs  map[string]memoEntry // by KV key
	ready chan struct{}        // closed when the initial values are in
	stop  func()
	done  chan struct{}
	// onForeign is told of a record refused because its path is not its key's (foreign.go).
	onForeign func(store string, err error)
}

type memoEntry struct {
	rec Record
	rev uint64
	// newer is the schema version of a record this version cannot read (0: it can): the
	// file is left to the newer compactor's sweeps.
	newer int
}

// OpenMemo starts the stores' watchers and returns once they have delivered every current
// record (or ctx ends).
func OpenMemo(ctx context.Context, kv *fleetops.Bucket, stores []string, log *slog.Logger, onForeign func(store string, err error)) (*Memo, error) {
	// The watchers outlive this call (they follow later writes): their context is the memo's.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m := &Memo{recs: map[string]memoEntry{}, ready: make(chan struct{}), done: make(chan struct{}), onForeign: onForeign}
	var watchers []*fleetops.Watcher
	m.stop = func() {
		for _, w := range watchers {
			_ = w.Stop()
		}
		cancel()
	}
	for i, st := range stores {
		w, err := kv.Watch(wctx, st)
		if err != nil {
			m.stop()
			if fleetops.IsMaxConsumers(err) {
				return nil, fmt.Errorf("sweep memo: watch %s of store %s (watch %d of this process's %d): %w: the bucket's room for watches follows the stores set up in this account (8 each, at least 64, within the account's consumer limit): run `compactor setup` of this version with every store of the account, and raise the account's limit if setup warns that it is too low (compactor auth --max-consumers)",
					wire.BucketSweep, st, i+1, len(stores), err)
			}
			return nil, fmt.Errorf("sweep memo: watch %s of store %s: %w", wire.BucketSweep, st, err)
		}
		watchers = append(watchers, w)
	}
	var loaded, ended sync.WaitGroup
	for _, w := range watchers {
		loaded.Add(1)
		ended.Go(func() {
			initial := true
			for e := range w.Updates() {
				if e == nil {
					if initial {
						initial = false
						loaded.Done()
					}
					continue
				}
				m.apply(e, log)
			}
			if initial {
				loaded.Done()
			}
		})
	}
	go func() { loaded.Wait(); close(m.ready) }()
	go func() { ended.Wait(); close(m.done) }()
	select {
	case <-m.ready:
		return m, nil
	case <-ctx.Done():
		m.Close()
		return nil, fmt.Errorf("sweep memo: loading %s: %w", wire.BucketSweep, ctx.Err())
	}
}

func (m *Memo) apply(e jetstream.KeyValueEntry, log *slog.Logger) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.recs[e.Key()]; ok && cur.rev > e.Revision() {
		return // this process already stored something newer (see put)
	}
	if e.Operation() != jetstream.KeyValuePut {
		delete(m.recs, e.Key())
		return
	}
	if v, ok := fleetops.RecordV(e.Value()); ok && v > fleetops.SweepRecordV {
		m.recs[e.Key()] = memoEntry{rev: e.Revision(), newer: v}
		return
	}
	var rec Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		log.Debug("sweep memo: unreadable record ignored", "key", e.Key(), "err", err)
		delete(m.recs, e.Key())
		return
	}
	if store, _, _ := strings.Cut(e.Key(), "."); Key(store, rec.Path) != e.Key() {
		// A record whose path is not the one its key was made of: another file's record
		// (of this store, or naming another store's path) is never taken for this one's.
		delete(m.recs, e.Key())
		if m.onForeign != nil {
			m.onForeign(store, &fleetops.ForeignError{Kind: "sweep record", Where: wire.KVSubjectRoot + wire.BucketSweep + "." + e.Key(), Store: store, NamesStore: store,
				Session: e.Key(), NamesSession: rec.Path})
		}
		return
	}
	m.recs[e.Key()] = memoEntry{rec: rec, rev: e.Revision()}
}

// get is the memo's entry of a record's key.
func (m *Memo) get(key string) (memoEntry, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.recs[key]
	return e, ok
}

// Record is the record of key as the memo holds it (false: none, or one of a newer
// schema version).
func (m *Memo) Record(key string) (Record, bool) {
	e, ok := m.get(key)
	return e.rec, ok && e.newer == 0
}

// Put records what this process just wrote, ahead of the watcher.
func (m *Memo) Put(key string, rec Record, rev uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.recs[key]; !ok || cur.rev <= rev {
		m.recs[key] = memoEntry{rec: rec, rev: rev}
	}
}

// Under returns a copy of the entries of a store's records.
func (m *Memo) Under(store string) map[string]memoEntry {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := map[string]memoEntry{}
	for k, e := range m.recs {
		if strings.HasPrefix(k, store+".") {
			out[k] = e
		}
	}
	return out
}

// Forget drops a record's key.
func (m *Memo) Forget(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.recs, key)
}

// Close stops the watchers.
func (m *Memo) Close() {
	m.stop()
	select {
	case <-m.done: // the updates channel closes when the subscription does
	case <-time.After(2 * time.Second):
	}
}

// noteOutcome applies a job's final event to the record and reports whether it changed.
func (r *Record) noteOutcome(ev wire.Event, now time.Time, backoff func(n int) time.Duration) bool {
	old := *r
	switch {
	case ev.Outcome == outcome.Failed || (ev.Outcome == outcome.Skipped && ev.Busy):
		r.Misses++
		r.RetryAt = now.Add(backoff(r.Misses)).UTC()
		r.LastOutcome = string(ev.Outcome)
		if ev.Busy {
			r.LastOutcome = "busy"
		}
	default:
		r.Misses, r.RetryAt, r.LastOutcome = 0, time.Time{}, string(ev.Outcome)
	}
	return *r != old
}

// NoteOutcome tells the sweep records how a compact job ended, so that a later sweep knows
// whether to try the session again although its file is unchanged:
//
//   - failed (dead-lettered) or skipped busy: one more miss; retry after the backoff;
//   - done, superseded, or skipped for a reason that lasts (under budget, already
//     compacted, not v3): no retry until the file or the settings change.
//
// Only a session a sweep has seen has a record; the update is conditional on the record's
// revision, so a sweep writing at the same moment is never overwritten with stale data.
// Losing this note (NATS down) costs little: a sweep that enqueues sets a retry time
// ahead of the outcome (see the sweep's assess).
func NoteOutcome(ctx context.Context, log *slog.Logger, records *fleetops.Bucket, ev wire.Event, now time.Time, backoff func(n int) time.Duration) {
	if ev.Kind != wire.KindCompact || records == nil || ev.Path == "" || wire.ValidateStoreName(ev.Store) != nil {
		return
	}
	key := Key(ev.Store, ev.Path)
	for n := range 3 {
		if n > 0 && fleetops.AfterConflict(ctx, n) != nil {
			return
		}
		e, err := records.Get(ctx, key)
		if err != nil {
			if !errors.Is(err, jetstream.ErrKeyNotFound) {
				log.Debug("sweep memo: outcome not noted", "err", err)
			}
			return
		}
		if err := fleetops.NewerThan(wire.BucketSweep, key, e.Value(), fleetops.SweepRecordV); err != nil {
			log.Debug("sweep memo: outcome not noted", "err", err)
			return
		}
		var rec Record
		if json.Unmarshal(e.Value(), &rec) != nil || rec.Path != ev.Path {
			return
		}
		rec.V = fleetops.SweepRecordV
		if !rec.noteOutcome(ev, now, backoff) {
			return
		}
		b, err := json.Marshal(rec)
		if err != nil {
			return
		}
		if _, err = records.Update(ctx, key, b, e.Revision()); err == nil {
			if rec.Misses > 0 {
				log.Info("sweeps will try this session again", "path", ev.Path, "misses", rec.Misses, "retry_at", rec.RetryAt.Format(time.RFC3339))
			}
			return
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !fleetops.IsWrongLastSeq(err) {
			log.Debug("sweep memo: outcome not noted", "err", err)
			return
		}
	}
}
