package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The operator's view of a fleet (compactor status, compactor events, the console): every
// read of what the fleet records goes through this file and its companions
// (fleetindex.go: the events, dead letters and hook reports kept in memory), so that the
// names of streams, buckets and subjects stay here and not in the console.
//
// A FleetView follows the fleet: the workers' beats, the leases of running jobs and the
// stores' pause records by watches of their buckets; the events (when asked) by an ordered
// consumer into a bounded index; and, every poll, each store's queue (its consumers'
// counts, its jobs by kind and the oldest of each) and dead-letter count. Reading a
// snapshot costs no request to NATS: a page or a status line is served from memory.

// FleetViewOptions says what a FleetView follows beyond the workers, the running jobs,
// the pauses and the queues.
type FleetViewOptions struct {
	// Events: follow COMPACTOR_EVENTS into an index (sessions' histories, recent jobs,
	// charts) of at most MaxEvents events (DefaultMaxEvents when 0).
	Events    bool
	MaxEvents int
	// DeadLetters: keep each store's dead letters in memory (read again when their count
	// changes).
	DeadLetters bool
	// Hooks: count the extension's hook reports (the zero-wait view) from now on.
	Hooks bool
	// Poll is how often the queues are read (default 1s).
	Poll   time.Duration
	Logger *slog.Logger
}

// DefaultMaxEvents bounds a FleetView's event index.
const DefaultMaxEvents = 200_000

// FleetView is a live view of a fleet. Open it with OpenFleetView; Close it.
type FleetView struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	opts FleetViewOptions
	log  *slog.Logger
	jobs jetstream.Stream

	mu       sync.RWMutex
	settings *FleetSettings
	beats    map[string]WorkerBeat // by bucket key
	leases   map[string]leaseSeen  // by bucket key
	pauses   map[string]PauseRecord
	queues   map[string]StoreQueue
	polled   time.Time
	pollErr  error
	history  map[string]*queueHistory

	events *EventIndex
	dlq    *deadLetterIndex
	hooks  *HookIndex

	cancel  context.CancelFunc
	done    sync.WaitGroup
	closers []func()
}

type leaseSeen struct {
	key   string
	value leaseValue
	at    time.Time // when it was written (its age decides whether it still holds)
}

// StoreQueue is a store's queue as the last poll read it.
type StoreQueue struct {
	// Pending: jobs queued and not delivered yet; InFlight: delivered and not answered
	// (running, or waiting for a retry's delay); DeadLetters: kept in COMPACTOR_DLQ. The
	// same figures as compactor_queue_pending, _in_flight and _dead_letters.
	Pending     uint64 `json:"pending"`
	InFlight    uint64 `json:"inFlight"`
	DeadLetters uint64 `json:"deadLetters"`
	// Kinds are the jobs in the queue (waiting or running) by kind, with the oldest's time.
	Kinds []KindQueue `json:"kinds"`
	// Oldest is when the oldest job in the queue was queued (zero: none).
	Oldest time.Time `json:"oldest,omitzero"`
	Err    string    `json:"error,omitempty"`
}

// KindQueue is one kind of job in a store's queue.
type KindQueue struct {
	Kind   string    `json:"kind"`
	Jobs   uint64    `json:"jobs"`
	Oldest time.Time `json:"oldest,omitzero"`
}

// RunningJob is a job a worker holds the session's lease for.
type RunningJob struct {
	Store     string    `json:"store"`
	SessionID string    `json:"sessionId,omitempty"`
	Token     string    `json:"token"` // the session's token (its subjects' and keys' part)
	Path      string    `json:"path,omitempty"`
	Kind      string    `json:"kind,omitempty"`
	Worker    string    `json:"worker"`
	JobID     string    `json:"jobId"`
	Attempt   int       `json:"attempt,omitempty"`
	Delivery  uint64    `json:"delivery,omitempty"`
	Since     time.Time `json:"since"`
}

// FleetSnapshot is the fleet as a FleetView last saw it.
type FleetSnapshot struct {
	At       time.Time   `json:"at"`
	PolledAt time.Time   `json:"polledAt"`
	Stores   []StoreView `json:"stores"`
	// Setup: the fleet's settings (nil when none could be read: Err says why).
	Setup *FleetSettings `json:"setup,omitempty"`
	Err   string         `json:"error,omitempty"`
}

