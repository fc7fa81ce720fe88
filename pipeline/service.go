package pipeline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Service is a compactor worker: it owns a NATS connection (and, without a URL, an embedded
// server on a locked data directory), the JetStream resources, and a bounded pool of job
// handlers.
type Service struct {
	cfg    Config
	log    *slog.Logger
	roots  map[string]string // store name → real root
	worker string

	startOnce sync.Once
	startErr  error
	ns        *server.Server
	dd        *dataDir // the locked data directory of the embedded server
	nc        *nats.Conn
	server    atomic.Pointer[string] // the NATS server last connected to, for disconnect logs
	res       *resources
	m         *metrics
	memoMu    sync.Mutex
	memo      *memo // COMPACTOR_SWEEP in memory, from the first sweep on

	sem      chan struct{}
	inflight atomic.Int64
	jobs     sync.WaitGroup

	mu        sync.Mutex
	recording bool
	rows      []ReportRow
	metrics   net.Addr
}

// New validates cfg and prepares a Service; nothing is started until Start, Run or RunOnce.
func New(cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Service{cfg: cfg, log: cfg.Logger, roots: map[string]string{}, m: newMetrics(), sem: make(chan struct{}, cfg.Concurrency)}
	for _, st := range cfg.Stores {
		root, err := rootOf(st)
		if err != nil {
			return nil, fmt.Errorf("config: Stores: %w", err)
		}
		s.roots[st.Name] = root
	}
	host, _ := os.Hostname()
	var b [3]byte
	_, _ = rand.Read(b[:])
	s.worker = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	return s, nil
}

// Config returns the effective configuration (defaults applied).
func (s *Service) Config() Config { return s.cfg }

// WorkerID names this worker in leases, events and dead letters.
func (s *Service) WorkerID() string { return s.worker }

// Start connects to NATS (starting the embedded server when no URL is configured) and
// creates or updates the streams, buckets and consumers, retrying within StartupTimeout
// while JetStream is not ready. It is idempotent.
func (s *Service) Start(ctx context.Context) error {
	s.startOnce.Do(func() { s.startErr = s.start(ctx) })
	return s.startErr
}

func (s *Service) start(ctx context.Context) error {
	nc := s.cfg.NATS
	if nc.URL == "" {
		url, err := s.embedded()
		if err != nil {
			return err
		}
		nc.URL = url
	}
	if nc.Name == "" {
		nc.Name = "compactor " + s.worker
	}
	conn, err := nc.Connect(s.connEvents()...)
	if err != nil {
		s.Close()
		return err
	}
	s.nc = conn
	s.noteServer(conn)
	s.log.Info("connected to NATS", "url", conn.ConnectedUrlRedacted(), "server", conn.ConnectedServerName(),
		"cluster", conn.ConnectedClusterName(), "auth", nc.authMode())
	js, err := jetstream.New(conn)
	if err != nil {
		s.Close()
		return fmt.Errorf("jetstream: %w", err)
	}
	res, err := ensureUntil(ctx, js, s.cfg, s.log)
	if err != nil {
		s.Close()
		return err
	}
	s.res = res
	s.m.reg.MustRegister(&queueCollector{s: s})
	s.log.Info("compactor pipeline ready", "nats", nc.String(), "server", conn.ConnectedServerName(), "stores", len(s.cfg.Stores),
		"concurrency", s.cfg.Concurrency, "replicas", s.cfg.Replicas, "worker", s.worker)
	return nil
}

// embedded starts the embedded server on the locked data directory and returns its client
// URL. When another process holds the lock and JoinRunning is set, it returns that
// process's URL instead (this Service is then only a client of it).
func (s *Service) embedded() (string, error) {
	dd, err := lockDataDir(s.cfg.DataDir)
	var busy *DataDirBusyError
	if errors.As(err, &busy) && s.cfg.JoinRunning && busy.Info != nil && busy.Info.ClientURL != "" {
		if busy.Info.Auth != "none" && s.cfg.NATS.authMode() == "none" {
			return "", fmt.Errorf("data directory %s belongs to a running compactor (pid %d) whose NATS at %s requires %s authentication: give the same --nats-token or --nats-user/--nats-password (or NATS_TOKEN, NATS_USER and NATS_PASSWORD)",
				busy.Dir, busy.Info.PID, busy.Info.ClientURL, busy.Info.Auth)
		}
		s.log.Info("data directory in use by a running service: working through its NATS as a client",
			"data_dir", busy.Dir, "pid", busy.Info.PID, "url", busy.Info.ClientURL)
		return busy.Info.ClientURL, nil
	}
	if err != nil {
		return "", err
	}
	ns, err := startEmbedded(s.cfg)
	if err != nil {
		dd.release()
		return "", err
	}
	s.ns, s.dd = ns, dd
	auth := "none"
	if s.cfg.NATS.Token != "" || s.cfg.NATS.User != "" {
		auth = s.cfg.NATS.authMode()
	}
	if err := dd.writeInfo(ServiceInfo{PID: os.Getpid(), ClientURL: ns.ClientURL(), Auth: auth, Worker: s.worker, Started: time.Now().UTC()}); err != nil {
		s.log.Warn("service file not written; run --once and clients will not find this server", "err", err)
	}
	s.log.Info("embedded NATS started", "url", ns.ClientURL(), "store_dir", ns.StoreDir(), "auth", auth)
	return ns.ClientURL(), nil
}

// connEvents logs what happens to the connection: an operator must see a worker lose its
// server, and which server it found again.
func (s *Service) connEvents() []nats.Option {
	return []nats.Option{
		nats.DisconnectErrHandler(func(c *nats.Conn, err error) {
			if c.IsClosed() {
				return
			}
			s.log.Warn("NATS disconnected; reconnecting", "server", s.lastServer(), "err", err)
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			s.noteServer(c)
			s.log.Info("NATS reconnected", "url", c.ConnectedUrlRedacted(), "server", c.ConnectedServerName())
		}),
		nats.ErrorHandler(func(c *nats.Conn, sub *nats.Subscription, err error) {
			s.log.Warn("NATS error", "err", err)
		}),
	}
}

func (s *Service) noteServer(c *nats.Conn) {
	v := c.ConnectedServerName() + " " + c.ConnectedUrlRedacted()
	s.server.Store(&v)
}

func (s *Service) lastServer() string {
	if p := s.server.Load(); p != nil {
		return *p
	}
	return ""
}

// Conn is the NATS connection (nil before Start).
func (s *Service) Conn() *nats.Conn { return s.nc }

// ClientURL is the URL clients use to reach the NATS this service is on.
func (s *Service) ClientURL() string {
	if s.ns != nil {
		return s.ns.ClientURL()
	}
	if s.nc != nil {
		return s.nc.ConnectedUrlRedacted()
	}
	return s.cfg.NATS.URL
}

// MetricsAddr is the address the metrics server listens on (nil if not started).
func (s *Service) MetricsAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.metrics
}

