package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// NewPreparedStore is the store of prepared summaries and bases in the bucket kv.
func NewPreparedStore(kv *fleetops.Bucket, log *slog.Logger) PreparedStore {
	return kvPrepared{kv: kv, log: log}
}

type kvPrepared struct {
	kv  *fleetops.Bucket
	log *slog.Logger
}

func (p kvPrepared) Get(ctx context.Context, store, sessionID string) ([]byte, error) {
	e, err := p.kv.Get(ctx, wire.PreparedKey(store, sessionID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("prepared %s: %w", wire.PreparedKey(store, sessionID), err)
	}
	return e.Value(), nil
}

// Put stores the session's prepared summary in place of the one there, unless that one is
// of a newer schema version than value: a newer compactor's preparation is not replaced
// by an older shape (it is kept, and the skip logged; its readers ignore what they cannot
// read, and either is only a preparation).
func (p kvPrepared) Put(ctx context.Context, store, sessionID string, value []byte) error {
	key := wire.PreparedKey(store, sessionID)
	mine, _ := fleetops.RecordV(value)
	for n := range 5 {
		if n > 0 {
			if err := fleetops.AfterConflict(ctx, n); err != nil {
				return fmt.Errorf("prepared %s: %w", key, err)
			}
		}
		e, err := p.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			if _, err = p.kv.Create(ctx, key, value); errors.Is(err, jetstream.ErrKeyExists) {
				continue
			}
		case err != nil:
		default:
			if nerr := fleetops.NewerThan(wire.BucketPrepared, key, e.Value(), mine); nerr != nil {
				p.log.Warn("prepared summary not stored: the session has one of a newer schema version, which is kept", "store", store, "session", sessionID, "err", nerr)
				return nil
			}
			if _, err = p.kv.Update(ctx, key, value, e.Revision()); fleetops.IsWrongLastSeq(err) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
				continue
			}
		}
		if err != nil {
			return fmt.Errorf("prepared %s: %w", key, err)
		}
		return nil
	}
	return fmt.Errorf("prepared %s: too many concurrent updates", key)
}

func (p kvPrepared) GetBase(ctx context.Context, store, sessionID string) ([]byte, error) {
	e, err := p.kv.Get(ctx, wire.BaseKey(store, sessionID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("base %s: %w", wire.BaseKey(store, sessionID), err)
	}
	return e.Value(), nil
}

func (p kvPrepared) UpdateBase(ctx context.Context, store, sessionID string, f func(current []byte) ([]byte, error)) error {
	key := wire.BaseKey(store, sessionID)
	for n := range 8 {
		if n > 0 {
			if err := fleetops.AfterConflict(ctx, n); err != nil {
				return fmt.Errorf("base %s: %w", key, err)
			}
		}
		var cur []byte
		var rev uint64
		e, err := p.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return fmt.Errorf("base %s: %w", key, err)
		default:
			cur, rev = e.Value(), e.Revision()
		}
		next, err := f(cur)
		if err != nil || next == nil {
			return err
		}
		if rev == 0 {
			_, err = p.kv.Create(ctx, key, next)
		} else {
			_, err = p.kv.Update(ctx, key, next, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || fleetops.IsWrongLastSeq(err) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue // written meanwhile: decide again on what is there now
		}
		if err != nil {
			return fmt.Errorf("base %s: %w", key, err)
		}
		return nil
	}
	return fmt.Errorf("base %s: too many concurrent updates", key)
}

// hookMetrics count the extension's reports.
type hookMetrics struct {
	lookups *prometheus.CounterVec
	latency *prometheus.HistogramVec
	hooks   *prometheus.CounterVec
	span    *prometheus.CounterVec
	bases   *prometheus.CounterVec
}

func newHookMetrics(reg prometheus.Registerer) *hookMetrics {
	m := &hookMetrics{
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "compactor_prepared_lookups_total",
			Help: "Runs of Pi's session_before_compact hook reported by the extension, by outcome (hit, miss, stale, error).",
		}, []string{"store", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "compactor_prepared_lookup_seconds",
			Help:    "Time the extension spent in Pi's hook looking up the prepared summary.",
			Buckets: []float64{.001, .002, .005, .01, .02, .05, .1, .2, .5, 1},
		}, []string{"store"}),
	}
	m.hooks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "compactor_prepared_hook_total",
		Help: "Runs of Pi's session_before_compact hook by what answered it (prepared, extract, pi: Pi's own summary) and why not a preparation (none when one was used).",
	}, []string{"store", "result", "reason"})
	m.span = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "compactor_summary_span_tokens_total",
		Help: "Tokens (Pi's estimate) of the spans Pi's compactions summarized, by what wrote the summary of them: model (a preparation, Pi's own summary) or extract (the extract, a bridge's gap).",
	}, []string{"store", "source"})
	m.bases = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "compactor_summary_base_total",
		Help: "Compactions by what their summary's older part was built on (model: the session's base, a model's summary of what an extract answered; compaction: the previous compaction's text; none; pi: Pi's own) and why a base there was not used (none when it was, or there was none).",
	}, []string{"store", "base", "refused"})
	m.lookups = registered(reg, m.lookups)
	m.latency = registered(reg, m.latency)
	m.hooks = registered(reg, m.hooks)
	m.span = registered(reg, m.span)
	m.bases = registered(reg, m.bases)
	return m
}