// StoreView is one store.
type StoreView struct {
	Store   string        `json:"store"`
	Workers []WorkerBeat  `json:"workers"`
	Queue   StoreQueue    `json:"queue"`
	Running []RunningJob  `json:"running"`
	Paused  *PauseRecord  `json:"paused,omitempty"`
	Window  *WindowCounts `json:"window,omitempty"` // the last hour's jobs (with the event index)
}

// OpenFleetView starts following the fleet on nc and returns once it has read what is
// there (the buckets' current values, the queues, and the events' backlog when asked).
func OpenFleetView(ctx context.Context, nc *nats.Conn, opts FleetViewOptions) (*FleetView, error) {
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	if opts.MaxEvents <= 0 {
		opts.MaxEvents = DefaultMaxEvents
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	v, err := guard(ctx, nc, func(ctx context.Context) (*FleetView, error) { return openFleetView(ctx, nc, opts, log) })
	if err != nil {
		return nil, err
	}
	return v, nil
}

func openFleetView(ctx context.Context, nc *nats.Conn, opts FleetViewOptions, log *slog.Logger) (*FleetView, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("fleet view: %w", err)
	}
	v := &FleetView{nc: nc, js: js, opts: opts, log: log, beats: map[string]WorkerBeat{}, leases: map[string]leaseSeen{},
		pauses: map[string]PauseRecord{}, queues: map[string]StoreQueue{}, history: map[string]*queueHistory{}}
	if v.settings, err = readFleet(ctx, nc); err != nil {
		return nil, err
	}
	if v.jobs, err = js.Stream(ctx, StreamJobs); err != nil {
		if unavailable(err) {
			err = diagnose(ctx, js, StreamJobs, err)
		}
		return nil, fmt.Errorf("fleet view: stream %s: %w", StreamJobs, err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	v.cancel = cancel
	ok := false
	defer func() {
		if !ok {
			v.Close()
		}
	}()
	watches := []struct {
		bucket, prefix string
		apply          func(jetstream.KeyValueEntry)
	}{
		{BucketWorkers, "", v.applyBeat},
		{BucketLeases, "", v.applyLease},
		{BucketSettings, strings.TrimSuffix(pauseKeyPrefix, "."), v.applyPause},
	}
	for _, w := range watches {
		if err := v.watch(ctx, runCtx, w.bucket, w.prefix, w.apply); err != nil {
			return nil, err
		}
	}
	if opts.Events {
		v.events = NewEventIndex(opts.MaxEvents)
		if err := v.followEvents(ctx, runCtx); err != nil {
			return nil, err
		}
	}
	if opts.DeadLetters {
		dlq, err := OpenDLQ(ctx, nc)
		if err != nil {
			return nil, err
		}
		v.dlq = &deadLetterIndex{q: dlq, byStore: map[string][]DeadLetterRecord{}}
	}
	if opts.Hooks {
		v.hooks = NewHookIndex(hookIndexRecent)
		sub, err := nc.Subscribe(hooksPrefix+">", func(m *nats.Msg) {
			var r HookReport
			if delivered(m) || json.Unmarshal(m.Data, &r) != nil || r.Outcome == "" || HookSubject(r.Store, r.SessionID) != m.Subject {
				return
			}
			v.hooks.Add(r, time.Now())
		})
		if err != nil {
			return nil, fmt.Errorf("fleet view: subscribe %s>: %w", hooksPrefix, err)
		}
		v.closers = append(v.closers, func() { _ = sub.Unsubscribe() })
	}
	if err := v.Refresh(ctx); err != nil {
		return nil, err
	}
	v.done.Go(func() { v.pollLoop(runCtx) })
	ok = true
	return v, nil
}

// Close stops following the fleet.
func (v *FleetView) Close() {
	if v.cancel != nil {
		v.cancel()
	}
	for _, c := range v.closers {
		c()
	}
	v.done.Wait()
}

// watch follows a bucket's keys under prefix, applying each value, and returns once the
// current values are applied.
func (v *FleetView) watch(ctx, runCtx context.Context, bucket, prefix string, apply func(jetstream.KeyValueEntry)) error {
	w, err := openBucket(v.js, bucket).Watch(runCtx, prefix)
	if err != nil {
		return fmt.Errorf("fleet view: watch %s: %w", bucket, err)
	}
	v.closers = append(v.closers, func() { _ = w.Stop() })
	initial := make(chan struct{})
	v.done.Go(func() {
		first := true
		for e := range w.Updates() {
			if e == nil {
				if first {
					close(initial)
					first = false
				}
				continue
			}
			apply(e)
		}
		if first {
			close(initial)
		}
	})
	select {
	case <-initial:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("fleet view: read %s: %w", bucket, ctx.Err())
	}
}

func (v *FleetView) applyBeat(e jetstream.KeyValueEntry) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut || strings.HasSuffix(e.Key(), "._owner") {
		delete(v.beats, e.Key())
		return
	}
	if b, ok := beatOf(e); ok {
		v.beats[e.Key()] = b
	}
}

func (v *FleetView) applyLease(e jetstream.KeyValueEntry) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(v.leases, e.Key())
		return
	}
	var lv leaseValue
	if newerThan(BucketLeases, e.Key(), e.Value(), leaseV) == nil {
		_ = json.Unmarshal(e.Value(), &lv)
	} else {
		lv.Worker = "(a newer compactor's)"
	}
	v.leases[e.Key()] = leaseSeen{key: e.Key(), value: lv, at: e.Created()}
}

