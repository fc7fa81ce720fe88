package access

import (
	"context"
	"errors"
	"regexp"
	"sync"

	"github.com/nats-io/nats.go"
)

// A NATS server refuses a publish or a subscription outside the user's permissions with an
// asynchronous error ("Permissions Violation for Publish to ..."); a request whose publish
// was refused then waits for its timeout, and a JetStream call looks like a server that is
// not ready. Refusals turns the server's words into a *PermissionError at once: every
// operation watched when it arrives ends with it (Watch), and the service logs it.

// Refusals follows the permission violations reported on one connection.
type Refusals struct {
	role   Role
	stores []string

	mu       sync.Mutex
	watching map[*refusalWatch]struct{}
	quiet    map[string]chan *PermissionError // expected refusals (probes), by subject
	first    *PermissionError
	onRefuse func(*PermissionError) // the service's log
	onOther  func(error)
}

type refusalWatch struct{ cancel context.CancelCauseFunc }

func NewRefusals(role Role, stores []string) *Refusals {
	return &Refusals{role: role, stores: stores, watching: map[*refusalWatch]struct{}{}, quiet: map[string]chan *PermissionError{}}
}

var RefusalsByConn sync.Map // *nats.Conn → *Refusals

// RefusalsOf returns the refusals of a connection made by NATSConfig.Connect (nil for
// others).
func RefusalsOf(nc *nats.Conn) *Refusals {
	if nc == nil {
		return nil
	}
	r, _ := RefusalsByConn.Load(nc)
	rr, _ := r.(*Refusals)
	return rr
}

var violationRe = regexp.MustCompile(`(?i)permissions violation for (publish|subscription) to "?([^"\s]+)"?`)

// parseViolation reads the server's words, or returns nil for another error.
func (r *Refusals) parseViolation(err error) *PermissionError {
	if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return nil
	}
	m := violationRe.FindStringSubmatch(err.Error())
	if m == nil {
		return &PermissionError{Op: "publish or subscribe", Subject: "(unnamed subject)", Role: r.role, Stores: r.stores}
	}
	op := "publish"
	if m[1] == "subscription" || m[1] == "Subscription" {
		op = "subscribe"
	}
	return &PermissionError{Op: op, Subject: m[2], Role: r.role, Stores: r.stores}
}

// handle is the connection's error handler.
func (r *Refusals) handle(_ *nats.Conn, _ *nats.Subscription, err error) {
	pe := r.parseViolation(err)
	r.mu.Lock()
	if pe == nil {
		other := r.onOther
		r.mu.Unlock()
		if other != nil {
			other(err)
		}
		return
	}
	if ch, ok := r.quiet[pe.Subject]; ok {
		r.mu.Unlock()
		select {
		case ch <- pe:
		default:
		}
		return
	}
	if r.first == nil {
		r.first = pe
	}
	for w := range r.watching {
		w.cancel(pe)
	}
	log := r.onRefuse
	r.mu.Unlock()
	if log != nil {
		log(pe)
	}
}

// OnRefusal has f called with each refusal (not those Expect waits for), and onOther with
// the connection's other asynchronous errors.
func (r *Refusals) OnRefusal(f func(*PermissionError), onOther func(error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onRefuse, r.onOther = f, onOther
}

// Watch returns a context that ends, with the *PermissionError as its cause, at the first
// Refusal reported while it lives.
func (r *Refusals) Watch(ctx context.Context) (context.Context, context.CancelFunc) {
	wctx, cancel := context.WithCancelCause(ctx)
	w := &refusalWatch{cancel: cancel}
	r.mu.Lock()
	r.watching[w] = struct{}{}
	r.mu.Unlock()
	return wctx, func() {
		r.mu.Lock()
		delete(r.watching, w)
		r.mu.Unlock()
		cancel(context.Canceled)
	}
}

// Expect marks a refusal of subject as expected (a probe of what the user may do): it
// goes to the returned channel instead of ending watched operations. done ends that.
func (r *Refusals) Expect(subject string) (refused <-chan *PermissionError, done func()) {
	ch := make(chan *PermissionError, 1)
	r.mu.Lock()
	r.quiet[subject] = ch
	r.mu.Unlock()
	return ch, func() {
		r.mu.Lock()
		if r.quiet[subject] == ch {
			delete(r.quiet, subject)
		}
		r.mu.Unlock()
	}
}

// First is the first refusal reported on the connection, or nil.
func (r *Refusals) First() *PermissionError {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first
}

// Refusal is the *PermissionError that ended ctx, or nil.
func Refusal(ctx context.Context) *PermissionError {
	var pe *PermissionError
	if errors.As(context.Cause(ctx), &pe) {
		return pe
	}
	return nil
}

// Guard runs f with a context that a refusal on nc ends at once; the refusal, when there
// was one, is f's error.
func Guard[T any](ctx context.Context, nc *nats.Conn, f func(context.Context) (T, error)) (T, error) {
	r := RefusalsOf(nc)
	if r == nil {
		return f(ctx)
	}
	gctx, cancel := r.Watch(ctx)
	defer cancel()
	v, err := f(gctx)
	if pe := Refusal(gctx); pe != nil {
		return v, pe
	}
	return v, err
}
