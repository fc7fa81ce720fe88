package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/compactor-dev/compactor/wire"
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

// FleetAccount is one NATS account a FleetView reads: a connection of its operator (or
// its admin). A fleet of several hosts has an account per host (docs/security.md), and a
// view of the whole fleet reads each through its own connection.
type FleetAccount struct {
	// Name is the account's name (compactor auth's fleet.json); "" for the one account a
	// connection reaches.
	Name string
	Conn *nats.Conn
	// Stores are the stores the account holds, as the operator's own list says (fleet.json).
	// A record of the account that names another store is left out and counted: a host's
	// keys can write anything into their own account (a relayed message included), and
	// what they write is trusted for their own stores only. Empty: the stores the account's
	// settings list (the admin's record; one account: nothing else to confuse).
	Stores []string
}

// FleetView is a live view of a fleet. Open it with OpenFleetView; Close it.
type FleetView struct {
	opts     FleetViewOptions
	log      *slog.Logger
	accounts []*accountView
	byStore  map[string]*accountView // the stores the accounts' lists hold

	mu      sync.RWMutex
	history map[string]*queueHistory

	events *EventIndex
	hooks  *HookIndex

	cancel  context.CancelFunc
	done    sync.WaitGroup
	closers []func()
}

// accountView is what a FleetView reads of one account.
type accountView struct {
	name    string
	nc      *nats.Conn
	js      jetstream.JetStream
	jobs    jetstream.Stream
	trusted map[string]bool // nil: the stores of the account's settings
	dlq     *deadLetterIndex

	mu       sync.RWMutex
	settings *FleetSettings
	beats    map[string]WorkerBeat // by bucket key
	leases   map[string]leaseSeen  // by bucket key
	pauses   map[string]PauseRecord
	queues   map[string]StoreQueue
	polled   time.Time
	pollErr  error
	// leftOut counts the records of this account that name a store it does not hold, or
	// another store or session than their key or subject (foreign.go).
	leftOut uint64
}