func (v *FleetView) applyPause(e jetstream.KeyValueEntry) {
	store := strings.TrimPrefix(e.Key(), pauseKeyPrefix)
	v.mu.Lock()
	defer v.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(v.pauses, store)
		return
	}
	if r, err := pauseOf(store, e.Value()); err == nil {
		v.pauses[store] = *r
	}
}

func (v *FleetView) pollLoop(ctx context.Context) {
	t := time.NewTicker(v.opts.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := v.Refresh(pctx); err != nil && ctx.Err() == nil {
			v.log.Warn("fleet view: poll failed", "err", err)
		}
		cancel()
	}
}

// Refresh reads the queues (and the fleet's settings) now.
func (v *FleetView) Refresh(ctx context.Context) error {
	settings, err := readFleet(ctx, v.nc)
	if err != nil {
		v.mu.Lock()
		v.pollErr = err
		v.mu.Unlock()
		return err
	}
	stores := v.knownStores(settings)
	queues := make(map[string]StoreQueue, len(stores))
	for _, st := range stores {
		queues[st] = v.readQueue(ctx, st)
	}
	now := time.Now()
	v.mu.Lock()
	v.settings, v.queues, v.polled, v.pollErr = settings, queues, now, nil
	for st, q := range queues {
		h := v.history[st]
		if h == nil {
			h = &queueHistory{}
			v.history[st] = h
		}
		h.add(now, q)
	}
	v.mu.Unlock()
	if v.dlq != nil {
		for _, st := range stores {
			v.dlq.sync(ctx, st, queues[st].DeadLetters, v.log)
		}
	}
	return nil
}

// knownStores are the stores set up, and those a worker serves or a record names.
func (v *FleetView) knownStores(settings *FleetSettings) []string {
	stores := slices.Clone(settings.Stores)
	v.mu.RLock()
	for _, b := range v.beats {
		stores = append(stores, b.Store)
	}
	for st := range v.pauses {
		stores = append(stores, st)
	}
	v.mu.RUnlock()
	slices.Sort(stores)
	return slices.Compact(stores)
}

