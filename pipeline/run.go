package pipeline

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/compactor-dev/compactor/access"
)

// Running: Run (until its context ends) and RunOnce (until the queue is empty), both on the
// workers of workers.go.

// Run works jobs until ctx ends, then shuts down in two stages: it stops fetching, lets
// running jobs finish within ShutdownTimeout, and then cancels the rest, which are given
// back (Nak) for another worker. With SweepEvery set it also sweeps periodically.
//
// Run returns at most ShutdownTimeout + 2s after ctx ended, even when NATS is unreachable.
// Every goroutine it started has ended by then, except those of a job that has not ended
// 2s (twice shutdownGrace) after stage two cancelled it, because its handler ignores its
// context: Run names each such job in an error log line ("job left behind at shutdown",
// with its store, session, kind, job_seq and path) and returns without it. That job's
// goroutines run on until its handler returns (in compactor run, the process exits
// first); they cannot finish the job then (its contexts have ended: the ack, the event and
// the lease's release fail at once), and the job is delivered again: after AckWait at the
// latest, sooner if a Nak of its still reaches NATS.
func (s *Service) Run(ctx context.Context) error {
	if s.cfg.Handler == nil {
		return access.ConfigErrorf("Handler", "required to run workers")
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	stop, err := s.startWorkers(ctx)
	if err != nil {
		return err
	}
	var sweeps sync.WaitGroup
	if s.cfg.SweepEvery > 0 && s.cfg.Assessor != nil {
		idle := "none"
		if s.cfg.Idle > 0 {
			idle = s.cfg.Idle.String()
		}
		s.log.Info("sweeping the stores periodically: sessions over their budget are enqueued; those modified within the idle threshold are left alone until idle",
			"sweep_every_s", seconds(s.cfg.SweepEvery), "idle", idle)
		sweeps.Go(func() { s.sweepLoop(ctx) })
	} else {
		s.log.Info("no periodic sweep (--sweep-every 0): only jobs enqueued by agents, `compactor enqueue` or `compactor sweep` are worked")
	}
	<-ctx.Done()
	stop()
	sweeps.Wait()
	return nil
}

// RunOnce sweeps the stores (when an Assessor is configured), then works until no job of
// its stores is left in COMPACTOR_JOBS and nothing is in flight (delayed retries included),
// and returns a report of the jobs this worker finished. Jobs it handed back for a reason
// that lasts (a spend limit, a job version it does not work) are left queued: it does not
// wait for them, and says how many there are.
func (s *Service) RunOnce(ctx context.Context) (*Report, error) {
	if s.cfg.Handler == nil {
		return nil, access.ConfigErrorf("Handler", "required to run workers")
	}
	start := time.Now()
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.recording, s.rows = true, nil
	s.mu.Unlock()
	rep := &Report{Counts: map[Outcome]int{}}
	if s.cfg.Assessor != nil {
		st, err := s.Sweep(ctx, s.cfg.Progress)
		if err != nil {
			return nil, err
		}
		rep.Sweep = &st
	}
	wctx, stopFetch := context.WithCancel(ctx)
	defer stopFetch()
	stop, err := s.startWorkers(wctx)
	if err != nil {
		return nil, err
	}
	idle := 0
	tick := time.NewTicker(100 * time.Millisecond)
	var werr error
	for idle < 3 {
		select {
		case <-ctx.Done():
			werr = ctx.Err()
			idle = 3
			continue
		case <-tick.C:
		}
		n, err := pendingJobs(ctx, s.res.cons, s.cfg.Stores)
		if err != nil {
			s.log.Warn("cannot count pending jobs", "err", err)
			continue
		}
		if s.running.count() == 0 && (n == 0 || n <= uint64(s.heldQueued(ctx))) {
			idle++
		} else {
			idle = 0
		}
	}
	tick.Stop()
	if k := s.heldQueued(ctx); k > 0 && werr == nil {
		s.log.Warn("jobs left queued: a spend limit holds them, or no worker here works their job version", "jobs", k)
	}
	stopFetch()
	stop()
	s.mu.Lock()
	rep.Rows, s.recording = s.rows, false
	s.rows = nil
	s.mu.Unlock()
	sort.SliceStable(rep.Rows, func(i, j int) bool {
		if rep.Rows[i].Store != rep.Rows[j].Store {
			return rep.Rows[i].Store < rep.Rows[j].Store
		}
		return rep.Rows[i].Path < rep.Rows[j].Path
	})
	for _, row := range rep.Rows {
		rep.Counts[row.Outcome]++
	}
	rep.Duration = time.Since(start)
	return rep, werr
}
