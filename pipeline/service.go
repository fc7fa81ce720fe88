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
// server), the JetStream resources, and a bounded pool of job handlers.
type Service struct {
	cfg    Config
	log    *slog.Logger
	roots  map[string]string // store name → real root
	worker string

	startOnce sync.Once
	startErr  error
	ns        *server.Server
	nc        *nats.Conn
	res       *resources
	m         *metrics

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
// creates or updates the streams, buckets and consumers. It is idempotent.
func (s *Service) Start(ctx context.Context) error {
	s.startOnce.Do(func() { s.startErr = s.start(ctx) })
	return s.startErr
}

func (s *Service) start(ctx context.Context) error {
	nc := s.cfg.NATS
	if nc.URL == "" {
		ns, err := startEmbedded(s.cfg)
		if err != nil {
			return err
		}
		s.ns = ns
		nc.URL = ns.ClientURL()
		s.log.Info("embedded NATS started", "url", nc.URL, "store_dir", ns.StoreDir())
	}
	if nc.Name == "" {
		nc.Name = "compactor " + s.worker
	}
	conn, err := nc.Connect()
	if err != nil {
		s.shutdownEmbedded()
		return err
	}
	s.nc = conn
	js, err := jetstream.New(conn)
	if err != nil {
		s.Close()
		return fmt.Errorf("jetstream: %w", err)
	}
	res, err := ensure(ctx, js, s.cfg)
	if err != nil {
		s.Close()
		return err
	}
	s.res = res
	s.log.Info("compactor pipeline ready", "nats", nc.String(), "stores", len(s.cfg.Stores), "concurrency", s.cfg.Concurrency, "worker", s.worker)
	return nil
}

// Conn is the NATS connection (nil before Start).
func (s *Service) Conn() *nats.Conn { return s.nc }

// ClientURL is the URL clients use to reach the NATS this service is on.
func (s *Service) ClientURL() string {
	if s.ns != nil {
		return s.ns.ClientURL()
	}
	return s.cfg.NATS.URL
}

// MetricsAddr is the address the metrics server listens on (nil if not started).
func (s *Service) MetricsAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.metrics
}

// Close drops the NATS connection and stops the embedded server. Call it after Run returns.
func (s *Service) Close() {
	if s.nc != nil {
		s.nc.Close()
	}
	s.shutdownEmbedded()
}

