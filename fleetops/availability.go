package fleetops

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/compactor-dev/compactor/access"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// What can make a compactor stream unusable, told apart so that enqueue, sweep and a
// starting worker name the real problem. A *StreamError wraps one of them.
var (
	// ErrNoService: the stream does not exist: no compactor service has started against
	// this NATS (or the client talks to the wrong one).
	ErrNoService = errors.New("stream not found")
	// ErrStreamOffline: the stream exists but has no leader: the servers that hold it are
	// down, or a leader is being elected.
	ErrStreamOffline = errors.New("stream offline")
	// ErrNoJetStream: nothing answers the JetStream API: JetStream is disabled, or a
	// cluster has lost the majority it needs to run it.
	ErrNoJetStream = errors.New("JetStream unavailable")
)

// StreamError says why a stream cannot be used.
type StreamError struct {
	Stream string
	Kind   error  // ErrNoService, ErrStreamOffline or ErrNoJetStream
	Detail string // what was seen, and what an operator can do
	Err    error  // the error that led to the diagnosis
}

func (e *StreamError) Error() string {
	var what string
	switch e.Kind {
	case ErrNoService:
		what = fmt.Sprintf("%s does not exist on this NATS server: no `compactor run` has started against it, and only `compactor run` sets it up (start one, or check --nats-url)", e.resource())
	case ErrStreamOffline:
		what = fmt.Sprintf("%s is offline", e.resource())
	default:
		what = "JetStream is unavailable"
	}
	if e.Detail != "" {
		what += ": " + e.Detail
	}
	if e.Err != nil {
		what += " (" + e.Err.Error() + ")"
	}
	return what
}

// resource names what Stream holds: "bucket NAME" for a KV bucket's stream, else "stream NAME".
func (e *StreamError) resource() string {
	if b, ok := strings.CutPrefix(e.Stream, "KV_"); ok {
		return "bucket " + b
	}
	return "stream " + e.Stream
}

// Unwrap exposes both the kind and the original error.
func (e *StreamError) Unwrap() []error { return []error{e.Kind, e.Err} }

// Unavailable reports whether err from a publish or a JetStream request may mean that a
// stream is missing or down, which diagnose can explain.
func Unavailable(err error) bool {
	return errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) || transient(err)
}

// Diagnose finds out why stream did not answer (cause is the error seen) and returns a
// *StreamError, or cause itself when the stream looks healthy now. It makes at most two
// requests of its own (2 s each), even when ctx has ended, unless ctx was cancelled. A
// Refusal that ended ctx is the answer; the stream's information and the account's, which
// a store's roles may not read, are asked as probes: refused, cause is returned as it is.
func Diagnose(ctx context.Context, js jetstream.JetStream, stream string, cause error) error {
	if pe := access.Refusal(ctx); pe != nil {
		return pe
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return cause
	}
	se := &StreamError{Stream: stream, Err: cause}
	str, err := probe(ctx, js.Conn(), access.APIPrefix+"STREAM.INFO."+stream, func(ctx context.Context) (jetstream.Stream, error) { return js.Stream(ctx, stream) })
	var pe *access.PermissionError
	switch {
	case errors.As(err, &pe):
		return cause // this user may not look: say what was seen
	case err == nil:
		ci := str.CachedInfo().Cluster
		if ci == nil || ci.Leader != "" {
			return cause // it answers now: a passing fault
		}
		se.Kind, se.Detail = ErrStreamOffline, "it has no leader; replicas: "+peers(ci)+electionHint
		return se
	case errors.Is(err, jetstream.ErrStreamNotFound):
		se.Kind = ErrNoService
		return se
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		se.Kind, se.Detail = ErrNoJetStream, "JetStream is not enabled on this NATS server or account"
		return se
	case apiCode(err) == errCodeStreamOffline || apiCode(err) == errCodeStreamOfflineReason:
		se.Kind, se.Detail = ErrStreamOffline, "every server holding it is down"+electionHint
		return se
	case errors.Is(err, nats.ErrNoResponders):
		se.Kind, se.Detail = ErrNoJetStream, "nothing answers the JetStream API on this NATS server (JetStream disabled, or another account)"
		return se
	}
	// The stream did not answer. If the JetStream API does, the stream itself is down.
	_, aerr := probe(ctx, js.Conn(), access.APIPrefix+"INFO", func(ctx context.Context) (*jetstream.AccountInfo, error) { return js.AccountInfo(ctx) })
	if errors.As(aerr, &pe) {
		return cause
	}
	if aerr == nil {
		se.Kind, se.Detail = ErrStreamOffline, "JetStream answers but the stream does not: the servers holding it are down or electing its leader"+electionHint
		return se
	}
	se.Kind, se.Detail = ErrNoJetStream, "the JetStream API does not answer: a cluster needs a majority of its servers up to elect a meta leader"
	return se
}

const electionHint = " (an election takes a few seconds; a stream with 1 replica stops while its one server is down: see --replicas)"

func peers(ci *jetstream.ClusterInfo) string {
	if len(ci.Replicas) == 0 {
		return "none known"
	}
	var out []string
	for _, p := range ci.Replicas {
		s := p.Name
		if p.Offline {
			s += " (offline)"
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

// apiCode is the JetStream API error code in err's chain (0 if none).
func apiCode(err error) jetstream.ErrorCode {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode
	}
	return 0
}