// readQueue reads one store's queue: its consumers' counts, its jobs by kind (the stream's
// subjects under the store) and the oldest job of each kind.
func (v *FleetView) readQueue(ctx context.Context, store string) StoreQueue {
	q := StoreQueue{Kinds: []KindQueue{}}
	var errs []string
	if c, err := v.js.Consumer(ctx, StreamJobs, ConsumerName(store)); err == nil {
		ci := c.CachedInfo()
		q.Pending, q.InFlight = ci.NumPending, uint64(ci.NumAckPending)
	} else {
		errs = append(errs, fmt.Sprintf("consumer %s: %v", ConsumerName(store), err))
	}
	if c, err := v.js.Consumer(ctx, StreamDLQ, DLQConsumerName(store)); err == nil {
		q.DeadLetters = c.CachedInfo().NumPending
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		errs = append(errs, fmt.Sprintf("consumer %s: %v", DLQConsumerName(store), err))
	}
	info, err := v.jobs.Info(ctx, jetstream.WithSubjectFilter(jobsPrefix+store+".>"))
	if err != nil {
		errs = append(errs, fmt.Sprintf("stream %s: %v", StreamJobs, err))
	} else {
		byKind := map[string]uint64{}
		for subj, n := range info.State.Subjects {
			byKind[subj[strings.LastIndexByte(subj, '.')+1:]] += n
		}
		for kind, n := range byKind {
			kq := KindQueue{Kind: kind, Jobs: n}
			if at, err := oldestJob(ctx, v.jobs, jobsPrefix+store+".*."+kind); err == nil && !at.IsZero() {
				kq.Oldest = at
				if q.Oldest.IsZero() || kq.Oldest.Before(q.Oldest) {
					q.Oldest = kq.Oldest
				}
			}
			q.Kinds = append(q.Kinds, kq)
		}
		slices.SortFunc(q.Kinds, func(a, b KindQueue) int { return strings.Compare(a.Kind, b.Kind) })
	}
	q.Err = strings.Join(errs, "; ")
	return q
}

// Snapshot is the fleet as last read: every store set up or served, its workers (those
// that reported within the last 30 s), queue, running jobs and pause.
func (v *FleetView) Snapshot() FleetSnapshot {
	now := time.Now()
	v.mu.RLock()
	defer v.mu.RUnlock()
	snap := FleetSnapshot{At: now.UTC(), PolledAt: v.polled.UTC(), Stores: []StoreView{}}
	if v.settings != nil {
		s := *v.settings
		snap.Setup = &s
	}
	if v.pollErr != nil {
		snap.Err = v.pollErr.Error()
	}
	byStore := map[string]*StoreView{}
	get := func(st string) *StoreView {
		if sv := byStore[st]; sv != nil {
			return sv
		}
		sv := &StoreView{Store: st, Workers: []WorkerBeat{}, Running: []RunningJob{}}
		byStore[st] = sv
		return sv
	}
	if v.settings != nil {
		for _, st := range v.settings.Stores {
			get(st)
		}
	}
	for st, q := range v.queues {
		get(st).Queue = q
	}
	for _, b := range v.beats {
		if now.Sub(b.At) < workerBeatTTL {
			sv := get(b.Store)
			sv.Workers = append(sv.Workers, b)
		}
	}
	ttl := time.Duration(DefaultLeaseTTL)
	if v.settings != nil && v.settings.LeaseTTL > 0 {
		ttl = time.Duration(v.settings.LeaseTTL)
	}
	for _, l := range v.leases {
		if now.Sub(l.at) >= ttl {
			continue // expired: its holder is gone
		}
		store, token, _ := strings.Cut(l.key, ".")
		sv := get(store)
		sv.Running = append(sv.Running, RunningJob{Store: store, Token: token, SessionID: l.value.SessionID, Path: l.value.Path,
			Kind: l.value.Kind, Worker: l.value.Worker, JobID: l.value.JobID, Attempt: l.value.Attempt, Delivery: l.value.Delivery,
			Since: l.value.Since})
	}
	for st, p := range v.pauses {
		if p.Paused {
			p := p
			get(st).Paused = &p
		}
	}
	for _, sv := range byStore {
		slices.SortFunc(sv.Workers, func(a, b WorkerBeat) int { return strings.Compare(a.Worker, b.Worker) })
		slices.SortFunc(sv.Running, func(a, b RunningJob) int { return a.Since.Compare(b.Since) })
		if v.events != nil {
			w := v.events.Window(sv.Store, now.Add(-time.Hour), now)
			sv.Window = &w
		}
		snap.Stores = append(snap.Stores, *sv)
	}
	slices.SortFunc(snap.Stores, func(a, b StoreView) int { return strings.Compare(a.Store, b.Store) })
	return snap
}

// Events is the event index (nil unless FleetViewOptions.Events).
func (v *FleetView) Events() *EventIndex { return v.events }

// Hooks is the hook reports' index (nil unless FleetViewOptions.Hooks).
func (v *FleetView) Hooks() *HookIndex { return v.hooks }

// DeadLetters are a store's dead letters, newest first (with FleetViewOptions.DeadLetters).
func (v *FleetView) DeadLetters(store string) []DeadLetterRecord {
	if v.dlq == nil {
		return nil
	}
	return v.dlq.list(store)
}