// holds reports whether the account's records about store are trusted: a store of the
// operator's list, or without one, of the account's settings.
func (a *accountView) holds(store string) bool {
	if a.trusted != nil {
		return a.trusted[store]
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.settings != nil && slices.Contains(a.settings.Stores, store)
}

// refuse counts a record left out.
func (a *accountView) refuse() {
	a.mu.Lock()
	a.leftOut++
	a.mu.Unlock()
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
	PolledAt time.Time   `json:"polledAt"` // the oldest of the accounts' last polls
	Stores   []StoreView `json:"stores"`
	// Accounts are the NATS accounts read, each with its settings.
	Accounts []AccountSnapshot `json:"accounts"`
	Err      string            `json:"error,omitempty"`
}

// AccountSnapshot is one account as last read.
type AccountSnapshot struct {
	Name     string    `json:"account,omitempty"`
	Stores   []string  `json:"stores"`
	PolledAt time.Time `json:"polledAt"`
	// Setup: the account's settings (nil when none could be read: Err says why).
	Setup *FleetSettings `json:"setup,omitempty"`
	// LeftOut counts the account's records left out: they name a store the account does
	// not hold, or another store or session than their key or subject.
	LeftOut uint64 `json:"leftOut,omitempty"`
	Err     string `json:"error,omitempty"`
}

// StoreView is one store.
type StoreView struct {
	Store   string        `json:"store"`
	Account string        `json:"account,omitempty"`
	Workers []WorkerBeat  `json:"workers"`
	Queue   StoreQueue    `json:"queue"`
	Running []RunningJob  `json:"running"`
	Paused  *PauseRecord  `json:"paused,omitempty"`
	Window  *WindowCounts `json:"window,omitempty"` // the last hour's jobs (with the event index)
}

// OpenFleetView starts following the fleet's accounts and returns once it has read what
// is there (the buckets' current values, the queues, and the events' backlog when asked).
// An account that cannot be read fails the whole view, naming it.
func OpenFleetView(ctx context.Context, accounts []FleetAccount, opts FleetViewOptions) (*FleetView, error) {
	if len(accounts) == 0 {
		return nil, errors.New("fleet view: no account to read")
	}
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
	v := &FleetView{opts: opts, log: log, byStore: map[string]*accountView{}, history: map[string]*queueHistory{}}
	for _, fa := range accounts {
		a := &accountView{name: fa.Name, nc: fa.Conn, beats: map[string]WorkerBeat{}, leases: map[string]leaseSeen{},
			pauses: map[string]PauseRecord{}, queues: map[string]StoreQueue{}}
		if len(fa.Stores) > 0 {
			a.trusted = map[string]bool{}
			for _, st := range fa.Stores {
				if other := v.byStore[st]; other != nil {
					return nil, fmt.Errorf("fleet view: store %s is in two accounts, %s and %s: a store belongs to one account (compactor auth)", st, other.name, fa.Name)
				}
				a.trusted[st], v.byStore[st] = true, a
			}
		} else if len(accounts) > 1 {
			return nil, fmt.Errorf("fleet view: account %s: its stores are needed to read several accounts", fa.Name)
		}
		v.accounts = append(v.accounts, a)
	}
	if opts.Events {
		v.events = NewEventIndex(opts.MaxEvents)
	}
	if opts.Hooks {
		v.hooks = NewHookIndex(hookIndexRecent)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	v.cancel = cancel
	ok := false
	defer func() {
		if !ok {
			v.Close()
		}
	}()
	for _, a := range v.accounts {
		if _, err := guard(ctx, a.nc, func(ctx context.Context) (struct{}, error) { return struct{}{}, v.openAccount(ctx, runCtx, a) }); err != nil {
			if a.name != "" {
				return nil, fmt.Errorf("account %s: %w", a.name, err)
			}
			return nil, err
		}
	}
	if err := v.Refresh(ctx); err != nil {
		return nil, err
	}
	v.done.Go(func() { v.pollLoop(runCtx) })
	ok = true
	return v, nil
}

// openAccount starts following one account.
func (v *FleetView) openAccount(ctx, runCtx context.Context, a *accountView) error {
	js, err := jetstream.New(a.nc)
	if err != nil {
		return fmt.Errorf("fleet view: %w", err)
	}
	a.js = js
	if a.settings, err = readFleet(ctx, a.nc); err != nil {
		return err
	}
	if a.jobs, err = js.Stream(ctx, wire.StreamJobs); err != nil {
		if unavailable(err) {
			err = diagnose(ctx, js, wire.StreamJobs, err)
		}
		return fmt.Errorf("fleet view: stream %s: %w", wire.StreamJobs, err)
	}
	watches := []struct {
		bucket, prefix string
		apply          func(jetstream.KeyValueEntry)
	}{
		{BucketWorkers, "", a.applyBeat},
		{BucketLeases, "", a.applyLease},
		{BucketSettings, strings.TrimSuffix(pauseKeyPrefix, "."), a.applyPause},
	}
	for _, w := range watches {
		if err := v.watch(ctx, runCtx, js, w.bucket, w.prefix, w.apply); err != nil {
			return err
		}
	}
	if v.events != nil {
		if err := v.followEvents(ctx, runCtx, a); err != nil {
			return err
		}
	}
	if v.opts.DeadLetters {
		dlq, err := OpenDLQ(ctx, a.nc)
		if err != nil {
			return err
		}
		a.dlq = &deadLetterIndex{q: dlq, byStore: map[string][]DeadLetterRecord{}}
	}
	if v.hooks != nil {
		sub, err := a.nc.Subscribe(wire.HooksPrefix+">", func(m *nats.Msg) {
			var r wire.HookReport
			if delivered(m) || json.Unmarshal(m.Data, &r) != nil || r.Outcome == "" {
				return
			}
			if wire.HookSubject(r.Store, r.SessionID) != m.Subject || !a.holds(r.Store) {
				a.refuse()
				return
			}
			v.hooks.Add(r, time.Now())
		})
		if err != nil {
			return fmt.Errorf("fleet view: subscribe %s>: %w", wire.HooksPrefix, err)
		}
		v.closers = append(v.closers, func() { _ = sub.Unsubscribe() })
	}
	return nil
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
func (v *FleetView) watch(ctx, runCtx context.Context, js jetstream.JetStream, bucket, prefix string, apply func(jetstream.KeyValueEntry)) error {
	w, err := openBucket(js, bucket).Watch(runCtx, prefix)
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

// applyBeat keeps a worker's beat: one whose store or worker is not its key's, or of a
// store the account does not hold, is left out.
func (a *accountView) applyBeat(e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut || strings.HasSuffix(e.Key(), "._owner") {
		a.mu.Lock()
		delete(a.beats, e.Key())
		a.mu.Unlock()
		return
	}
	b, ok := beatOf(e)
	if !ok {
		return
	}
	keyStore, _, _ := strings.Cut(e.Key(), ".")
	if b.Store != keyStore || workerKey(b.Store, b.Worker) != e.Key() || !a.holds(keyStore) {
		a.refuse()
		return
	}
	a.mu.Lock()
	a.beats[e.Key()] = b
	a.mu.Unlock()
}

// applyLease keeps a running job's lease: one whose session is not its key's, or of a
// store the account does not hold, is left out.
func (a *accountView) applyLease(e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		a.mu.Lock()
		delete(a.leases, e.Key())
		a.mu.Unlock()
		return
	}
	store, token := leaseKeyParts(e.Key())
	var lv leaseValue
	if newerThan(BucketLeases, e.Key(), e.Value(), leaseV) == nil {
		_ = json.Unmarshal(e.Value(), &lv)
	} else {
		lv.Worker = "(a newer compactor's)"
	}
	if !a.holds(store) || (lv.SessionID != "" && wire.SessionToken(lv.SessionID) != token) {
		a.refuse()
		return
	}
	a.mu.Lock()
	a.leases[e.Key()] = leaseSeen{key: e.Key(), value: lv, at: e.Created()}
	a.mu.Unlock()
}

// leaseKeyParts reads a lease key's store and session token (a base job's lease is its
// session's key with baseLeaseSuffix: leaseKeyOf).
func leaseKeyParts(key string) (store, token string) {
	store, token, _ = strings.Cut(key, ".")
	return store, strings.TrimSuffix(token, baseLeaseSuffix)
}

// applyPause keeps a store's pause record (its store is its key's).
func (a *accountView) applyPause(e jetstream.KeyValueEntry) {
	store := strings.TrimPrefix(e.Key(), pauseKeyPrefix)
	if !a.holds(store) {
		a.refuse()
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(a.pauses, store)
		return
	}
	if r, err := pauseOf(store, e.Value()); err == nil {
		a.pauses[store] = *r
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

// Refresh reads the queues (and the accounts' settings) now. An account that cannot be
// read keeps what was read of it before, and says why in the snapshot.
func (v *FleetView) Refresh(ctx context.Context) error {
	var errs []error
	for _, a := range v.accounts {
		if err := v.refreshAccount(ctx, a); err != nil {
			if a.name != "" {
				err = fmt.Errorf("account %s: %w", a.name, err)
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (v *FleetView) refreshAccount(ctx context.Context, a *accountView) error {
	settings, err := readFleet(ctx, a.nc)
	if err != nil {
		a.mu.Lock()
		a.pollErr = err
		a.mu.Unlock()
		return err
	}
	stores := a.knownStores(settings)
	queues := make(map[string]StoreQueue, len(stores))
	for _, st := range stores {
		queues[st] = a.readQueue(ctx, st)
	}
	now := time.Now()
	a.mu.Lock()
	a.settings, a.queues, a.polled, a.pollErr = settings, queues, now, nil
	a.mu.Unlock()
	v.mu.Lock()
	for st, q := range queues {
		h := v.history[st]
		if h == nil {
			h = &queueHistory{}
			v.history[st] = h
		}
		h.add(now, q)
	}
	v.mu.Unlock()
	if a.dlq != nil {
		for _, st := range stores {
			a.dlq.sync(ctx, st, queues[st].DeadLetters, v.log)
		}
	}
	return nil
}

// knownStores are the stores of the account: those the operator's list holds; without
// one, the stores set up in it.
func (a *accountView) knownStores(settings *FleetSettings) []string {
	if a.trusted != nil {
		stores := make([]string, 0, len(a.trusted))
		for st := range a.trusted {
			stores = append(stores, st)
		}
		slices.Sort(stores)
		return stores
	}
	stores := slices.Clone(settings.Stores)
	slices.Sort(stores)
	return slices.Compact(stores)
}

// readQueue reads one store's queue: its consumers' counts, its jobs by kind (the stream's
// subjects under the store) and the oldest job of each kind.
func (a *accountView) readQueue(ctx context.Context, store string) StoreQueue {
	q := StoreQueue{Kinds: []KindQueue{}}
	var errs []string
	if c, err := a.js.Consumer(ctx, wire.StreamJobs, ConsumerName(store)); err == nil {
		ci := c.CachedInfo()
		q.Pending, q.InFlight = ci.NumPending, uint64(ci.NumAckPending)
	} else {
		errs = append(errs, fmt.Sprintf("consumer %s: %v", ConsumerName(store), err))
	}
	if c, err := a.js.Consumer(ctx, wire.StreamDLQ, DLQConsumerName(store)); err == nil {
		q.DeadLetters = c.CachedInfo().NumPending
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		errs = append(errs, fmt.Sprintf("consumer %s: %v", DLQConsumerName(store), err))
	}
	info, err := a.jobs.Info(ctx, jetstream.WithSubjectFilter(wire.JobsPrefix+store+".>"))
	if err != nil {
		errs = append(errs, fmt.Sprintf("stream %s: %v", wire.StreamJobs, err))
	} else {
		byKind := map[string]uint64{}
		for subj, n := range info.State.Subjects {
			byKind[subj[strings.LastIndexByte(subj, '.')+1:]] += n
		}
		for kind, n := range byKind {
			kq := KindQueue{Kind: kind, Jobs: n}
			if at, err := oldestJob(ctx, a.jobs, wire.JobsPrefix+store+".*."+kind); err == nil && !at.IsZero() {
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
// that reported within the last 30 s), queue, running jobs and pause, and each account.
func (v *FleetView) Snapshot() FleetSnapshot {
	now := time.Now()
	snap := FleetSnapshot{At: now.UTC(), Stores: []StoreView{}, Accounts: []AccountSnapshot{}}
	var errs []string
	for _, a := range v.accounts {
		as := a.snapshot(now, &snap)
		if as.Err != "" {
			if a.name != "" {
				errs = append(errs, "account "+a.name+": "+as.Err)
			} else {
				errs = append(errs, as.Err)
			}
		}
		if snap.PolledAt.IsZero() || as.PolledAt.Before(snap.PolledAt) {
			snap.PolledAt = as.PolledAt
		}
		snap.Accounts = append(snap.Accounts, as)
	}
	snap.Err = strings.Join(errs, "; ")
	for i := range snap.Stores {
		if v.events != nil {
			w := v.events.Window(snap.Stores[i].Store, now.Add(-time.Hour), now)
			snap.Stores[i].Window = &w
		}
	}
	slices.SortFunc(snap.Stores, func(a, b StoreView) int { return strings.Compare(a.Store, b.Store) })
	return snap
}

// snapshot adds the account's stores to snap and returns the account's own part.
func (a *accountView) snapshot(now time.Time, snap *FleetSnapshot) AccountSnapshot {
	a.mu.RLock()
	defer a.mu.RUnlock()
	as := AccountSnapshot{Name: a.name, PolledAt: a.polled.UTC(), LeftOut: a.leftOut, Stores: []string{}}
	if a.settings != nil {
		s := *a.settings
		as.Setup = &s
	}
	if a.pollErr != nil {
		as.Err = a.pollErr.Error()
	}
	byStore := map[string]*StoreView{}
	get := func(st string) *StoreView {
		if sv := byStore[st]; sv != nil {
			return sv
		}
		sv := &StoreView{Store: st, Account: a.name, Workers: []WorkerBeat{}, Running: []RunningJob{}}
		byStore[st] = sv
		return sv
	}
	if a.trusted != nil {
		for st := range a.trusted {
			get(st)
		}
	} else if a.settings != nil {
		for _, st := range a.settings.Stores {
			get(st)
		}
	}
	for st, q := range a.queues {
		get(st).Queue = q
	}
	for _, b := range a.beats {
		if now.Sub(b.At) < workerBeatTTL {
			sv := get(b.Store)
			sv.Workers = append(sv.Workers, b)
		}
	}
	ttl := time.Duration(DefaultLeaseTTL)
	if a.settings != nil && a.settings.LeaseTTL > 0 {
		ttl = time.Duration(a.settings.LeaseTTL)
	}
	for _, l := range a.leases {
		if now.Sub(l.at) >= ttl {
			continue // expired: its holder is gone
		}
		store, token := leaseKeyParts(l.key)
		sv := get(store)
		sv.Running = append(sv.Running, RunningJob{Store: store, Token: token, SessionID: l.value.SessionID, Path: l.value.Path,
			Kind: l.value.Kind, Worker: l.value.Worker, JobID: l.value.JobID, Attempt: l.value.Attempt, Delivery: l.value.Delivery,
			Since: l.value.Since})
	}
	for st, p := range a.pauses {
		if p.Paused {
			p := p
			get(st).Paused = &p
		}
	}
	for _, sv := range byStore {
		slices.SortFunc(sv.Workers, func(a, b WorkerBeat) int { return strings.Compare(a.Worker, b.Worker) })
		slices.SortFunc(sv.Running, func(a, b RunningJob) int { return a.Since.Compare(b.Since) })
		as.Stores = append(as.Stores, sv.Store)
		snap.Stores = append(snap.Stores, *sv)
	}
	slices.Sort(as.Stores)
	return as
}

// Events is the event index (nil unless FleetViewOptions.Events).
func (v *FleetView) Events() *EventIndex { return v.events }

// Hooks is the hook reports' index (nil unless FleetViewOptions.Hooks).
func (v *FleetView) Hooks() *HookIndex { return v.hooks }

// accountOf is the account that holds store: the one whose list names it, else (one
// account without a list) the only one.
func (v *FleetView) accountOf(store string) (*accountView, error) {
	if err := wire.ValidateStoreName(store); err != nil {
		return nil, err
	}
	if a := v.byStore[store]; a != nil {
		return a, nil
	}
	if len(v.accounts) == 1 && v.accounts[0].trusted == nil {
		return v.accounts[0], nil
	}
	return nil, fmt.Errorf("store %s is in none of the accounts read (fleet.json)", store)
}

// DeadLetters are a store's dead letters, newest first (with FleetViewOptions.DeadLetters).
func (v *FleetView) DeadLetters(store string) []DeadLetterRecord {
	a, err := v.accountOf(store)
	if err != nil || a.dlq == nil {
		return nil
	}
	return a.dlq.list(store)
}

// deadLetterOf opens the dead letters of store's account and reads the one of sequence seq
// there (a sequence is its account's): one of another store is not found.
func (v *FleetView) deadLetterOf(ctx context.Context, store string, seq uint64) (*accountView, *DLQ, DeadLetterRecord, error) {
	a, err := v.accountOf(store)
	if err != nil {
		return nil, nil, DeadLetterRecord{}, err
	}
	q, err := OpenDLQ(ctx, a.nc)
	if err != nil {
		return nil, nil, DeadLetterRecord{}, err
	}
	recs, err := q.List(ctx, DeadLetterFilter{Store: store, Seqs: []uint64{seq}})
	if err != nil {
		return nil, nil, DeadLetterRecord{}, err
	}
	if len(recs) == 0 || recs[0].Store != store {
		return nil, nil, DeadLetterRecord{}, fmt.Errorf("dlq: store %s has no dead letter %d", store, seq)
	}
	return a, q, recs[0], nil
}

// DeadLetter is one dead letter of store by its sequence, read from its account's
// COMPACTOR_DLQ.
func (v *FleetView) DeadLetter(ctx context.Context, store string, seq uint64) (DeadLetterRecord, error) {
	_, _, rec, err := v.deadLetterOf(ctx, store, seq)
	return rec, err
}

// InstructionsError refuses to replay a job's summary instructions without the operator
// saying so: they are the text of whoever published the job (a store's key), and replaying
// them is the operator's act (docs/security.md, "Instructions are data").
type InstructionsError struct {
	Seq          uint64
	Instructions string
}

func (e *InstructionsError) Error() string {
	return fmt.Sprintf("dead letter %d not retried: its job carries summary instructions (%d bytes) that its publisher wrote; read them, then retry passing them on", e.Seq, len(e.Instructions))
}

// RetryDeadLetter enqueues a dead letter's job again and deletes the dead letter. A job
// with summary instructions is an *InstructionsError unless allowInstructions (the caller
// logs who passed them on).
func (v *FleetView) RetryDeadLetter(ctx context.Context, store string, seq uint64, allowInstructions bool) (RetryResult, error) {
	a, q, rec, err := v.deadLetterOf(ctx, store, seq)
	if err != nil {
		return RetryResult{}, err
	}
	if job, err := wire.DecodeJob(rec.Job); err == nil && job.Instructions != "" && !allowInstructions {
		return RetryResult{Seq: seq, Store: store}, &InstructionsError{Seq: seq, Instructions: job.Instructions}
	}
	res := q.Retry(ctx, []DeadLetterRecord{rec}, false, 0)
	if len(res) == 0 || !res[0].Queued {
		why := "not queued"
		if len(res) > 0 {
			why = res[0].Error
		}
		return RetryResult{Seq: seq, Store: store}, fmt.Errorf("dlq: dead letter %d not retried: %s", seq, why)
	}
	if a.dlq != nil {
		a.dlq.forget([]DeadLetterRecord{rec})
	}
	return res[0], nil
}

// PurgeDeadLetter deletes a dead letter of store.
func (v *FleetView) PurgeDeadLetter(ctx context.Context, store string, seq uint64) error {
	a, q, rec, err := v.deadLetterOf(ctx, store, seq)
	if err != nil {
		return err
	}
	if _, err := q.Delete(ctx, []DeadLetterRecord{rec}); err != nil {
		return err
	}
	if a.dlq != nil {
		a.dlq.forget([]DeadLetterRecord{rec})
	}
	return nil
}

// SetPaused pauses or resumes a store in its account, and shows it at once.
func (v *FleetView) SetPaused(ctx context.Context, store string, paused bool, reason, by string) (PauseRecord, error) {
	a, err := v.accountOf(store)
	if err != nil {
		return PauseRecord{}, err
	}
	rec, err := SetPaused(ctx, a.nc, store, paused, reason, by)
	if err == nil {
		a.mu.Lock()
		a.pauses[store] = rec
		a.mu.Unlock()
	}
	return rec, err
}

// QueuedJobs are up to limit of a store's queued jobs (waiting or running), oldest first,
// read one by one by direct gets of the next message on the store's subjects (a work
// queue takes no consumer that would overlap the store's own).
func (v *FleetView) QueuedJobs(ctx context.Context, store string, limit int) ([]QueuedJob, error) {
	a, err := v.accountOf(store)
	if err != nil {
		return nil, err
	}
	var out []QueuedJob
	filter := wire.JobsPrefix + store + ".>"
	for seq := uint64(1); len(out) < limit; {
		m, err := a.jobs.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("queued jobs of %s: %w", store, err)
		}
		qj := QueuedJob{Seq: m.Sequence, At: m.Time.UTC(), Subject: m.Subject}
		var j wire.Job
		parts := strings.Split(m.Subject, ".")
		switch {
		case json.Unmarshal(m.Data, &j) != nil:
			qj.Foreign = "not a job"
		case len(parts) != 5 || j.Store != store || wire.SessionToken(j.SessionID) != parts[3] || j.Kind != parts[4]:
			// A worker admits a job only of its subject's store, session and kind (foreign.go).
			qj.Foreign = fmt.Sprintf("its job names store %q, session %q, kind %q: not its subject's; a worker refuses it", j.Store, j.SessionID, j.Kind)
		default:
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
	// Foreign says why the job's fields are not shown: it is not a job, or it names
	// another store, session or kind than its subject.
	Foreign string `json:"foreign,omitempty"`
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
func (v *FleetView) followEvents(ctx, runCtx context.Context, a *accountView) error {
	str, err := a.js.Stream(ctx, wire.StreamEvents)
	if err != nil {
		return fmt.Errorf("fleet view: stream %s: %w", wire.StreamEvents, err)
	}
	caughtUp := make(chan struct{})
	var once sync.Once
	if str.CachedInfo().State.Msgs == 0 {
		once.Do(func() { close(caughtUp) })
	}
	oc, err := str.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return fmt.Errorf("fleet view: read %s: %w", wire.StreamEvents, err)
	}
	cc, err := oc.Consume(func(m jetstream.Msg) {
		switch ev, err := eventOn(m.Subject(), m.Data()); {
		case err != nil:
			a.refuse()
		case !a.holds(ev.Store):
			a.refuse()
		case ev.SessionID == "":
			// a job whose payload could not be read: no session's history
		default:
			v.events.Add(ev)
		}
		if meta, err := m.Metadata(); err == nil && meta.NumPending == 0 {
			once.Do(func() { close(caughtUp) })
		}
	})
	if err != nil {
		return fmt.Errorf("fleet view: read %s: %w", wire.StreamEvents, err)
	}
	v.closers = append(v.closers, cc.Stop)
	select {
	case <-caughtUp:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("fleet view: read %s: %w", wire.StreamEvents, ctx.Err())
	case <-runCtx.Done():
		return runCtx.Err()
	}
}

// eventOn reads an event published on subject (compactor.events.<store>.<token>.<job
// seq>): one that names another store, session or job than its subject is a
// *ForeignError (foreign.go), and is shown nowhere.
func eventOn(subject string, data []byte) (wire.Event, error) {
	var ev wire.Event
	if err := json.Unmarshal(data, &ev); err != nil {
		return ev, fmt.Errorf("event on %s: %w", subject, err)
	}
	parts := strings.Split(strings.TrimPrefix(subject, wire.EventsPrefix), ".")
	if len(parts) != 3 {
		return ev, fmt.Errorf("event on %s: not an event subject", subject)
	}
	// An event of a job whose payload could not be read names no session.
	if ev.Store != parts[0] || (ev.SessionID != "" && wire.SessionToken(ev.SessionID) != parts[1]) || strconv.FormatUint(ev.JobSeq, 10) != parts[2] {
		return ev, &ForeignError{Kind: "event", Where: subject, Store: parts[0], Session: parts[1], NamesStore: ev.Store, NamesSession: ev.SessionID}
	}
	return ev, nil
}

// SessionEvents reads a session's events from COMPACTOR_EVENTS (compactor events), oldest
// first; with follow, it then calls fn with each new one until ctx ends. Events that name
// another store, session or job than their subject are left out, and counted in leftOut.
func SessionEvents(ctx context.Context, nc *nats.Conn, store, sessionID string, follow bool, fn func(wire.Event)) (leftOut int, err error) {
	return guard(ctx, nc, func(ctx context.Context) (int, error) {
		return sessionEvents(ctx, nc, store, sessionID, follow, fn)
	})
}

func sessionEvents(ctx context.Context, nc *nats.Conn, store, sessionID string, follow bool, fn func(wire.Event)) (int, error) {
	leftOut := 0
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	str, err := js.Stream(ctx, wire.StreamEvents)
	if err != nil {
		if unavailable(err) {
			err = diagnose(ctx, js, wire.StreamEvents, err)
		}
		return 0, fmt.Errorf("events: stream %s: %w", wire.StreamEvents, err)
	}
	filter := wire.EventsPrefix + store + ".>"
	if sessionID != "" {
		filter = wire.EventSubject(store, sessionID) + ".*"
	}
	oc, err := str.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return 0, fmt.Errorf("events: %w", err)
	}
	for {
		batch, err := oc.Fetch(256, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			if ctx.Err() != nil {
				return leftOut, nil
			}
			return leftOut, fmt.Errorf("events: %w", err)
		}
		got, last := 0, false
		for m := range batch.Messages() {
			got++
			if ev, err := eventOn(m.Subject(), m.Data()); err == nil {
				fn(ev)
			} else {
				leftOut++
			}
			if meta, err := m.Metadata(); err == nil {
				last = meta.NumPending == 0
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			if ctx.Err() != nil {
				return leftOut, nil
			}
			return leftOut, fmt.Errorf("events: %w", err)
		}
		if !follow && (got == 0 || last) {
			return leftOut, nil
		}
		if ctx.Err() != nil {
			return leftOut, nil
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
