package operator

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

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/fleetops"
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
	settings *fleetops.FleetSettings
	beats    map[string]fleetops.WorkerBeat // by bucket key
	leases   map[string]leaseSeen           // by bucket key
	pauses   map[string]fleetops.PauseRecord
	queues   map[string]StoreQueue
	polled   time.Time
	pollErr  error
	// leftOut counts the records of this account that name a store it does not hold, or
	// another store or session than their key or subject (pipeline/foreign.go).
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
	value fleetops.LeaseRecord
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
	Setup *fleetops.FleetSettings `json:"setup,omitempty"`
	// LeftOut counts the account's records left out: they name a store the account does
	// not hold, or another store or session than their key or subject.
	LeftOut uint64 `json:"leftOut,omitempty"`
	Err     string `json:"error,omitempty"`
}

// StoreView is one store.
type StoreView struct {
	Store   string                `json:"store"`
	Account string                `json:"account,omitempty"`
	Workers []fleetops.WorkerBeat `json:"workers"`
	Queue   StoreQueue            `json:"queue"`
	Running []RunningJob          `json:"running"`
	Paused  *fleetops.PauseRecord `json:"paused,omitempty"`
	Window  *WindowCounts         `json:"window,omitempty"` // the last hour's jobs (with the event index)
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
		a := &accountView{name: fa.Name, nc: fa.Conn, beats: map[string]fleetops.WorkerBeat{}, leases: map[string]leaseSeen{},
			pauses: map[string]fleetops.PauseRecord{}, queues: map[string]StoreQueue{}}
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
		if _, err := access.Guard(ctx, a.nc, func(ctx context.Context) (struct{}, error) { return struct{}{}, v.openAccount(ctx, runCtx, a) }); err != nil {
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
	if a.settings, err = fleetops.ReadFleet(ctx, a.nc); err != nil {
		return err
	}
	if a.jobs, err = js.Stream(ctx, wire.StreamJobs); err != nil {
		if fleetops.Unavailable(err) {
			err = fleetops.Diagnose(ctx, js, wire.StreamJobs, err)
		}
		return fmt.Errorf("fleet view: stream %s: %w", wire.StreamJobs, err)
	}
	watches := []struct {
		bucket, prefix string
		apply          func(jetstream.KeyValueEntry)
	}{
		{wire.BucketWorkers, "", a.applyBeat},
		{wire.BucketLeases, "", a.applyLease},
		{wire.BucketSettings, strings.TrimSuffix(wire.PauseKeyPrefix, "."), a.applyPause},
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
			if fleetops.Delivered(m) || json.Unmarshal(m.Data, &r) != nil || r.Outcome == "" {
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
	w, err := fleetops.OpenBucket(js, bucket).Watch(runCtx, prefix)
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
	b, ok := fleetops.BeatOf(e)
	if !ok {
		return
	}
	keyStore, _, _ := strings.Cut(e.Key(), ".")
	if b.Store != keyStore || fleetops.WorkerKey(b.Store, b.Worker) != e.Key() || !a.holds(keyStore) {
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
	var lv fleetops.LeaseRecord
	if fleetops.NewerThan(wire.BucketLeases, e.Key(), e.Value(), fleetops.LeaseV) == nil {
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
// session's key with BaseLeaseSuffix and, for a slot, the slot's number).
func leaseKeyParts(key string) (store, token string) {
	store, token, _ = strings.Cut(key, ".")
	if i := strings.Index(token, fleetops.BaseLeaseSuffix); i >= 0 && strings.Trim(token[i+len(fleetops.BaseLeaseSuffix):], "0123456789") == "" {
		token = token[:i]
	}
	return store, token
}

// applyPause keeps a store's pause record (its store is its key's).
func (a *accountView) applyPause(e jetstream.KeyValueEntry) {
	store := strings.TrimPrefix(e.Key(), wire.PauseKeyPrefix)
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
	if r, err := fleetops.PauseOf(store, e.Value()); err == nil {
		a.pauses[store] = *r
	}
}
