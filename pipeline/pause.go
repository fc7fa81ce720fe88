package pipeline

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
)

// pauseCheckEvery is how often a worker reads its stores' pause records: a pause stops its
// fetches within this plus one fetch's wait (fetchWait).
const pauseCheckEvery = time.Second

// pauses is what a worker last read of its stores' pause records.
type pauses struct {
	mu sync.Mutex
	st map[string]*pauseState
	// held counts the fetch loops' turns spent paused (a test waits for some).
	held atomic.Uint64
}

type pauseState struct {
	at     time.Time             // when it was read last
	rec    *fleetops.PauseRecord // nil: not paused
	logged bool                  // the pause was logged
}

// paused reports whether store is paused, reading its record at most every
// pauseCheckEvery. A record that cannot be read leaves the last answer (a worker that lost
// NATS fetches nothing anyway).
func (s *Service) paused(ctx context.Context, store string) *fleetops.PauseRecord {
	return s.pausedWithin(ctx, store, pauseCheckEvery)
}

// pausedWithin is paused with an answer at most maxAge old.
func (s *Service) pausedWithin(ctx context.Context, store string, maxAge time.Duration) *fleetops.PauseRecord {
	p := &s.pauses
	p.mu.Lock()
	if p.st == nil {
		p.st = map[string]*pauseState{}
	}
	st := p.st[store]
	if st == nil {
		st = &pauseState{}
		p.st[store] = st
	}
	if time.Since(st.at) < maxAge {
		defer p.mu.Unlock()
		return st.rec
	}
	p.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	rec, err := fleetops.ReadPaused(rctx, s.nc, store)
	cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil && s.sayEvery("pause-read-"+store, time.Minute) {
			s.log.Warn("cannot read the store's pause record; keeping the last answer", "store", store, "err", err)
		}
		st.at = time.Now()
		return st.rec
	}
	if rec != nil && !rec.Paused {
		rec = nil
	}
	switch {
	case rec != nil && !st.logged:
		s.log.Warn("store paused: taking no more jobs; the jobs held run to their end, the queue keeps the rest",
			"store", store, "by", rec.By, "reason", rec.Reason, "since", rec.At)
		st.logged = true
	case rec == nil && st.logged:
		s.log.Info("store resumed: taking jobs again", "store", store)
		st.logged = false
	}
	st.at, st.rec = time.Now(), rec
	v := 0.0
	if rec != nil {
		v = 1
	}
	s.m.paused.WithLabelValues(store).Set(v)
	return rec
}

// pausedNow is the last answer of paused, without reading the record.
func (s *Service) pausedNow(store string) *fleetops.PauseRecord {
	s.pauses.mu.Lock()
	defer s.pauses.mu.Unlock()
	if st := s.pauses.st[store]; st != nil {
		return st.rec
	}
	return nil
}
