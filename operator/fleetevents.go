package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The events a view follows (the event index) and a session's events for `compactor events`.

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
// *ForeignError (fleetops/foreign.go), and is shown nowhere.
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
		return ev, &fleetops.ForeignError{Kind: "event", Where: subject, Store: parts[0], Session: parts[1], NamesStore: ev.Store, NamesSession: ev.SessionID}
	}
	return ev, nil
}

// SessionEvents reads a session's events from COMPACTOR_EVENTS (compactor events), oldest
// first; with follow, it then calls fn with each new one until ctx ends. Events that name
// another store, session or job than their subject are left out, and counted in leftOut.
func SessionEvents(ctx context.Context, nc *nats.Conn, store, sessionID string, follow bool, fn func(wire.Event)) (leftOut int, err error) {
	return access.Guard(ctx, nc, func(ctx context.Context) (int, error) {
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
		if fleetops.Unavailable(err) {
			err = fleetops.Diagnose(ctx, js, wire.StreamEvents, err)
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
