package pipeline

import (
	"context"
	"time"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/sweep"
)

// Sweep walks every store (Pi's sessions/--<cwd>--/<ts>_<uuid>.jsonl layout and any other
// nested .jsonl), skips files unchanged since the last sweep and files modified within Idle,
// asks the Assessor about the rest and enqueues those over budget. It uses every core.
//
// "Unchanged" costs a stat and a lookup in the memo held in memory (loaded once per
// process by a watcher on COMPACTOR_SWEEP, see memo), never a NATS request per file. An
// unchanged file is read again when the settings that decide its budget changed, or when
// its last job failed or met a busy session (a turn in progress: it becomes compactable
// after --abandoned-after without changing) and its backoff has passed (SweepRetryBase
// doubling per miss up to SweepRetryMax).
// progress may be nil. Without progress, the stats are logged in one line at info level,
// with why nothing was enqueued when nothing was.
func (s *Service) Sweep(ctx context.Context, progress sweep.Progress) (sweep.Stats, error) {
	if s.cfg.Assessor == nil {
		return sweep.Stats{}, access.ConfigErrorf("Assessor", "required to sweep")
	}
	if err := s.Start(ctx); err != nil {
		return sweep.Stats{}, err
	}
	// A refusal ends the sweep at once, named (this user may not reach a store's keys).
	return access.Guard(ctx, s.nc, func(ctx context.Context) (sweep.Stats, error) { return s.sweep(ctx, progress) })
}

// sweepLoop runs Sweep every SweepEvery until ctx ends. The memo's watcher stays open
// between sweeps, so each one costs a walk and a stat per file.
func (s *Service) sweepLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.SweepEvery)
	defer t.Stop()
	for {
		if _, err := s.Sweep(ctx, nil); err != nil && ctx.Err() == nil {
			s.log.Error("sweep failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sweep is one sweep of the service's stores.
func (s *Service) sweep(ctx context.Context, progress sweep.Progress) (sweep.Stats, error) {
	if s.cfg.Assessor == nil {
		return sweep.Stats{}, access.ConfigErrorf("Assessor", "required to sweep")
	}
	if err := s.Start(ctx); err != nil {
		return sweep.Stats{}, err
	}
	start := time.Now()
	m, err := s.sweepMemo(ctx)
	if err != nil {
		return sweep.Stats{}, err
	}
	env := &sweep.Env{Started: start, JS: s.res.js, Records: s.res.sweep, Stores: storeNames(s.cfg.Stores), Roots: s.roots, Assessor: s.cfg.Assessor,
		Idle: s.cfg.Idle, Backoff: s.sweepBackoff, MarkerTTL: s.cfg.sweepMarkerTTL, Now: s.cfg.sweepNow(), Log: s.log, Swept: s.m.swept, SayEvery: s.sayEvery}
	return sweep.Run(ctx, env, m, progress)
}