func (s *Service) shutdownEmbedded() {
	if s.ns != nil {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
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
// back (Nak) for another worker. With SweepEvery set it also sweeps periodically.
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
	if s.cfg.SweepEvery > 0 && s.cfg.Assessor != nil {
		go s.sweepLoop(ctx)
	}
	<-ctx.Done()
	stop()
	return nil
}

// startWorkers starts metrics, the max-deliveries advisory listener and one fetch loop per
// store, all ending with ctx. The returned stop waits for them and for running jobs (the
// two-stage shutdown).
func (s *Service) startWorkers(ctx context.Context) (stop func(), err error) {
	if s.cfg.MetricsAddr != "" {
		addr, err := serveMetrics(ctx, s.cfg.MetricsAddr, s.m.reg, s.healthy, s.log)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.metrics = addr
		s.mu.Unlock()
		s.log.Info("metrics listening", "addr", addr.String())
	}
	subs, err := s.watchMaxDeliveries()
	if err != nil {
		return nil, err
	}
	jobCtx, cancelJobs := context.WithCancel(context.WithoutCancel(ctx))
	var loops sync.WaitGroup
	for _, st := range s.cfg.Stores {
		loops.Add(1)
		go func() {
			defer loops.Done()
			s.fetchLoop(ctx, jobCtx, st.Name)
		}()
	}
	return func() {
		loops.Wait() // stage 1: no more fetches (ctx is done)
		done := make(chan struct{})
		go func() { s.jobs.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(s.cfg.ShutdownTimeout):
			s.log.Warn("shutdown timeout: cancelling running jobs; they are given back", "in_flight", s.inflight.Load())
			cancelJobs() // stage 2
			<-done
		}
		cancelJobs()
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
		s.log.Info("workers stopped")
	}, nil
}

const fetchWait = time.Second

// fetchLoop pulls from one store's consumer only as many messages as it has free slots, so
// a fetched message is never left waiting (its AckWait ticking) for a slot.
func (s *Service) fetchLoop(ctx, jobCtx context.Context, store string) {
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
					s.process(jobCtx, store, msg)
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

// process handles one delivery from start to its single final answer to JetStream.
func (s *Service) process(ctx context.Context, store string, msg jetstream.Msg) {
	start := time.Now()
	meta, err := msg.Metadata()
	if err != nil {
		s.log.Error("message without metadata", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	seq, delivered := meta.Sequence.Stream, meta.NumDelivered
	ev := Event{V: 1, JobSeq: seq, Store: store, Worker: s.worker}

	job, err := DecodeJob(msg.Data())
	if err == nil && (job.Store != store || job.Subject() != msg.Subject()) {
		err = fmt.Errorf("job: subject %s does not match its payload (store %q, session %q, kind %q)", msg.Subject(), job.Store, job.SessionID, job.Kind)
	}
	if err != nil {
		ev.JobID, ev.SessionID, ev.Path, ev.Kind = job.ID, job.SessionID, job.Path, job.Kind
		s.deadLetter(ctx, msg, seq, delivered, ev, start, "invalid job", err)
		return
	}
	ev.JobID, ev.SessionID, ev.Path, ev.Kind = job.ID, job.SessionID, job.Path, job.Kind
	log := s.log.With("store", store, "session", job.SessionID, "kind", job.Kind, "job_seq", seq, "delivery", delivered)

	file, err := resolve(s.roots[store], job.Path)
	if errors.Is(err, errNotExist) {
		// Renamed or moved while queued: the job carries the session id, and Pi's file
		// names end in it, so look for the one file in the store that holds this session.
		var rel string
		rel, file, err = refind(s.roots[store], job.Path, job.SessionID)
		if err == nil {
			log.Info("session file moved while queued; found it by session id", "old_path", job.Path, "path", rel)
			ev.Path, job.Path = rel, rel
		}
	}
	if err != nil {
		s.deadLetter(ctx, msg, seq, delivered, ev, start, "refused path", err)
		return
	}

	if !job.Force && s.cfg.Idle > 0 {
		if fi, err := os.Stat(file); err == nil {
			if age := time.Since(fi.ModTime()); age < s.cfg.Idle {
				s.finish(ctx, msg, log, ev, job, start, nil, Decision{Outcome: OutcomeSkipped,
					Reason: fmt.Sprintf("active: modified %s ago (idle threshold %s; use force)", age.Round(time.Second), s.cfg.Idle)}, Result{})
				return
			}
		}
	}

	l, err := acquireLease(ctx, s.res.leases, s.cfg.LeaseTTL, store, job.SessionID, s.worker, job.ID)
	if err != nil {
		var busy *errLeaseBusy
		delay := s.cfg.LeaseBusyDelay
		if errors.As(err, &busy) {
			delay = min(max(busy.remaining, s.cfg.LeaseBusyDelay), s.cfg.LeaseTTL/2)
		}
		addFreeDelivery(ctx, s.res.leases, seq)
		log.Debug("session busy; job delayed", "reason", err, "delay", delay)
		_ = msg.NakWithDelay(delay)
		return
	}

	attempt := int(delivered)
	if delivered > 1 {
		attempt -= freeDeliveries(ctx, s.res.leases, seq)
		attempt = max(attempt, 1)
	}
	ev.Attempt = attempt

	hctx, cancel := context.WithCancel(ctx)
	hbDone := make(chan struct{})
	go s.heartbeat(hctx, cancel, msg, l, log, hbDone)
	res, herr := s.cfg.Handler.Handle(hctx, job, file)
	cancel()
	<-hbDone

	if herr != nil && ctx.Err() != nil {
		// Stage two of a shutdown cancelled this job: give it back without using an attempt.
		addFreeDelivery(context.WithoutCancel(ctx), s.res.leases, seq)
		_ = msg.Nak()
		_ = l.release(context.WithoutCancel(ctx))
		log.Info("job given back at shutdown", "err", herr)
		return
	}
	dec := Classify(res, herr, attempt, s.cfg.MaxDeliver, s.cfg.BackoffBase, s.cfg.BackoffMax)
	s.finish(ctx, msg, log, ev, job, start, l, dec, res)
	if dec.Outcome == OutcomeDone || dec.Outcome == OutcomeSkipped {
		s.recheck(context.WithoutCancel(ctx), log, job, file, res)
	}
}

// heartbeat tells JetStream the job is alive (InProgress resets AckWait) and renews the
// lease; if the lease is lost (someone else took the session), it cancels the handler.
func (s *Service) heartbeat(ctx context.Context, cancel context.CancelFunc, msg jetstream.Msg, l *lease, log *slog.Logger, done chan<- struct{}) {
	defer close(done)
	ackEvery := s.cfg.AckWait / 3
	leaseEvery := s.cfg.LeaseTTL / 3
	ackT := time.NewTicker(ackEvery)
	defer ackT.Stop()
	leaseT := time.NewTicker(leaseEvery)
	defer leaseT.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ackT.C:
			if err := msg.InProgress(); err != nil {
				log.Warn("in-progress heartbeat failed", "err", err)
			}
		case <-leaseT.C:
			if err := l.renew(ctx); err != nil && ctx.Err() == nil {
				log.Error("lease lost; cancelling job", "err", err)
				cancel()
				return
			}
		}
	}
}

// finish gives the delivery its one final answer, then publishes the event. l may be nil.
func (s *Service) finish(ctx context.Context, msg jetstream.Msg, log *slog.Logger, ev Event, job Job, start time.Time, l *lease, dec Decision, res Result) {
	actx := context.WithoutCancel(ctx)
	ev.Outcome, ev.Reason = dec.Outcome, dec.Reason
	ev.EntryID, ev.TokensBefore, ev.TokensAfter, ev.LLMTokens = res.EntryID, res.TokensBefore, res.TokensAfter, res.LLMTokens
	if dec.Err != nil {
		ev.Error = dec.Err.Error()
	}
	switch dec.Outcome {
	case OutcomeDone, OutcomeSkipped, OutcomeSuperseded:
		// DoubleAck: once it returns, the subject is free and a follow-up enqueue is accepted.
		if err := msg.DoubleAck(actx); err != nil {
			log.Warn("ack failed; the job will be redelivered and refused as already done", "err", err)
		}
	case OutcomeRetry:
		ev.RetryInMs = dec.Delay.Milliseconds()
		if err := msg.NakWithDelay(dec.Delay); err != nil {
			log.Warn("nak failed", "err", err)
		}
	case OutcomeFailed:
		meta, _ := msg.Metadata()
		var delivered uint64
		if meta != nil {
			delivered = meta.NumDelivered
		}
		dl := newDeadLetter(msg.Subject(), ev.JobSeq, msg.Data(), dec.Reason, dec.Err, delivered, s.worker)
		if err := publishDeadLetter(actx, s.res.js, dl); err != nil {
			log.Error("dead letter not written; job kept for redelivery", "err", err)
			_ = msg.NakWithDelay(s.cfg.BackoffBase)
			if l != nil {
				_ = l.release(actx)
			}
			return
		}
		s.m.deadLtrs.WithLabelValues(ev.Store, "failed").Inc()
		if err := msg.TermWithReason(dec.Reason); err != nil {
			log.Warn("term failed", "err", err)
		}
	}
	if l != nil {
		if err := l.release(actx); err != nil {
			log.Warn("lease release failed; it expires by itself", "err", err)
		}
	}
	s.record(actx, log, msg.Subject(), ev, start)
}

// deadLetter refuses a delivery before any handler ran: dead letter, Term, failed event.
func (s *Service) deadLetter(ctx context.Context, msg jetstream.Msg, seq, delivered uint64, ev Event, start time.Time, cause string, err error) {
	actx := context.WithoutCancel(ctx)
	log := s.log.With("store", ev.Store, "subject", msg.Subject(), "job_seq", seq)
	reason := cause + ": " + err.Error()
	dl := newDeadLetter(msg.Subject(), seq, msg.Data(), reason, err, delivered, s.worker)
	if perr := publishDeadLetter(actx, s.res.js, dl); perr != nil {
		log.Error("dead letter not written; job kept for redelivery", "err", perr)
		_ = msg.NakWithDelay(s.cfg.BackoffBase)
		return
	}
	s.m.deadLtrs.WithLabelValues(ev.Store, cause).Inc()
	_ = msg.TermWithReason(reason)
	ev.Outcome, ev.Reason, ev.Error, ev.Attempt = OutcomeFailed, reason, err.Error(), int(delivered)
	log.Warn("job refused and dead-lettered", "reason", reason)
	s.record(actx, log, msg.Subject(), ev, start)
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
	if err := publishEvent(ctx, s.res.js, subject, ev); err != nil {
		log.Warn("event not published", "err", err)
	}
	log.Info("job "+string(ev.Outcome), "path", ev.Path, "reason", ev.Reason, "entry", ev.EntryID, "tokens_before", ev.TokensBefore,
		"tokens_after", ev.TokensAfter, "llm_tokens", ev.LLMTokens, "duration", dur.Round(time.Millisecond), "attempt", ev.Attempt)
	if ev.Final() {
		s.mu.Lock()
		if s.recording {
			s.rows = append(s.rows, ReportRow{Store: ev.Store, SessionID: ev.SessionID, Path: ev.Path, Kind: ev.Kind, Outcome: ev.Outcome,
				Reason: ev.Reason, EntryID: ev.EntryID, TokensBefore: ev.TokensBefore, TokensAfter: ev.TokensAfter,
				LLMTokens: ev.LLMTokens, Attempts: ev.Attempt, Duration: dur})
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
func (s *Service) watchMaxDeliveries() ([]*nats.Subscription, error) {
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
			go s.exhausted(store, adv.StreamSeq, adv.Deliveries)
		})
		if err != nil {
			return nil, fmt.Errorf("subscribe %s: %w", subj, err)
		}
		subs = append(subs, sub)
	}
	return subs, nil
}

func (s *Service) exhausted(store string, seq, deliveries uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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
	ev := Event{V: 1, JobID: job.ID, JobSeq: seq, Store: store, SessionID: job.SessionID, Path: job.Path, Kind: job.Kind,
		Outcome: OutcomeFailed, Reason: reason, Attempt: int(deliveries), Worker: s.worker}
	s.record(ctx, s.log.With("store", store, "job_seq", seq), raw.Subject, ev, time.Now())
}
