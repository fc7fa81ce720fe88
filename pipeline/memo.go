package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// memo is this process's copy of its stores' part of COMPACTOR_SWEEP, so a sweep decides
// "unchanged" with a stat and a map lookup instead of one NATS round trip per file. It is
// loaded by one KV watcher per store (each of the store's keys only, as a store's worker
// may watch), started at the first sweep and kept until Close: a watcher delivers every
// record once, then every later write by any process (other sweepers, the workers that
// note job outcomes). A copy a moment behind is harmless: a record it lacks only makes
// the sweep read that file again.
type memo struct {
	mu    sync.RWMutex
	recs  map[string]memoEntry // by KV key
	ready chan struct{}        // closed when the initial values are in
	stop  func()
	done  chan struct{}
	// onForeign is told of a record refused because its path is not its key's (foreign.go).
	onForeign func(store string, err error)
}

type memoEntry struct {
	rec sweepRecord
	rev uint64
	// newer is the schema version of a record this version cannot read (0: it can): the
	// file is left to the newer compactor's sweeps.
	newer int
}

// openMemo starts the stores' watchers and returns once they have delivered every current
// record (or ctx ends).
func openMemo(ctx context.Context, kv *kvBucket, stores []Store, log *slog.Logger, onForeign func(store string, err error)) (*memo, error) {
	// The watchers outlive this call (they follow later writes): their context is the memo's.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m := &memo{recs: map[string]memoEntry{}, ready: make(chan struct{}), done: make(chan struct{}), onForeign: onForeign}
	var watchers []*kvWatcher
	m.stop = func() {
		for _, w := range watchers {
			_ = w.Stop()
		}
		cancel()
	}
	for _, st := range stores {
		w, err := kv.Watch(wctx, st.Name)
		if err != nil {
			m.stop()
			return nil, fmt.Errorf("sweep memo: watch %s of store %s: %w", BucketSweep, st.Name, err)
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
		m.close()
		return nil, fmt.Errorf("sweep memo: loading %s: %w", BucketSweep, ctx.Err())
	}
}

func (m *memo) apply(e jetstream.KeyValueEntry, log *slog.Logger) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.recs[e.Key()]; ok && cur.rev > e.Revision() {
		return // this process already stored something newer (see put)
	}
	if e.Operation() != jetstream.KeyValuePut {
		delete(m.recs, e.Key())
		return
	}
	if v, ok := recordV(e.Value()); ok && v > sweepRecordV {
		m.recs[e.Key()] = memoEntry{rev: e.Revision(), newer: v}
		return
	}
	var rec sweepRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		log.Debug("sweep memo: unreadable record ignored", "key", e.Key(), "err", err)
		delete(m.recs, e.Key())
		return
	}
	if store, _, _ := strings.Cut(e.Key(), "."); sweepKey(store, rec.Path) != e.Key() {
		// A record whose path is not the one its key was made of: another file's record
		// (of this store, or naming another store's path) is never taken for this one's.
		delete(m.recs, e.Key())
		if m.onForeign != nil {
			m.onForeign(store, &ForeignError{Kind: "sweep record", Where: wire.KVSubjectRoot + BucketSweep + "." + e.Key(), Store: store, NamesStore: store,
				Session: e.Key(), NamesSession: rec.Path})
		}
		return
	}
	m.recs[e.Key()] = memoEntry{rec: rec, rev: e.Revision()}
}

func (m *memo) get(key string) (memoEntry, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.recs[key]
	return e, ok
}

// put records what this process just wrote, ahead of the watcher.
func (m *memo) put(key string, rec sweepRecord, rev uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.recs[key]; !ok || cur.rev <= rev {
		m.recs[key] = memoEntry{rec: rec, rev: rev}
	}
}

// under returns a copy of the entries of a store's records.
func (m *memo) under(store string) map[string]memoEntry {
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

func (m *memo) forget(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.recs, key)
}

func (m *memo) close() {
	m.stop()
	select {
	case <-m.done: // the updates channel closes when the subscription does
	case <-time.After(2 * time.Second):
	}
}

