package pipeline

import (
	"context"
	"log/slog"
	"time"

	"github.com/compactor-dev/compactor/sweep"
	"github.com/compactor-dev/compactor/wire"
)

// The sweeps' side of a service: the memo of its stores' records, opened at the first
// sweep, and the outcome of each compact job noted in the session's record.

// sweepMemo returns the service's memo, opening it at the first call.
func (s *Service) sweepMemo(ctx context.Context) (*sweep.Memo, error) {
	s.memoMu.Lock()
	defer s.memoMu.Unlock()
	if s.memo != nil {
		return s.memo, nil
	}
	m, err := sweep.OpenMemo(ctx, s.res.sweep, storeNames(s.cfg.Stores), s.log, func(store string, err error) { s.foreign(store, foreignSweep, err) })
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
		s.memo.Close()
		s.memo = nil
	}
}

// SweepBackoff is how long a sweep waits before it enqueues a session again whose jobs
// ended failed or busy n times in a row (n ≥ 1): base·2^(n-1), capped at max.
func SweepBackoff(n int, base, max time.Duration) time.Duration { return RedeliveryDelay(n, base, max) }

// noteOutcome notes a compact job's final event in its session's sweep record
// (sweep.NoteOutcome).
func (s *Service) noteOutcome(ctx context.Context, log *slog.Logger, ev wire.Event) {
	if s.res == nil {
		return
	}
	sweep.NoteOutcome(ctx, log, s.res.sweep, ev, s.cfg.sweepNow(), s.sweepBackoff)
}

// sweepBackoff is SweepBackoff with the service's base and max.
func (s *Service) sweepBackoff(n int) time.Duration {
	return SweepBackoff(n, s.cfg.SweepRetryBase, s.cfg.SweepRetryMax)
}

// storeNames are the stores' names.
func storeNames(stores []Store) []string {
	names := make([]string, len(stores))
	for i, st := range stores {
		names[i] = st.Name
	}
	return names
}