// Close drops the NATS connection, stops the embedded server and unlocks the data
// directory. Call it after Run returns.
//
// The sweeps' memo watcher (a subscription, like the connection's own) lives until here:
// the connection is closed first, so that stopping the watcher sends nothing (with NATS
// down, deleting its consumer would wait for the request timeout); the server drops the
// watcher's ephemeral consumer by itself.
func (s *Service) Close() {
	if s.nc != nil {
		s.nc.Close()
	}
	s.closeMemo()
	if s.ns != nil {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
		s.ns = nil
	}
	if s.dd != nil {
		s.dd.release()
		s.dd = nil
	}
}

func (s *Service) healthy() error {
	if s.nc == nil || !s.nc.IsConnected() {
		return errors.New("not connected to NATS")
	}
	return nil
}

// Run works jobs until ctx ends, then shuts down in two stages: it stops fetching, lets
// running jobs finish within ShutdownTimeout, and then cancels the rest, which are given
// back (Nak) for another worker. With SweepEvery set it also sweeps periodically. Every
// goroutine it started has ended when it returns, at most ShutdownTimeout + 2s after ctx
// ended, even when NATS is unreachable.
func (s *Service) Run(ctx context.Context) error {
	if s.cfg.Handler == nil {
		return errors.New("config: Handler: required to run workers")
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
		sweeps.Go(func() { s.sweepLoop(ctx) })
	}
	<-ctx.Done()
	stop()
	sweeps.Wait()
	return nil
}

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

const fetchWait = time.Second