// registered registers c, or returns the collector already registered under its name
// (a service that starts its workers twice, as RunOnce then Run, counts on one series).
func registered[T prometheus.Collector](reg prometheus.Registerer, c T) T {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(T); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}

// WatchHookReports counts the extension's reports for this worker's stores, and deletes the
// session's prepared summary: the hook runs when Pi compacts, so the summary was used or
// is compacted past. A queue group makes one worker of the fleet handle each report.
func WatchHookReports(s *Env) ([]*nats.Subscription, error) {
	hm := newHookMetrics(s.Reg)
	var subs []*nats.Subscription
	for _, st := range s.Stores {
		subj := wire.HooksPrefix + st + ".*"
		sub, err := s.NC.QueueSubscribe(subj, "compactor-hooks", func(m *nats.Msg) {
			var r wire.HookReport
			if fleetops.Delivered(m) || json.Unmarshal(m.Data, &r) != nil || r.Outcome == "" {
				return
			}
			if r.Store != st || wire.HookSubject(st, r.SessionID) != m.Subject {
				s.Foreign(st, ForeignHook, &fleetops.ForeignError{Kind: "hook report", Where: m.Subject, Store: st, Session: fleetops.SessionTokenOf(m.Subject),
					NamesStore: r.Store, NamesSession: r.SessionID})
				return
			}
			if s.Prepared != nil {
				s.Go(func() { Forget(context.Background(), s.Prepared, s.Log, st, r.SessionID) })
			}
			hm.lookups.WithLabelValues(st, r.Outcome).Inc()
			hm.latency.WithLabelValues(st).Observe(r.LatencyMs / 1000)
			if r.Result != "" {
				result, reason := fleetops.HookLabels(r)
				hm.hooks.WithLabelValues(st, result, reason).Inc()
			}
			if r.Outcome == wire.HookHit || r.Result == wire.HookResultPi {
				if sp := r.SpanTokens; sp != nil && sp.Model >= 0 && sp.Extract >= 0 {
					hm.span.WithLabelValues(st, "model").Add(float64(sp.Model))
					hm.span.WithLabelValues(st, "extract").Add(float64(sp.Extract))
				}
				base, refused := fleetops.BaseLabels(r)
				hm.bases.WithLabelValues(st, base, refused).Inc()
			}
			s.Log.Debug("prepared summary lookup", "store", st, "session", r.SessionID, "outcome", r.Outcome, "result", r.Result,
				"reason_code", r.ReasonCode, "pi_reason", r.PiReason, "reason", r.Reason, "latency_ms", r.LatencyMs,
				"bridged", r.Bridged, "bridged_entries", r.BridgedEntries, "session_counts", r.Counts,
				"span_tokens", r.SpanTokens, "base", r.Base, "base_refused", r.BaseRefused)
		})
		if err != nil {
			return nil, fmt.Errorf("subscribe %s: %w", subj, err)
		}
		subs = append(subs, sub)
	}
	return subs, nil
}

// Forget deletes the session's prepared summary: it was used, or the session was
// compacted past it. A summary not deleted (NATS down) expires after PreparedTTL.
func Forget(ctx context.Context, kv *fleetops.Bucket, log *slog.Logger, store, sessionID string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := kv.Delete(ctx, wire.PreparedKey(store, sessionID)); err != nil {
		log.Warn("prepared summary not deleted; it expires by itself", "store", store, "session", sessionID, "err", err)
	}
}