// deadLetterOf opens the dead letters and reads the one of sequence seq.
func (v *FleetView) deadLetterOf(ctx context.Context, seq uint64) (*DLQ, DeadLetterRecord, error) {
	q, err := OpenDLQ(ctx, v.nc)
	if err != nil {
		return nil, DeadLetterRecord{}, err
	}
	recs, err := q.List(ctx, DeadLetterFilter{Seqs: []uint64{seq}})
	if err != nil {
		return nil, DeadLetterRecord{}, err
	}
	if len(recs) == 0 {
		return nil, DeadLetterRecord{}, fmt.Errorf("dlq: no dead letter %d", seq)
	}
	return q, recs[0], nil
}

// DeadLetter is one dead letter by its sequence, read from COMPACTOR_DLQ.
func (v *FleetView) DeadLetter(ctx context.Context, seq uint64) (DeadLetterRecord, error) {
	_, rec, err := v.deadLetterOf(ctx, seq)
	return rec, err
}

// RetryDeadLetter enqueues a dead letter's job again and deletes the dead letter.
func (v *FleetView) RetryDeadLetter(ctx context.Context, seq uint64) (RetryResult, error) {
	q, rec, err := v.deadLetterOf(ctx, seq)
	if err != nil {
		return RetryResult{}, err
	}
	res := q.Retry(ctx, []DeadLetterRecord{rec}, false, 0)
	if len(res) == 0 || !res[0].Queued {
		why := "not queued"
		if len(res) > 0 {
			why = res[0].Error
		}
		return RetryResult{Seq: seq}, fmt.Errorf("dlq: dead letter %d not retried: %s", seq, why)
	}
	v.forgetDeadLetters([]DeadLetterRecord{rec})
	return res[0], nil
}

// PurgeDeadLetter deletes a dead letter.
func (v *FleetView) PurgeDeadLetter(ctx context.Context, seq uint64) error {
	q, rec, err := v.deadLetterOf(ctx, seq)
	if err != nil {
		return err
	}
	if _, err := q.Delete(ctx, []DeadLetterRecord{rec}); err != nil {
		return err
	}
	v.forgetDeadLetters([]DeadLetterRecord{rec})
	return nil
}

func (v *FleetView) forgetDeadLetters(recs []DeadLetterRecord) {
	if v.dlq != nil {
		v.dlq.forget(recs)
	}
}

// SetPaused pauses or resumes a store, and shows it at once.
func (v *FleetView) SetPaused(ctx context.Context, store string, paused bool, reason, by string) (PauseRecord, error) {
	rec, err := SetPaused(ctx, v.nc, store, paused, reason, by)
	if err == nil {
		v.mu.Lock()
		v.pauses[store] = rec
		v.mu.Unlock()
	}
	return rec, err
}

// QueuedJobs are up to limit of a store's queued jobs (waiting or running), oldest first,
// read one by one by direct gets of the next message on the store's subjects (a work
// queue takes no consumer that would overlap the store's own).
func (v *FleetView) QueuedJobs(ctx context.Context, store string, limit int) ([]QueuedJob, error) {
	var out []QueuedJob
	filter := jobsPrefix + store + ".>"
	for seq := uint64(1); len(out) < limit; {
		m, err := v.jobs.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("queued jobs of %s: %w", store, err)
		}
		qj := QueuedJob{Seq: m.Sequence, At: m.Time.UTC(), Subject: m.Subject}
		var j Job
		if json.Unmarshal(m.Data, &j) == nil {
			qj.SessionID, qj.Path, qj.Kind, qj.Reason = j.SessionID, j.Path, j.Kind, j.Reason
		}
		out = append(out, qj)
		seq = m.Sequence + 1
	}
	return out, nil
}

