package pipeline

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// The workers' start and their two-stage stop: metrics, the advisory and hook listeners, one
// fetch loop per store; at the stop, fetching ends first, then running jobs get
// ShutdownTimeout before they are cancelled and given back.

// shutdownGrace is what the bookkeeping of cancelled jobs (give-back, lease release) gets
// after ShutdownTimeout, when NATS does not answer; and again for handlers deaf to their
// context, which are then left behind.
const shutdownGrace = time.Second

// work holds the two contexts of running jobs: handlers end with jobs (stage two of a
// shutdown); the answers to JetStream, events and leases use book, which ends
// shutdownGrace later so that a NATS outage cannot hold a shutdown.
type work struct {
	jobs, book context.Context
}

// startWorkers starts metrics, the max-deliveries advisory listener and one fetch loop per
// store, all ending with ctx. The returned stop waits for them and for running jobs (the
// two-stage shutdown).
func (s *Service) startWorkers(ctx context.Context) (stop func(), err error) {
	if s.cfg.Client {
		return nil, errors.New("config: Client: a client runs no workers")
	}
	jobCtx, cancelJobs := context.WithCancel(context.WithoutCancel(ctx))
	bookCtx, cancelBook := context.WithCancel(context.WithoutCancel(ctx))
	w := work{jobs: jobCtx, book: bookCtx}
	bg := &tasks{}
	subs, err := s.watchMaxDeliveries(bookCtx, bg)
	if err == nil {
		var hooks []*nats.Subscription
		hooks, err = s.watchHookReports()
		subs = append(subs, hooks...)
	}
	if err == nil {
		var bridges []*nats.Subscription
		bridges, err = s.serveBridges(bg)
		subs = append(subs, bridges...)
	}
	if err != nil {
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
		cancelJobs()
		cancelBook()
		return nil, err
	}
	waitMetrics := func() {}
	if s.cfg.MetricsAddr != "" {
		addr, wait, err := serveMetrics(ctx, s.cfg.MetricsAddr, s.m.reg, s.healthy, s.log)
		if err != nil {
			for _, sub := range subs {
				_ = sub.Unsubscribe()
			}
			cancelJobs()
			cancelBook()
			return nil, err
		}
		waitMetrics = wait
		s.mu.Lock()
		s.metrics = addr
		s.mu.Unlock()
		s.log.Info("metrics listening", "addr", addr.String())
	}
	var loops sync.WaitGroup
	for _, st := range s.cfg.Stores {
		loops.Go(func() { s.fetchLoop(ctx, w, st.Name) })
	}
	stopBeats := s.beatServing(bookCtx)
	return func() {
		t0 := time.Now()
		stage2 := time.AfterFunc(s.cfg.ShutdownTimeout, func() {
			if n := s.inflight.Load(); n > 0 {
				s.log.Warn("shutdown timeout: cancelling running jobs; they are given back", "in_flight", n)
			}
			cancelJobs()
		})
		hard := time.AfterFunc(s.cfg.ShutdownTimeout+shutdownGrace, cancelBook)
		loops.Wait() // stage 1: no more fetches (ctx is done)
		stopBeats()
		done := make(chan struct{})
		go func() { s.jobs.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Until(t0.Add(s.cfg.ShutdownTimeout + 2*shutdownGrace))):
			s.log.Error("jobs did not end when cancelled; leaving them behind", "in_flight", s.inflight.Load())
		}
		stage2.Stop()
		hard.Stop()
		cancelJobs()
		cancelBook()
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
		bg.closeAndWait()
		waitMetrics()
		s.log.Info("workers stopped", "shutdown_s", seconds(time.Since(t0)))
	}, nil
}

// tasks is a WaitGroup that refuses new tasks once closed: a NATS callback racing the
// shutdown cannot start work after the shutdown waited for it.
type tasks struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func (t *tasks) goTask(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed {
		t.wg.Go(f)
	}
}

func (t *tasks) closeAndWait() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.wg.Wait()
}

func seconds(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }
