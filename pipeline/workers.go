package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"slices"
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
			if n := s.flights.count(); n > 0 {
				s.log.Warn("shutdown timeout: cancelling running jobs; they are given back", "in_flight", n)
			}
			cancelJobs()
		})
		hard := time.AfterFunc(s.cfg.ShutdownTimeout+shutdownGrace, cancelBook)
		loops.Wait() // stage 1: no more fetches (ctx is done)
		stopBeats()
		select {
		case <-s.flights.empty():
		case <-time.After(time.Until(t0.Add(s.cfg.ShutdownTimeout + 2*shutdownGrace))):
			left := s.flights.list()
			s.log.Error("jobs did not end when cancelled; leaving them behind", "in_flight", len(left))
			for _, f := range left {
				log := f.log
				if log == nil { // not admitted yet
					log = s.log.With("store", f.store, "subject", f.subject)
				}
				log.Error("job left behind at shutdown: it did not end when cancelled", "path", f.path,
					"running_s", seconds(time.Since(f.since)))
			}
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

// flights holds this worker's jobs from their fetch to the end of their goroutine: the
// shutdown waits for it to empty, and names the jobs still in it when it does not.
type flights struct {
	mu   sync.Mutex
	jobs map[*flight]struct{}
	none chan struct{} // closed while jobs is empty
}

// flight is one job in flight, as far as it is known: fetched (its store and subject), then
// admitted (its logger, with the job's identity, and its path).
type flight struct {
	store, subject string
	since          time.Time
	log            *slog.Logger // nil until admitted
	path           string
}

func newFlights() *flights {
	none := make(chan struct{})
	close(none)
	return &flights{jobs: map[*flight]struct{}{}, none: none}
}

func (fs *flights) add(store, subject string) *flight {
	f := &flight{store: store, subject: subject, since: time.Now()}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if len(fs.jobs) == 0 {
		fs.none = make(chan struct{})
	}
	fs.jobs[f] = struct{}{}
	return f
}

// admitted names the job of f once admission knows it: log carries its identity.
func (fs *flights) admitted(f *flight, log *slog.Logger, path string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f.log, f.path = log, path
}

func (fs *flights) done(f *flight) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	delete(fs.jobs, f)
	if len(fs.jobs) == 0 {
		close(fs.none)
	}
}

func (fs *flights) count() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.jobs)
}

// empty is closed once no job is in flight (at once if none is).
func (fs *flights) empty() <-chan struct{} {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.none
}

// list is a copy of the jobs in flight, the longest running first.
func (fs *flights) list() []flight {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := make([]flight, 0, len(fs.jobs))
	for f := range fs.jobs {
		out = append(out, *f)
	}
	slices.SortFunc(out, func(a, b flight) int { return a.since.Compare(b.since) })
	return out
}

func seconds(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }
