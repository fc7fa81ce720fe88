package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/agents"
	"github.com/compactor-dev/compactor/storepath"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The workers' start and their two-stage stop: metrics, the hook and bridge listeners, one
// fetch loop per store, which hands each fetched message to a job goroutine (delivery.go);
// at the stop, fetching ends first, then running jobs get ShutdownTimeout before they are
// cancelled and given back.

// shutdownGrace is what the bookkeeping of cancelled jobs (give-back, lease release) gets
// after ShutdownTimeout, when NATS does not answer; and again for handlers deaf to their
// context, which are then left behind.
const shutdownGrace = time.Second

// startWorkers starts metrics, the hook and bridge listeners and one fetch loop per store,
// all ending with ctx. The returned stop waits for them and for running jobs (the two-stage
// shutdown), but not for a job left behind (Run says which).
func (s *Service) startWorkers(ctx context.Context) (stop func(), err error) {
	if s.cfg.Client {
		return nil, access.ConfigErrorf("Client", "a client runs no workers")
	}
	s.draining.Store(false)
	jobCtx, cancelJobs := context.WithCancel(context.WithoutCancel(ctx))
	answerCtx, cancelAnswers := context.WithCancel(context.WithoutCancel(ctx))
	w := &workersStop{cancelJobs: cancelJobs, cancelAnswers: cancelAnswers, bg: &tasks{}}
	undo := func(err error) (func(), error) {
		w.unsubscribe()
		cancelJobs()
		cancelAnswers()
		return nil, err
	}
	if w.subs, err = s.startListeners(ctx, w.bg); err != nil {
		return undo(err)
	}
	if w.stopMetrics, err = s.startMetrics(ctx); err != nil {
		return undo(err)
	}
	jc := jobContexts{handlers: jobCtx, answers: answerCtx}
	for _, st := range s.cfg.Stores {
		w.loops.Go(func() { s.fetchLoop(ctx, jc, st.Name) })
	}
	w.stopBeats = s.beatServing(answerCtx)
	return func() { s.stopWorkers(w) }, nil
}

// workersStop is what stopWorkers ends: the two job contexts, the fetch loops, the beats,
// the listeners, their tasks and the metrics server.
type workersStop struct {
	cancelJobs, cancelAnswers context.CancelFunc
	loops                     sync.WaitGroup
	stopBeats, stopMetrics    func()
	subs                      []*nats.Subscription
	bg                        *tasks
}

func (w *workersStop) unsubscribe() {
	for _, sub := range w.subs {
		_ = sub.Unsubscribe()
	}
}

// startListeners subscribes to the hook reports and the bridge requests of the stores, and
// has the server confirm them before the fetch loops start (and /readyz says ready): a hook
// report or a bridge request sent after that reaches them. When NATS is away the client
// registers them again as it reconnects; the worker does not wait for that.
func (s *Service) startListeners(ctx context.Context, bg *tasks) ([]*nats.Subscription, error) {
	env := s.agentsEnv(bg)
	subs, err := agents.WatchHookReports(env)
	if err == nil {
		var bridges []*nats.Subscription
		bridges, err = agents.ServeBridges(ctx, env)
		subs = append(subs, bridges...)
	}
	if err != nil {
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
		return nil, err
	}
	fctx, cancelFlush := context.WithTimeout(ctx, 10*time.Second)
	if ferr := s.nc.FlushWithContext(fctx); ferr != nil {
		s.log.Warn("hook and bridge listeners not confirmed by NATS; they are registered as it reconnects", "err", ferr)
	}
	cancelFlush()
	return subs, nil
}

// startMetrics starts the metrics server (when configured). It outlives ctx: it serves
// through the drain (/readyz says draining); the returned stop ends it and waits for it.
func (s *Service) startMetrics(ctx context.Context) (stop func(), err error) {
	metricsCtx, stopMetrics := context.WithCancel(context.WithoutCancel(ctx))
	if s.cfg.MetricsAddr == "" {
		return stopMetrics, nil
	}
	addr, wait, err := serveMetrics(metricsCtx, s.cfg.MetricsAddr, s.m.reg, s.healthy, s.ready, s.log, s.cfg.HTTPHandler, s.cfg.MetricsToken)
	if err != nil {
		stopMetrics()
		return nil, err
	}
	s.mu.Lock()
	s.metrics = addr
	s.mu.Unlock()
	s.log.Info("metrics listening", "addr", addr.String())
	return func() {
		stopMetrics()
		wait()
	}, nil
}

// stopWorkers is the two-stage shutdown: no more fetches; the jobs running may finish
// within the drain limit, then their handlers are cancelled, and shutdownGrace later their
// answers to NATS; a job that does not end even then is left behind, named.
func (s *Service) stopWorkers(w *workersStop) {
	t0 := time.Now()
	s.draining.Store(true)
	drain := s.drainTimeout()
	if n := s.running.count(); n > 0 {
		s.log.Info("stopping: no more fetches; the summaries in flight may finish, jobs that have not started one are handed back",
			"in_flight", n, "drain_timeout_s", seconds(drain))
	}
	stage2 := time.AfterFunc(drain, func() {
		if n := s.running.count(); n > 0 {
			s.log.Warn("drain limit reached: cancelling running jobs; they are handed back", "in_flight", n,
				"drain_timeout_s", seconds(drain))
		}
		w.cancelJobs()
	})
	hard := time.AfterFunc(drain+shutdownGrace, w.cancelAnswers)
	w.loops.Wait() // stage 1: no more fetches (ctx is done)
	w.stopBeats()
	select {
	case <-s.running.empty():
	case <-time.After(time.Until(t0.Add(drain + 2*shutdownGrace))):
		s.leaveBehind()
	}
	stage2.Stop()
	hard.Stop()
	w.cancelJobs()
	w.cancelAnswers()
	w.unsubscribe()
	w.bg.closeAndWait()
	w.stopMetrics()
	s.log.Info("workers stopped", "shutdown_s", seconds(time.Since(t0)))
}

