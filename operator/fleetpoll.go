package operator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// The view's poll: each account's queues and settings read every FleetViewOptions.Poll,
// and the snapshot made of what the watches and the poll last saw.

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
	settings, err := fleetops.ReadFleet(ctx, a.nc)
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
func (a *accountView) knownStores(settings *fleetops.FleetSettings) []string {
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
	if c, err := a.js.Consumer(ctx, wire.StreamJobs, fleetops.ConsumerName(store)); err == nil {
		ci := c.CachedInfo()
		q.Pending, q.InFlight = ci.NumPending, uint64(ci.NumAckPending)
	} else {
		errs = append(errs, fmt.Sprintf("consumer %s: %v", fleetops.ConsumerName(store), err))
	}
	if c, err := a.js.Consumer(ctx, wire.StreamDLQ, fleetops.DLQConsumerName(store)); err == nil {
		q.DeadLetters = c.CachedInfo().NumPending
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		errs = append(errs, fmt.Sprintf("consumer %s: %v", fleetops.DLQConsumerName(store), err))
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
			if at, err := fleetops.OldestJob(ctx, a.jobs, wire.JobsPrefix+store+".*."+kind); err == nil && !at.IsZero() {
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
		sv := &StoreView{Store: st, Account: a.name, Workers: []fleetops.WorkerBeat{}, Running: []RunningJob{}}
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
		if now.Sub(b.At) < fleetops.WorkerBeatTTL {
			sv := get(b.Store)
			sv.Workers = append(sv.Workers, b)
		}
	}
	ttl := time.Duration(fleetops.DefaultLeaseTTL)
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
		slices.SortFunc(sv.Workers, func(a, b fleetops.WorkerBeat) int { return strings.Compare(a.Worker, b.Worker) })
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
