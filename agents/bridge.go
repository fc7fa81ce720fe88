package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/outcome"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// Bridges: Pi's extension asks, from inside Pi's session_before_compact hook, for the
// session's prepared summary extended to the cut Pi makes now (package engine's Bridge
// says how). It is a core NATS request with a reply, not a job: the hook waits for it
// (within its deadline, 200 ms by default) and nothing is queued or retried; without an
// answer in time the extension uses the preparation as it is, or lets Pi compact.
//
// Subject: compactor.bridge.<store>.<session token>. Every worker of the store subscribes
// in one queue group, so one of them answers; it reads the store's file itself (the
// request names a path relative to the store root, resolved as a job's is).

// bridgeTimeout bounds one bridge: the hook that asked has given up long before.
const bridgeTimeout = 5 * time.Second

// MaxBridges bounds the bridges one worker runs at once (each reads a session file).
const MaxBridges = 8

type bridgeMetrics struct {
	total   *prometheus.CounterVec
	latency *prometheus.HistogramVec
}

func newBridgeMetrics(reg prometheus.Registerer) *bridgeMetrics {
	m := &bridgeMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "compactor_bridges_total",
			Help: "Prepared summaries extended to Pi's cut at hook time, by outcome (done, stale, failed).",
		}, []string{"store", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "compactor_bridge_seconds",
			Help:    "Time to answer a bridge request (read the session, extract, merge).",
			Buckets: []float64{.001, .002, .005, .01, .02, .05, .1, .2, .5, 1},
		}, []string{"store"}),
	}
	m.total = registered(reg, m.total)
	m.latency = registered(reg, m.latency)
	return m
}

// ServeBridges answers bridge requests for this worker's stores. Requests run in bg (so
// the shutdown waits for them), at most MaxBridges at a time; a request beyond that is
// answered at once with an error, since the hook cannot wait.
func ServeBridges(ctx context.Context, s *Env) ([]*nats.Subscription, error) {
	if s.Bridger == nil || s.Prepared == nil {
		return nil, nil
	}
	bm := newBridgeMetrics(s.Reg)
	sem := make(chan struct{}, MaxBridges)
	var subs []*nats.Subscription
	for _, st := range s.Stores {
		subj := wire.BridgePrefix + st + ".*"
		sub, err := s.NC.QueueSubscribe(subj, "compactor-bridge", func(m *nats.Msg) {
			if fleetops.Delivered(m) || m.Reply == "" {
				return // not a client's request (see delivered)
			}
			select {
			case sem <- struct{}{}:
			default:
				s.reply(m, wire.BridgeReply{V: wire.BridgeVersion, Error: "busy: too many bridges at once"})
				return
			}
			s.Go(func() {
				start := time.Now()
				after := &AfterReplies{}
				rep := s.bridge(WithAfterReply(context.Background(), after), st, m.Subject, m.Data)
				ended := outcome.Done
				switch {
				case rep.Stale:
					ended = outcome.Stale
				case rep.Error != "":
					ended = outcome.Failed
				}
				bm.total.WithLabelValues(st, string(ended)).Inc()
				bm.latency.WithLabelValues(st).Observe(time.Since(start).Seconds())
				s.Log.Debug("bridge", "store", st, "extract", extractRequest(m.Data), "outcome", string(ended), "error", rep.Error, "duration_s", time.Since(start).Seconds())
				s.reply(m, rep)
				<-sem
				after.Run(ctx) // what the answer leads to (AfterReply), past the reply and the bound
			})
		})
		if err != nil {
			for _, sb := range subs {
				_ = sb.Unsubscribe()
			}
			return nil, fmt.Errorf("subscribe %s: %w", subj, err)
		}
		subs = append(subs, sub)
	}
	return subs, nil
}

// extractRequest reports whether a request's payload asks for an extract (for the log).
func extractRequest(data []byte) bool {
	var r struct {
		Extract bool `json:"extract"`
	}
	return json.Unmarshal(data, &r) == nil && r.Extract
}

func (s *Env) reply(m *nats.Msg, rep wire.BridgeReply) {
	b, err := json.Marshal(rep)
	if err == nil {
		err = m.Respond(b)
	}
	if err != nil {
		s.Log.Debug("bridge reply not sent", "err", err)
	}
}

// bridge handles one request of store st.
func (s *Env) bridge(bctx context.Context, st, subject string, data []byte) wire.BridgeReply {
	var req wire.BridgeRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return wire.BridgeReply{V: wire.BridgeVersion, Error: "not a bridge request: " + err.Error()}
	}
	if req.Store != st || wire.BridgeSubject(st, req.SessionID) != subject {
		err := &fleetops.ForeignError{Kind: "bridge request", Where: subject, Store: st, Session: fleetops.SessionTokenOf(subject), NamesStore: req.Store, NamesSession: req.SessionID}
		s.Foreign(st, ForeignBridge, err)
		return wire.BridgeReply{V: wire.BridgeVersion, Error: err.Error()}
	}
	if req.V != 1 || req.SessionID == "" || req.FirstKeptEntryID == "" {
		return wire.BridgeReply{V: wire.BridgeVersion, Error: fmt.Sprintf("bad bridge request (v %d, store %q, session %q, cut %q)", req.V, req.Store, req.SessionID, req.FirstKeptEntryID)}
	}
	if req.PiVersion != "" {
		r, err := pi.ParseRelease(req.PiVersion)
		if err != nil {
			return wire.BridgeReply{V: wire.BridgeVersion, Error: "bad bridge request: piVersion: " + err.Error()}
		}
		if !r.Known() {
			s.CountPiUnknown(st, r.String())
		}
	}
	file, err := s.Resolve(st, req.Path)
	if err != nil {
		return wire.BridgeReply{V: wire.BridgeVersion, Error: err.Error()}
	}
	ctx, cancel := context.WithTimeout(bctx, bridgeTimeout)
	defer cancel()
	var raw []byte
	if !req.Extract {
		if raw, err = (kvPrepared{kv: s.Prepared}).Get(ctx, st, req.SessionID); err != nil {
			return wire.BridgeReply{V: wire.BridgeVersion, Error: err.Error()}
		}
		if raw == nil {
			return wire.BridgeReply{V: wire.BridgeVersion, Error: "nothing prepared", Stale: true}
		}
		if err := checkPrepared(raw, st, req.SessionID, wire.PreparedSubject(st, req.SessionID)); err != nil {
			s.Foreign(st, ForeignPrepared, err)
			return wire.BridgeReply{V: wire.BridgeVersion, Error: err.Error()}
		}
	}
	out, err := s.Bridger.Bridge(ctx, req, file, raw)
	if err != nil {
		var st interface{ Stale() bool }
		return wire.BridgeReply{V: wire.BridgeVersion, Error: err.Error(), Stale: errors.As(err, &st) && st.Stale()}
	}
	return wire.BridgeReply{V: wire.BridgeVersion, Prepared: out}
}