// sweepMemo returns the service's memo, opening it at the first call.
func (s *Service) sweepMemo(ctx context.Context) (*memo, error) {
	s.memoMu.Lock()
	defer s.memoMu.Unlock()
	if s.memo != nil {
		return s.memo, nil
	}
	m, err := openMemo(ctx, s.res.sweep, s.cfg.Stores, s.log, func(store string, err error) { s.foreign(store, foreignSweep, err) })
	if err != nil {
		return nil, err
	}
	s.memo = m
	return m, nil
}

func (s *Service) closeMemo() {
	s.memoMu.Lock()
	defer s.memoMu.Unlock()
	if s.memo != nil {
		s.memo.close()
		s.memo = nil
	}
}

// SweepBackoff is how long a sweep waits before it enqueues a session again whose jobs
// ended failed or busy n times in a row (n ≥ 1): base·2^(n-1), capped at max.
func SweepBackoff(n int, base, max time.Duration) time.Duration { return RedeliveryDelay(n, base, max) }

// noteOutcome tells the sweep memo how a compact job ended, so that a later sweep knows
// whether to try the session again although its file is unchanged:
//
//   - failed (dead-lettered) or skipped busy: one more miss; retry after the backoff;
//   - done, superseded, or skipped for a reason that lasts (under budget, already
//     compacted, not v3): no retry until the file or the settings change.
//
// Only a session a sweep has seen has a record; the update is conditional on the record's
// revision, so a sweep writing at the same moment is never overwritten with stale data.
// Losing this note (NATS down) costs little: a sweep that enqueues sets a retry time
// ahead of the outcome (see sweepOne).
func (s *Service) noteOutcome(ctx context.Context, log *slog.Logger, ev wire.Event) {
	if ev.Kind != wire.KindCompact || s.res == nil || ev.Path == "" || wire.ValidateStoreName(ev.Store) != nil {
		return
	}
	key := sweepKey(ev.Store, ev.Path)
	for range 3 {
		e, err := s.res.sweep.Get(ctx, key)
		if err != nil {
			if !errors.Is(err, jetstream.ErrKeyNotFound) {
				log.Debug("sweep memo: outcome not noted", "err", err)
			}
			return
		}
		if err := newerThan(BucketSweep, key, e.Value(), sweepRecordV); err != nil {
			log.Debug("sweep memo: outcome not noted", "err", err)
			return
		}
		var rec sweepRecord
		if json.Unmarshal(e.Value(), &rec) != nil || rec.Path != ev.Path {
			return
		}
		rec.V = sweepRecordV
		if !rec.noteOutcome(ev, s.cfg.sweepNow(), s.cfg.SweepRetryBase, s.cfg.SweepRetryMax) {
			return
		}
		b, err := json.Marshal(rec)
		if err != nil {
			return
		}
		if _, err = s.res.sweep.Update(ctx, key, b, e.Revision()); err == nil {
			if rec.Misses > 0 {
				log.Info("sweeps will try this session again", "path", ev.Path, "misses", rec.Misses, "retry_at", rec.RetryAt.Format(time.RFC3339))
			}
			return
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !isWrongLastSeq(err) {
			log.Debug("sweep memo: outcome not noted", "err", err)
			return
		}
	}
}

// noteOutcome applies a job's final event to the record and reports whether it changed.
func (r *sweepRecord) noteOutcome(ev wire.Event, now time.Time, base, max time.Duration) bool {
	old := *r
	switch {
	case ev.Outcome == OutcomeFailed || (ev.Outcome == OutcomeSkipped && ev.Busy):
		r.Misses++
		r.RetryAt = now.Add(SweepBackoff(r.Misses, base, max)).UTC()
		r.LastOutcome = string(ev.Outcome)
		if ev.Busy {
			r.LastOutcome = "busy"
		}
	default:
		r.Misses, r.RetryAt, r.LastOutcome = 0, time.Time{}, string(ev.Outcome)
	}
	return *r != old
}