// leaveBehind names the jobs that did not end when cancelled.
func (s *Service) leaveBehind() {
	left := s.running.list()
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

const fetchWait = time.Second

// fetchLoop pulls from one store's consumer only as many messages as it has free slots, so
// a fetched message is never left waiting (its AckWait ticking) for a slot.
func (s *Service) fetchLoop(ctx context.Context, jc jobContexts, store string) {
	cons := s.res.cons[store]
	perStore := max(1, s.cfg.Concurrency/len(s.cfg.Stores))
	s.loops.set(store, func(st *loopState) { st.running, st.lastOK = true, time.Now() })
	defer s.loops.set(store, func(st *loopState) { st.running = false })
	for {
		if !s.waitUnpaused(ctx, store) {
			return
		}
		ok, paused := s.awaitSlot(ctx, store)
		if !ok {
			return
		}
		if paused {
			continue
		}
		n := 1 + s.moreSlots(perStore-1)
		batch, err := cons.Fetch(n, jetstream.FetchMaxWait(fetchWait))
		got := 0
		if err == nil {
			got = s.startBatch(ctx, jc, store, batch)
			err = batch.Error()
		}
		for range n - got {
			<-s.sem
		}
		s.loops.fetched(store, err)
		if !s.afterFetch(ctx, store, err) {
			return
		}
	}
}

// awaitSlot takes a job slot for store: ok is false when ctx ended first. A pause that came
// while every slot was busy gives the slot back unused (paused; the record read again when
// the wait outlasted the last read).
func (s *Service) awaitSlot(ctx context.Context, store string) (ok, paused bool) {
	s.loops.set(store, func(st *loopState) { st.waiting = true })
	waitStart := time.Now()
	select {
	case <-ctx.Done():
		return false, false
	case s.sem <- struct{}{}:
	}
	s.loops.set(store, func(st *loopState) { st.waiting = false })
	if ctx.Err() != nil { // a free slot and the end were both ready: select picks either
		<-s.sem
		return false, false
	}
	maxAge := pauseCheckEvery
	if time.Since(waitStart) >= pauseCheckEvery {
		maxAge = 0
	}
	if s.pausedWithin(ctx, store, maxAge) != nil {
		<-s.sem
		return true, true
	}
	return true, false
}

// moreSlots takes up to n more free slots without waiting, and says how many it took.
func (s *Service) moreSlots(n int) int {
	took := 0
	for took < n {
		select {
		case s.sem <- struct{}{}:
			took++
		default:
			return took
		}
	}
	return took
}

// startBatch starts a goroutine for each fetched message (each holds one of the slots taken
// for the fetch), and says how many messages came. One fetched as the stop began is handed
// back at once, not after AckWait.
func (s *Service) startBatch(ctx context.Context, jc jobContexts, store string, batch jetstream.MessageBatch) (got int) {
	for msg := range batch.Messages() {
		got++
		if ctx.Err() != nil {
			s.m.handedBack.WithLabelValues(store, handBackShutdown).Inc()
			answered(s.log.With("store", store, "subject", msg.Subject()), slog.LevelWarn, "nak failed", msg.Nak())
			<-s.sem
			continue
		}
		f := s.running.add(store, msg.Subject())
		s.m.inFlight.Inc()
		go func() {
			defer func() {
				s.m.inFlight.Dec()
				<-s.sem
				s.running.done(f)
			}()
			s.process(jc, f, store, msg)
		}()
	}
	return got
}

// afterFetch logs a fetch that failed (a fetch that waited for nothing did not) and waits a
// moment before the next; false: ctx ended, the loop stops.
func (s *Service) afterFetch(ctx context.Context, store string, err error) bool {
	if err == nil || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if ctx.Err() != nil {
		return false
	}
	s.log.Warn("fetch failed", "store", store, "err", err)
	select {
	case <-ctx.Done():
		return false
	case <-time.After(500 * time.Millisecond):
		return true
	}
}

// waitUnpaused returns once store is not paused (true) or ctx ends (false).
func (s *Service) waitUnpaused(ctx context.Context, store string) bool {
	for s.paused(ctx, store) != nil {
		s.pauses.held.Add(1)
		s.loops.set(store, func(st *loopState) { st.paused, st.lastOK = true, time.Now() })
		select {
		case <-ctx.Done():
			return false
		case <-time.After(pauseCheckEvery / 4):
		}
	}
	s.loops.set(store, func(st *loopState) { st.paused = false })
	return true
}

// agentsEnv is what the hook and bridge listeners work with (package agents).
func (s *Service) agentsEnv(bg *tasks) *agents.Env {
	env := &agents.Env{NC: s.nc, Stores: storeNames(s.cfg.Stores), Bridger: s.cfg.Bridger, Reg: s.m.reg, CountPiUnknown: s.m.countPiUnknown,
		Foreign: s.foreign, Log: s.log, Go: bg.goTask,
		Resolve: func(store, rel string) (string, error) { return storepath.Resolve(s.roots[store], rel) }}
	if s.res != nil {
		env.Prepared = s.res.prepared
	}
	return env
}

// Prepared is the store of prepared summaries (nil before Start).
func (s *Service) Prepared() agents.PreparedStore {
	if s.res == nil || s.res.prepared == nil {
		return nil
	}
	return agents.NewPreparedStore(s.res.prepared, s.log)
}