// QueuedJob is a job in a store's queue.
type QueuedJob struct {
	Seq       uint64    `json:"seq"`
	Subject   string    `json:"subject"`
	SessionID string    `json:"sessionId,omitempty"`
	Path      string    `json:"path,omitempty"`
	Kind      string    `json:"kind,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	At        time.Time `json:"at"`
}

// QueueHistory is a store's queue sampled once a minute (the last of each minute), over
// the last queueHistoryMinutes.
func (v *FleetView) QueueHistory(store string) []QueueSample {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if h := v.history[store]; h != nil {
		return slices.Clone(h.samples)
	}
	return nil
}

// QueueSample is a store's queue at a minute.
type QueueSample struct {
	At      time.Time `json:"at"`
	Pending uint64    `json:"pending"`
	AgeS    float64   `json:"oldestAgeS"`
}

const queueHistoryMinutes = 6 * 60

type queueHistory struct{ samples []QueueSample }

func (h *queueHistory) add(now time.Time, q StoreQueue) {
	s := QueueSample{At: now.Truncate(time.Minute), Pending: q.Pending + q.InFlight}
	if !q.Oldest.IsZero() {
		s.AgeS = now.Sub(q.Oldest).Seconds()
	}
	if n := len(h.samples); n > 0 && h.samples[n-1].At.Equal(s.At) {
		h.samples[n-1] = s
		return
	}
	h.samples = append(h.samples, s)
	if len(h.samples) > queueHistoryMinutes {
		h.samples = slices.Delete(h.samples, 0, len(h.samples)-queueHistoryMinutes)
	}
}

// followEvents feeds the event index from COMPACTOR_EVENTS (every event kept, then each new
// one), and returns once the backlog is read.
func (v *FleetView) followEvents(ctx, runCtx context.Context) error {
	str, err := v.js.Stream(ctx, StreamEvents)
	if err != nil {
		return fmt.Errorf("fleet view: stream %s: %w", StreamEvents, err)
	}
	caughtUp := make(chan struct{})
	var once sync.Once
	if str.CachedInfo().State.Msgs == 0 {
		once.Do(func() { close(caughtUp) })
	}
	oc, err := str.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return fmt.Errorf("fleet view: read %s: %w", StreamEvents, err)
	}
	cc, err := oc.Consume(func(m jetstream.Msg) {
		var ev Event
		if json.Unmarshal(m.Data(), &ev) == nil && ev.SessionID != "" {
			v.events.Add(ev)
		}
		if meta, err := m.Metadata(); err == nil && meta.NumPending == 0 {
			once.Do(func() { close(caughtUp) })
		}
	})
	if err != nil {
		return fmt.Errorf("fleet view: read %s: %w", StreamEvents, err)
	}
	v.closers = append(v.closers, cc.Stop)
	select {
	case <-caughtUp:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("fleet view: read %s: %w", StreamEvents, ctx.Err())
	case <-runCtx.Done():
		return runCtx.Err()
	}
}

// SessionEvents reads a session's events from COMPACTOR_EVENTS (compactor events), oldest
// first; with follow, it then calls fn with each new one until ctx ends.
func SessionEvents(ctx context.Context, nc *nats.Conn, store, sessionID string, follow bool, fn func(Event)) error {
	return unguarded(guard(ctx, nc, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, sessionEvents(ctx, nc, store, sessionID, follow, fn)
	}))
}

func unguarded[T any](_ T, err error) error { return err }

func sessionEvents(ctx context.Context, nc *nats.Conn, store, sessionID string, follow bool, fn func(Event)) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	str, err := js.Stream(ctx, StreamEvents)
	if err != nil {
		if unavailable(err) {
			err = diagnose(ctx, js, StreamEvents, err)
		}
		return fmt.Errorf("events: stream %s: %w", StreamEvents, err)
	}
	filter := eventsPrefix + store + ".>"
	if sessionID != "" {
		filter = EventSubject(store, sessionID) + ".*"
	}
	oc, err := str.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	for {
		batch, err := oc.Fetch(256, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("events: %w", err)
		}
		got, last := 0, false
		for m := range batch.Messages() {
			got++
			var ev Event
			if json.Unmarshal(m.Data(), &ev) == nil {
				fn(ev)
			}
			if meta, err := m.Metadata(); err == nil {
				last = meta.NumPending == 0
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("events: %w", err)
		}
		if !follow && (got == 0 || last) {
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// oldestJob is when the first job of COMPACTOR_JOBS under filter was queued (zero: none).
// It reads by sequence (a direct get of the next message on the filter), which a
// permission cannot scope to a store: the operator's and the admin's right.
func oldestJob(ctx context.Context, jobs jetstream.Stream, filter string) (time.Time, error) {
	m, err := jobs.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(filter))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	return m.Time.UTC(), nil
}