// fetchLoop pulls from one store's consumer only as many messages as it has free slots, so
// a fetched message is never left waiting (its AckWait ticking) for a slot.
func (s *Service) fetchLoop(ctx context.Context, w work, store string) {
	cons := s.res.cons[store]
	perStore := max(1, s.cfg.Concurrency/len(s.cfg.Stores))
	for {
		select {
		case <-ctx.Done():
			return
		case s.sem <- struct{}{}:
		}
		n := 1
	more:
		for n < perStore {
			select {
			case s.sem <- struct{}{}:
				n++
			default:
				break more
			}
		}
		batch, err := cons.Fetch(n, jetstream.FetchMaxWait(fetchWait))
		got := 0
		if err == nil {
			for msg := range batch.Messages() {
				got++
				s.jobs.Add(1)
				s.inflight.Add(1)
				s.m.inFlight.Inc()
				go func() {
					defer func() {
						s.m.inFlight.Dec()
						s.inflight.Add(-1)
						<-s.sem
						s.jobs.Done()
					}()
					s.process(w, store, msg)
				}()
			}
			err = batch.Error()
		}
		for range n - got {
			<-s.sem
		}
		if err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("fetch failed", "store", store, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
}

// delivery is one message being worked, and what admission found out about it.
type delivery struct {
	msg       jetstream.Msg
	delivered uint64 // JetStream's count, busy and give-back deliveries included
	start     time.Time
	ev        Event // the event being built: store, sequence, job fields
	log       *slog.Logger
	job       Job
	file      string // the resolved session file
	lease     *lease
	key       string // the job's key in COMPACTOR_ATTEMPTS
	attempt   int    // handler attempts so far, this one included; 0 before counting
}

// process handles one delivery from start to its single final answer to JetStream:
// admission decides whether the handler may run now; the attempt runs it.
func (s *Service) process(w work, store string, msg jetstream.Msg) {
	if d := s.admit(w.book, store, msg); d != nil {
		s.attempt(w, d)
	}
}

// admit checks a delivery before any work: a valid job whose subject matches it, a file
// inside the store (found again by session id if it moved), not active, the session's
// lease, and an attempt left. Every refusal gives the delivery its answer here (dead
// letter, skip, or a delayed redelivery) and returns nil.
func (s *Service) admit(ctx context.Context, store string, msg jetstream.Msg) *delivery {
	d := &delivery{msg: msg, start: time.Now()}
	meta, err := msg.Metadata()
	if err != nil {
		s.log.Error("message without metadata", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return nil
	}
	d.delivered = meta.NumDelivered
	d.ev = Event{V: 1, JobSeq: meta.Sequence.Stream, Store: store, Worker: s.worker}
	job, err := DecodeJob(msg.Data())
	if err == nil && (job.Store != store || job.Subject() != msg.Subject()) {
		err = fmt.Errorf("job: subject %s does not match its payload (store %q, session %q, kind %q)", msg.Subject(), job.Store, job.SessionID, job.Kind)
	}
	d.ev.JobID, d.ev.SessionID, d.ev.Path, d.ev.Kind = job.ID, job.SessionID, job.Path, job.Kind
	if err != nil {
		s.deadLetter(ctx, d, "invalid job", err)
		return nil
	}
	d.job, d.key = job, attemptKey(d.ev.JobSeq, job.ID)
	d.log = s.log.With("store", store, "session", job.SessionID, "kind", job.Kind, "job_seq", d.ev.JobSeq, "delivery", d.delivered)
	if d.file, err = s.locate(d); err != nil {
		s.deadLetter(ctx, d, "refused path", err)
		return nil
	}
	if reason := s.active(d); reason != "" {
		s.finish(ctx, d, Decision{Outcome: OutcomeSkipped, Reason: reason, Busy: true}, Result{})
		return nil
	}
	if !s.takeLease(ctx, d) {
		return nil
	}
	if !s.countAttempt(ctx, d) {
		return nil
	}
	d.log.Info("job started", "path", d.job.Path, "attempt", d.attempt)
	return d
}

// locate resolves the job's path inside its store. A file renamed or moved while queued
// is found again by session id: Pi's file names end in it.
func (s *Service) locate(d *delivery) (string, error) {
	root := s.roots[d.ev.Store]
	file, err := resolve(root, d.job.Path)
	if errors.Is(err, errNotExist) {
		var rel string
		rel, file, err = refind(root, d.job.Path, d.job.SessionID)
		if err == nil {
			d.log.Info("session file moved while queued; found it by session id", "old_path", d.job.Path, "path", rel)
			d.ev.Path, d.job.Path = rel, rel
		}
	}
	return file, err
}

// active returns why the session is left alone for now (modified within Idle), or "".
func (s *Service) active(d *delivery) string {
	// A preparation writes nothing to the session: live sessions are what it is for.
	if d.job.Force || s.cfg.Idle <= 0 || d.job.Kind == KindPrepare {
		return ""
	}
	fi, err := os.Stat(d.file)
	if err != nil {
		return ""
	}
	if age := time.Since(fi.ModTime()); age < s.cfg.Idle {
		return fmt.Sprintf("active: modified %s ago (idle threshold %s; use force)", age.Round(time.Second), s.cfg.Idle)
	}
	return ""
}

// takeLease acquires the session's lease; when another job holds it, the delivery comes
// back after the holder's remaining time (this costs no attempt).
func (s *Service) takeLease(ctx context.Context, d *delivery) bool {
	l, err := acquireLease(ctx, s.res.leases, s.cfg.LeaseTTL, d.ev.Store, d.job.SessionID, s.worker, d.job.ID)
	if err == nil {
		d.lease = l
		return true
	}
	var busy *errLeaseBusy
	delay := s.cfg.LeaseBusyDelay
	if errors.As(err, &busy) {
		delay = min(max(busy.remaining, s.cfg.LeaseBusyDelay), s.cfg.LeaseTTL)
	}
	d.log.Debug("session busy; job delayed", "reason", err, "delay", delay)
	_ = d.msg.NakWithDelay(delay)
	return false
}

// countAttempt counts this attempt in COMPACTOR_ATTEMPTS before the handler runs. A job
// whose MaxDeliver attempts all ended without an answer (their workers crashed or lost
// NATS mid-job) is dead-lettered here instead of being tried again.
func (s *Service) countAttempt(ctx context.Context, d *delivery) bool {
	n, err := addAttempts(ctx, s.res.attempts, d.key, 1)
	if err != nil {
		// NumDelivered also counts busy deliveries: it can only end a job early, not late.
		d.log.Warn("attempt not counted; using the delivery count", "err", err)
		d.attempt, d.ev.Attempt = int(d.delivered), int(d.delivered)
		return true
	}
	d.attempt, d.ev.Attempt = n, n
	if n <= s.cfg.MaxDeliver {
		return true
	}
	d.ev.Attempt = n - 1
	s.finish(ctx, d, Decision{Outcome: OutcomeFailed,
		Reason: fmt.Sprintf("max deliveries (%d) exhausted: %d attempts ended without an answer (the worker crashed or lost NATS mid-job)", s.cfg.MaxDeliver, n-1)}, Result{})
	return false
}

// attempt runs the handler on an admitted delivery, with heartbeats, and gives the
// delivery its answer: the classified outcome, or a give-back when a shutdown cancelled it.
func (s *Service) attempt(w work, d *delivery) {
	hctx, cancel := context.WithCancel(w.jobs)
	hbDone := make(chan struct{})
	go s.heartbeat(hctx, cancel, d, hbDone)
	res, herr := s.cfg.Handler.Handle(hctx, d.job, d.file)
	cancel()
	<-hbDone

	if herr != nil && w.jobs.Err() != nil {
		// Stage two of a shutdown cancelled this job: give it back without using an attempt.
		if _, err := addAttempts(w.book, s.res.attempts, d.key, -1); err != nil {
			d.log.Debug("attempt of a given-back job not uncounted", "err", err)
		}
		_ = d.lease.release(w.book)
		_ = d.msg.Nak()
		d.log.Info("job given back at shutdown", "path", d.job.Path, "err", herr)
		return
	}
	dec := Classify(res, herr, d.attempt, s.cfg.MaxDeliver, s.cfg.BackoffBase, s.cfg.BackoffMax)
	s.finish(w.book, d, dec, res)
	if dec.Outcome == OutcomeDone || dec.Outcome == OutcomeSkipped {
		s.recheck(w.book, d.log, d.job, d.file, res)
	}
}

// heartbeat tells JetStream the job is alive (InProgress resets AckWait) and renews the
// lease at LeaseTTL/3. Only a renewal refused for a wrong revision or a missing key means
// the lease is lost (someone else took the session): the handler is cancelled at once.
// Other failures (NATS unreachable) are retried every second while the lease lasts; the
// handler is cancelled only when LeaseTTL has passed since the last successful renewal
// was sent, since from then on another worker may take the session.
func (s *Service) heartbeat(ctx context.Context, cancel context.CancelFunc, d *delivery, done chan<- struct{}) {
	defer close(done)
	ackT := time.NewTicker(s.cfg.AckWait / 3)
	defer ackT.Stop()
	every := s.cfg.LeaseTTL / 3
	leaseT := time.NewTimer(every)
	defer leaseT.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-ackT.C:
			if err := d.msg.InProgress(); err != nil {
				d.log.Warn("in-progress heartbeat failed", "err", err)
			}
		case <-leaseT.C:
			left := s.cfg.LeaseTTL - time.Since(d.lease.written)
			rctx, rcancel := context.WithTimeout(ctx, max(min(every, left), time.Millisecond))
			err := d.lease.renew(rctx)
			rcancel()
			next := every
			switch {
			case err == nil:
				if failures > 0 {
					d.log.Info("lease renewed again", "failures", failures)
				}
				failures = 0
			case ctx.Err() != nil:
				return
			case leaseLost(err):
				d.log.Error("lease lost; cancelling job", "err", err)
				cancel()
				return
			default:
				failures++
				left = s.cfg.LeaseTTL - time.Since(d.lease.written)
				if left <= 0 {
					d.log.Error("lease not renewed within its TTL; another worker may take the session: cancelling job",
						"ttl_s", seconds(s.cfg.LeaseTTL), "failures", failures, "err", err)
					cancel()
					return
				}
				d.log.Warn("lease renewal failed; retrying while the lease lasts", "left_s", seconds(left), "err", err)
				next = min(time.Second, left)
			}
			leaseT.Reset(next)
		}
	}
}

// finish gives the delivery its one final answer, then publishes the event.
func (s *Service) finish(ctx context.Context, d *delivery, dec Decision, res Result) {
	ev, log, msg := d.ev, d.log, d.msg
	ev.Outcome, ev.Reason, ev.Busy = dec.Outcome, dec.Reason, dec.Busy
	ev.EntryID, ev.TokensBefore, ev.TokensAfter, ev.LLMTokens = res.EntryID, res.TokensBefore, res.TokensAfter, res.LLMTokens
	ev.LLMInputTokens, ev.LLMCachedInputTokens, ev.LLMOutputTokens = res.LLMInputTokens, res.LLMCachedInputTokens, res.LLMOutputTokens
	if dec.Err != nil {
		ev.Error = dec.Err.Error()
	}
	// The session's lease goes first: the job's effect on the session is durable by now, and
	// a client that sees the event below may enqueue the session's next job at once, which
	// must not find the lease still held (it would wait for the lease's whole remaining TTL).
	// A worker that dies before its answer leaves the job to be delivered again, which takes
	// the lease again and finds its effect.
	if d.lease != nil {
		if err := d.lease.release(ctx); err != nil {
			log.Warn("lease release failed; it expires by itself", "err", err)
		}
		d.lease = nil
	}
	// A final event is published before the job's final answer to JetStream: a worker that
	// dies between the two leaves the job to be delivered again (it then finds its effect and
	// reports it again), never a job answered without its event, which `enqueue --wait`
	// would wait for in vain.
	switch dec.Outcome {
	case OutcomeDone, OutcomeSkipped, OutcomeSuperseded:
		s.record(ctx, log, msg.Subject(), ev, d.start)
		// DoubleAck: once it returns, the subject is free and a follow-up enqueue is accepted.
		if err := msg.DoubleAck(ctx); err != nil {
			log.Warn("ack failed; the job will be redelivered and refused as already done", "err", err)
		}
	case OutcomeRetry:
		ev.RetryInMs = dec.Delay.Milliseconds()
		if err := msg.NakWithDelay(dec.Delay); err != nil {
			log.Warn("nak failed", "err", err)
		}
	case OutcomeFailed:
		dl := newDeadLetter(msg.Subject(), ev.JobSeq, msg.Data(), dec.Reason, dec.Err, d.delivered, s.worker)
		if err := publishDeadLetter(ctx, s.res.js, dl); err != nil {
			log.Error("dead letter not written; job kept for redelivery", "err", err)
			_ = msg.NakWithDelay(s.cfg.BackoffBase)
			return
		}
		s.m.deadLtrs.WithLabelValues(ev.Store, "failed").Inc()
		s.record(ctx, log, msg.Subject(), ev, d.start)
		if err := msg.TermWithReason(dec.Reason); err != nil {
			log.Warn("term failed", "err", err)
		}
	}
	if dec.Outcome != OutcomeRetry && (d.attempt > 0 || d.delivered > 1) {
		if err := clearAttempts(ctx, s.res.attempts, d.key); err != nil {
			log.Debug("attempt count not cleared; it expires by itself", "err", err)
		}
	}
	if dec.Outcome == OutcomeRetry {
		s.record(ctx, log, msg.Subject(), ev, d.start)
	}
}

// deadLetter refuses a delivery before any handler ran: dead letter, Term, failed event.
func (s *Service) deadLetter(ctx context.Context, d *delivery, cause string, err error) {
	msg, ev := d.msg, d.ev
	log := s.log.With("store", ev.Store, "subject", msg.Subject(), "job_seq", ev.JobSeq)
	reason := cause + ": " + err.Error()
	dl := newDeadLetter(msg.Subject(), ev.JobSeq, msg.Data(), reason, err, d.delivered, s.worker)
	if perr := publishDeadLetter(ctx, s.res.js, dl); perr != nil {
		log.Error("dead letter not written; job kept for redelivery", "err", perr)
		_ = msg.NakWithDelay(s.cfg.BackoffBase)
		return
	}
	s.m.deadLtrs.WithLabelValues(ev.Store, cause).Inc()
	ev.Outcome, ev.Reason, ev.Error, ev.Attempt = OutcomeFailed, reason, err.Error(), int(d.delivered)
	log.Warn("job refused and dead-lettered", "path", ev.Path, "reason", reason)
	s.record(ctx, log, msg.Subject(), ev, d.start) // the event before the final answer, as in finish
	_ = msg.TermWithReason(reason)
}

func (s *Service) record(ctx context.Context, log *slog.Logger, subject string, ev Event, start time.Time) {
	dur := time.Since(start)
	ev.DurationMs = dur.Milliseconds()
	ev.At = time.Now().UTC()
	s.m.jobs.WithLabelValues(ev.Store, ev.Kind, string(ev.Outcome)).Inc()
	s.m.duration.WithLabelValues(ev.Store, ev.Kind, string(ev.Outcome)).Observe(dur.Seconds())
	if ev.LLMTokens > 0 {
		s.m.llmTokens.WithLabelValues(ev.Store).Add(float64(ev.LLMTokens))
	}
	s.m.countLLM(ev)
	if err := publishEvent(ctx, s.res.js, subject, ev); err != nil {
		log.Warn("event not published", "err", err)
	}
	if ev.Final() {
		s.noteOutcome(ctx, log, ev)
	}
	log.Info("job "+string(ev.Outcome), "path", ev.Path, "outcome", ev.Outcome, "reason", ev.Reason, "entry", ev.EntryID,
		"tokens_before", ev.TokensBefore, "tokens_after", ev.TokensAfter, "llm_tokens", ev.LLMTokens, "llm_cached_input_tokens", ev.LLMCachedInputTokens,
		"duration_s", seconds(dur), "attempt", ev.Attempt)
	if ev.Final() {
		s.mu.Lock()
		if s.recording {
			s.rows = append(s.rows, ReportRow{Store: ev.Store, SessionID: ev.SessionID, Path: ev.Path, Kind: ev.Kind, Outcome: ev.Outcome,
				Reason: ev.Reason, EntryID: ev.EntryID, TokensBefore: ev.TokensBefore, TokensAfter: ev.TokensAfter,
				LLMTokens: ev.LLMTokens, LLMInputTokens: ev.LLMInputTokens, LLMCachedInputTokens: ev.LLMCachedInputTokens,
				LLMOutputTokens: ev.LLMOutputTokens, Attempts: ev.Attempt, Duration: dur})
		}
		s.mu.Unlock()
	}
}

// recheck closes the gap of a trigger that arrived while the job ran: such an enqueue was
// refused as "already queued" (the running job's message still occupied the subject). After
// a compaction, if the session is over budget again and its leaf is not the one this job
// produced or refused, a new job is enqueued for the new leaf.
func (s *Service) recheck(ctx context.Context, log *slog.Logger, job Job, file string, res Result) {
	if s.cfg.Assessor == nil || job.Kind != KindCompact {
		return
	}
	known := res.LeafID
	if known == "" && res.Outcome != OutcomeSkipped {
		known = res.EntryID
	}
	if known == "" {
		known = job.ExpectLeafID
	}
	if known == "" {
		return
	}
	a, err := s.cfg.Assessor.Assess(ctx, file)
	if err != nil {
		log.Warn("re-check after job failed", "err", err)
		return
	}
	if !a.Eligible() || a.LeafID == known {
		return
	}
	next := Job{Kind: KindCompact, Store: job.Store, Path: job.Path, SessionID: job.SessionID, Reason: "recheck",
		ExpectLeafID: a.LeafID, OnlyOverBudget: true, Policy: job.Policy, Counter: job.Counter,
		KeepRecentTokens: job.KeepRecentTokens, Instructions: job.Instructions}
	r, err := publishJob(ctx, s.res.js, &next)
	switch {
	case err != nil:
		log.Warn("re-enqueue after job failed", "err", err)
	case r.AlreadyQueued:
		log.Debug("re-check: a job is already queued")
	default:
		log.Info("session still over budget after job; re-enqueued", "leaf", a.LeafID, "tokens", a.Tokens)
	}
}

// watchMaxDeliveries handles JetStream's max-deliveries advisory: a message whose last
// allowed delivery ended without a final answer (a worker crashed, or a busy lease on the
// last delivery) would otherwise stay in the work queue and block its session's subject
// forever. It is copied to the dead letters and deleted.
func (s *Service) watchMaxDeliveries(ctx context.Context, bg *tasks) ([]*nats.Subscription, error) {
	var subs []*nats.Subscription
	for _, st := range s.cfg.Stores {
		store := st.Name
		subj := "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + StreamJobs + "." + ConsumerName(store)
		sub, err := s.nc.Subscribe(subj, func(m *nats.Msg) {
			var adv struct {
				StreamSeq  uint64 `json:"stream_seq"`
				Deliveries uint64 `json:"deliveries"`
			}
			if err := json.Unmarshal(m.Data, &adv); err != nil || adv.StreamSeq == 0 {
				return
			}
			bg.goTask(func() { s.exhausted(ctx, store, adv.StreamSeq, adv.Deliveries) })
		})
		if err != nil {
			return nil, fmt.Errorf("subscribe %s: %w", subj, err)
		}
		subs = append(subs, sub)
	}
	return subs, nil
}

func (s *Service) exhausted(ctx context.Context, store string, seq, deliveries uint64) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raw, err := s.res.jobs.GetMsg(ctx, seq)
	if err != nil {
		return // already gone (acked, terminated, or handled by another worker)
	}
	reason := fmt.Sprintf("max deliveries exhausted after %d deliveries without a final answer", deliveries)
	dl := newDeadLetter(raw.Subject, seq, raw.Data, reason, nil, deliveries, s.worker)
	if err := publishDeadLetter(ctx, s.res.js, dl); err != nil {
		s.log.Error("dead letter for exhausted job not written", "seq", seq, "err", err)
		return
	}
	if err := s.res.jobs.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		s.log.Error("exhausted job not deleted", "seq", seq, "err", err)
		return
	}
	s.m.deadLtrs.WithLabelValues(store, "max deliveries").Inc()
	job, _ := DecodeJob(raw.Data)
	_ = clearAttempts(ctx, s.res.attempts, attemptKey(seq, job.ID))
	ev := Event{V: 1, JobID: job.ID, JobSeq: seq, Store: store, SessionID: job.SessionID, Path: job.Path, Kind: job.Kind,
		Outcome: OutcomeFailed, Reason: reason, Attempt: int(deliveries), Worker: s.worker}
	s.record(ctx, s.log.With("store", store, "job_seq", seq), raw.Subject, ev, time.Now())
}
