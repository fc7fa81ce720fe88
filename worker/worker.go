package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/compactor-dev/compactor/agents"
	"github.com/compactor-dev/compactor/configs"
	"github.com/compactor-dev/compactor/engine"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/outcome"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/sweep"
	"github.com/compactor-dev/compactor/wire"
)

// Handler works the jobs the pipeline delivers with e, exactly as `compactor compact` (or
// `branch-summary`, or `prepare`) runs, by the rules of the Pi release the job names (else
// its store's, pv). A release compactor does not know is worked as pv's policy says: with a
// warning and piUnknown in the result (its event, and the metric
// compactor_pi_version_unknown_total), or skipped. prepared returns the store of prepared
// summaries: the service's bucket, which exists once the service has started, hence a
// function.
//
// q queues the jobs a base job asks for (a merge after a span's summary landed); its zero
// value queues none.
func Handler(e *engine.Engine, pv PiVersions, prepared func() agents.PreparedStore, q Queues) pipeline.Handler {
	return pipeline.HandlerFunc(func(ctx context.Context, job wire.Job, file string) (wire.Result, error) {
		pi, unknown, refusal, err := pv.forRequest(job.Store, job.PiVersion)
		if err != nil {
			return wire.Result{}, pipeline.Permanent(fmt.Errorf("job: %w", err))
		}
		if refusal != "" {
			return wire.Result{Tally: wire.Tally{Outcome: pipeline.OutcomeSkipped, Reason: refusal}, PiUnknown: unknown}, nil
		}
		req := engine.Request{File: file, SessionID: job.SessionID, Settings: engine.Settings{Pi: pi, Policy: job.Policy, Counter: job.Counter, KeepRecentTokens: job.KeepRecentTokens},
			Instructions: job.Instructions, OnlyOverBudget: job.OnlyOverBudget, ExpectLeafID: job.ExpectLeafID,
			TargetID: job.TargetID, FromID: job.FromID}
		var res *engine.Result
		switch job.Kind {
		case wire.KindBranchSummary:
			res, err = e.BranchSummary(ctx, req)
		case wire.KindPrepare:
			res, err = prepareJob(ctx, e, job, req, prepared)
		case wire.KindBase:
			res, err = baseJob(ctx, e, job, req, prepared, q)
		default:
			res, err = e.Compact(ctx, req)
		}
		if err != nil {
			return wire.Result{PiUnknown: unknown}, classify(err)
		}
		out := jobResult(res)
		out.PiUnknown = unknown
		return out, nil
	})
}

// prepareJob makes a preparation on top of the session's previous one and stores it.
func prepareJob(ctx context.Context, e *engine.Engine, job wire.Job, req engine.Request, prepared func() agents.PreparedStore) (*engine.Result, error) {
	var store agents.PreparedStore
	if prepared != nil {
		store = prepared()
	}
	if store == nil {
		return nil, pipeline.Permanent(errors.New("prepare: this worker has no store of prepared summaries"))
	}
	req.Base = readBase(ctx, store, job.Store, job.SessionID, job.Path)
	var prev *engine.Prepared
	if raw, err := store.Get(ctx, job.Store, job.SessionID); err != nil {
		return nil, pipeline.Retry(err)
	} else if raw != nil {
		var p engine.Prepared
		if json.Unmarshal(raw, &p) == nil && p.Path == job.Path {
			prev = &p
		}
	}
	pr, res, err := e.Prepare(ctx, req, prev)
	if err != nil || pr == nil { // pr is nil when the preparation was skipped (res says why)
		return res, err
	}
	pr.Store, pr.Path, pr.RequestedAt = job.Store, job.Path, job.RequestedAt
	if a := engine.AwaitingOf(pr); a != nil {
		// its own span alone, while the base job before it is in flight: kept beside the base
		// and joined to it once the base's text reaches the span (now, if it does already)
		if err := store.UpdateBase(ctx, job.Store, job.SessionID, func(current []byte) ([]byte, error) {
			c := decodeBase(current, job.Path)
			if c == nil {
				return nil, nil
			}
			next := *c
			next.Awaiting = a
			return json.Marshal(&next)
		}); err != nil {
			return nil, pipeline.Retry(err)
		}
		composeAwaiting(ctx, e, store, job, req.File, req.Settings.Pi)
		res.Reason = "its own span alone, joined to the base when the base job before it lands"
		return res, nil
	}
	b, err := json.Marshal(pr)
	if err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	if err := store.Put(ctx, job.Store, job.SessionID, b); err != nil {
		return nil, pipeline.Retry(err)
	}
	return res, nil
}

// readBase is the session's base (engine.Base) for the session file at path, nil when there
// is none, it cannot be read, or it is another file's (a copy under another name).
func readBase(ctx context.Context, store agents.PreparedStore, storeName, sessionID, path string) *engine.Base {
	if store == nil {
		return nil
	}
	raw, err := store.GetBase(ctx, storeName, sessionID)
	if err != nil || raw == nil {
		return nil
	}
	var b engine.Base
	if json.Unmarshal(raw, &b) != nil || b.Path != path {
		return nil
	}
	return &b
}

// baseJob makes the model's summary of what an extract answered (engine.MakeBase) and lands
// it on the session's base: stored when the base still holds the state it was made on,
// discarded (superseded) when the session moved on meanwhile.
//
// A job of a slot (wire.Job.Slot) summarizes its span alone when the spans before it are
// not a model's yet. Whenever what lands leaves segments beside the base's text, the job asks
// for a merge (slot 0), which folds those that continue the text into one summary (a slot-0
// job pending does it when it runs).
func baseJob(ctx context.Context, e *engine.Engine, job wire.Job, req engine.Request, prepared func() agents.PreparedStore, q Queues) (*engine.Result, error) {
	var store agents.PreparedStore
	if prepared != nil {
		store = prepared()
	}
	if store == nil {
		return nil, pipeline.Permanent(errors.New("base: this worker has no store of prepared summaries"))
	}
	raw, err := store.GetBase(ctx, job.Store, job.SessionID)
	if err != nil {
		return nil, pipeline.Retry(err)
	}
	var cur *engine.Base
	if raw != nil {
		var b engine.Base
		if json.Unmarshal(raw, &b) == nil && b.Path == job.Path {
			cur = &b
		}
	}
	b, res, err := e.MakeBase(ctx, engine.BaseRequest{File: req.File, SessionID: req.SessionID, Settings: req.Settings, RequestedAt: job.RequestedAt,
		Anchor:   engine.BaseAnchor{LeafID: job.ExpectLeafID, FirstKeptEntryID: job.Cut, SummarySHA256: job.SummarySHA256},
		SpanOnly: job.Slot > 0, Merge: job.Merge != ""}, cur)
	if err != nil || b == nil {
		if err == nil {
			endPending(ctx, store, job) // skipped: the spans after it no longer wait for it
		}
		return res, err
	}
	b.Store, b.Path = job.Store, job.Path
	why := ""
	var landed *engine.Base
	err = store.UpdateBase(ctx, job.Store, job.SessionID, func(current []byte) ([]byte, error) {
		c := decodeBase(current, job.Path)
		next, w := b.Land(c)
		why, landed = w, next
		if next == nil {
			next = c // not stored: the job has ended all the same
		}
		if next == nil {
			return nil, nil
		}
		if job.Merge == "" {
			next = next.WithoutPending(job.Cut)
		}
		return json.Marshal(next)
	})
	if err == nil && why == "" && landed != nil && landed.Awaiting != nil {
		composeAwaiting(ctx, e, store, job, req.File, req.Settings.Pi)
	}
	if err == nil && why == "" && landed != nil && len(landed.Segments) > 0 {
		// whatever landed (a segment, the text a segment continues, a merge that left some),
		// segments may continue the text now: a merge folds them (it skips when none does)
		askMerge(ctx, q, job, landed)
	}
	switch {
	case err != nil:
		// Paid for: not made again for a store that failed to take it (the next extract asks
		// for another).
		res.Outcome, res.Reason = outcome.Superseded, fmt.Sprintf("not stored: %v; %s", err, res.Reason)
	case why != "":
		res.Outcome, res.Reason = outcome.Superseded, fmt.Sprintf("%s: the session's base changed while it was made; not stored (%s)", why, res.Reason)
	}
	return res, nil
}

// decodeBase is the stored base (raw) of the session file at path, nil when there is none
// or it is another file's.
func decodeBase(raw []byte, path string) *engine.Base {
	if raw == nil {
		return nil
	}
	var b engine.Base
	if json.Unmarshal(raw, &b) != nil || b.Path != path {
		return nil
	}
	return &b
}

// composeAwaiting joins the preparation waiting beside the session's base (engine.Compose)
// when the base's text reaches its span, and stores the result as the session's
// preparation, unless a newer one is stored. Failures are logged: the preparation is lost,
// and Pi's hook is answered as if none had been made.
func composeAwaiting(ctx context.Context, e *engine.Engine, store agents.PreparedStore, job wire.Job, file, pi string) {
	log := slog.Default().With("store", job.Store, "session", job.SessionID)
	b := readBase(ctx, store, job.Store, job.SessionID, job.Path)
	if b == nil || b.Awaiting == nil {
		return
	}
	pr, why, err := e.Compose(file, pi, b.Awaiting, b)
	if err != nil || pr == nil {
		log.Debug("the preparation of a span alone is not joined", "why", why, "err", err)
		return
	}
	if raw, err := store.Get(ctx, job.Store, job.SessionID); err == nil && raw != nil {
		var cur engine.Prepared
		if json.Unmarshal(raw, &cur) == nil && cur.Path == job.Path && cur.CreatedAt.After(pr.CreatedAt) {
			return // a newer preparation is stored
		}
	}
	raw, err := json.Marshal(pr)
	if err == nil {
		err = store.Put(ctx, job.Store, job.SessionID, raw)
	}
	if err != nil {
		log.Warn("the joined preparation was not stored", "err", err)
		return
	}
	a := b.Awaiting
	err = store.UpdateBase(ctx, job.Store, job.SessionID, func(current []byte) ([]byte, error) {
		c := decodeBase(current, job.Path)
		if c == nil || c.Awaiting == nil || c.Awaiting.Prepared.LeafID != a.Prepared.LeafID || !c.Awaiting.Prepared.CreatedAt.Equal(a.Prepared.CreatedAt) {
			return nil, nil
		}
		next := *c
		next.Awaiting = nil
		return json.Marshal(&next)
	})
	if err != nil {
		log.Debug("the joined preparation was not cleared from the base", "err", err)
	}
}

// endPending records that job, a base job for a span, has ended without storing anything.
func endPending(ctx context.Context, store agents.PreparedStore, job wire.Job) {
	if job.Merge != "" {
		return
	}
	err := store.UpdateBase(ctx, job.Store, job.SessionID, func(current []byte) ([]byte, error) {
		c := decodeBase(current, job.Path)
		if c == nil || !slices.ContainsFunc(c.Pending, func(p engine.PendingSpan) bool { return p.Cut == job.Cut }) {
			return nil, nil
		}
		return json.Marshal(c.WithoutPending(job.Cut))
	})
	if err != nil {
		slog.Default().Debug("base job's end not recorded", "store", job.Store, "session", job.SessionID, "err", err)
	}
}

// Bridger answers the extension's bridge requests with e: the session's preparation
// extended to the cut Pi makes now (engine.Bridge), or, when the request asks for it, the
// answer made without a model at that cut (engine.Extract). After an extract it stores the
// base the extract leaves and, when bases are on, queues the job that has a model summarize
// the extract's span (a base job, through follow).
func Bridger(e *engine.Engine, pv PiVersions, prepared func() agents.PreparedStore, q Queues, logger *slog.Logger) agents.Bridger {
	return agents.BridgerFunc(func(ctx context.Context, req wire.BridgeRequest, file string, raw []byte) ([]byte, error) {
		pi, _, refusal, err := pv.forRequest(req.Store, req.PiVersion)
		if err != nil {
			return nil, &engine.InputError{Err: fmt.Errorf("bridge: %w", err)}
		}
		if refusal != "" {
			return nil, &engine.InputError{Err: fmt.Errorf("bridge: %s", refusal)}
		}
		if req.Extract {
			var store agents.PreparedStore
			if prepared != nil && q.Follow != nil {
				store = prepared()
			}
			base := readBase(ctx, store, req.Store, req.SessionID, req.Path)
			out, err := e.Extract(ctx, engine.ExtractRequest{File: file, SessionID: req.SessionID, LeafID: req.LeafID, FirstKeptEntryID: req.FirstKeptEntryID,
				KeepRecentTokens: req.KeepRecentTokens, ReserveTokens: req.ReserveTokens, ContextWindow: req.ContextWindow, Pi: pi, Base: base})
			if err != nil {
				return nil, err
			}
			out.Store, out.Path = req.Store, req.Path
			if store != nil {
				made, latest := out.LeftBase(req.LeafID)
				job := wire.Job{Kind: wire.KindBase, Store: req.Store, Path: req.Path, SessionID: req.SessionID, Reason: "extract",
					ExpectLeafID: made.Anchor.LeafID, Cut: made.Anchor.FirstKeptEntryID, SummarySHA256: made.Anchor.SummarySHA256,
					Counter: "estimate", KeepRecentTokens: req.KeepRecentTokens, PiVersion: req.PiVersion}
				agents.AfterReply(ctx, func(ctx context.Context) { leaveBase(ctx, store, q, made, latest, job, logger) })
			}
			return json.Marshal(out)
		}
		var prep engine.Prepared
		if err := json.Unmarshal(raw, &prep); err != nil {
			return nil, fmt.Errorf("bridge: the prepared value is not JSON: %w", err)
		}
		if prep.Path != req.Path || prep.SessionID != req.SessionID {
			return nil, &engine.StaleError{Reason: fmt.Sprintf("prepared for %s (session %s), asked for %s (session %s)", prep.Path, prep.SessionID, req.Path, req.SessionID)}
		}
		var store agents.PreparedStore
		if prepared != nil && q.Follow != nil {
			store = prepared()
		}
		base := readBase(ctx, store, req.Store, req.SessionID, req.Path)
		out, err := e.Bridge(ctx, engine.BridgeRequest{File: file, LeafID: req.LeafID, FirstKeptEntryID: req.FirstKeptEntryID, Pi: pi, Base: base}, &prep)
		if err != nil {
			return nil, err
		}
		if made, latest := out.LeftBase(req.LeafID); made != nil && store != nil {
			// a gap the bridge only extracted, or a preparation made on the previous
			// compaction's text before its base landed: at a fast pace a base job has a model
			// read what the base's text does not cover now, so that the span is a model's
			// within a latency (at a slower one the next preparation reads it)
			job := wire.Job{Kind: wire.KindBase, Store: req.Store, Path: req.Path, SessionID: req.SessionID, Reason: "bridge",
				ExpectLeafID: made.Anchor.LeafID, Cut: made.Anchor.FirstKeptEntryID, SummarySHA256: made.Anchor.SummarySHA256,
				Counter: "estimate", KeepRecentTokens: cmp.Or(req.KeepRecentTokens, prep.Settings.KeepRecentTokens), PiVersion: req.PiVersion}
			jobs := Queues{}
			if out.AsksBaseJob() {
				jobs = q
			}
			agents.AfterReply(ctx, func(ctx context.Context) { leaveBase(ctx, store, jobs, made, latest, job, logger) })
		}
		return json.Marshal(out)
	})
}

// Assessor adapts the engine's budget check to the pipeline's sweeps, for the Pi release
// of the store that holds each file. It also fingerprints the settings the budget and a
// job's effect depend on, so a sweep assesses unchanged files again when they change.
func Assessor(e *engine.Engine, pv PiVersions) sweep.Assessor { return assessor{e, pv} }

type assessor struct {
	e  *engine.Engine
	pv PiVersions
}

func (a assessor) Assess(ctx context.Context, file string) (sweep.Assessment, error) {
	b, err := a.e.CheckBudgetAs(ctx, file, a.pv.forFile(file))
	if err != nil {
		return sweep.Assessment{}, err
	}
	return sweep.Assessment{SessionID: b.SessionID, LeafID: b.LeafID, Tokens: b.Tokens, ContextWindow: b.ContextWindow,
		OverBudget: b.OverBudget, Version: b.Version, HasAssistant: b.HasAssistant, Compacted: b.LeafIsCompaction}, nil
}

// SettingsFingerprint names the settings behind an assessment and what a sweep's job
// would do: the context window override, the reserve, the counter, the policy,
// keep-recent, and the model catalog (which gives the windows).
func (a assessor) SettingsFingerprint() string {
	s := a.e.Settings
	return fmt.Sprintf("w%d r%d c%s p%s k%d m%s pi%s", s.ContextWindow, s.ReserveTokens, s.Counter, s.Policy, s.KeepRecentTokens, configs.Fingerprint(), a.pv.fingerprint())
}

// leaveBase stores the base a value leaves for the compaction Pi writes with it (on what is
// stored now: engine.NextBase), then, with q, queues the base job for it (an extract's): in
// the first free slot, so that it starts now beside the session's other base jobs (its span
// alone if the spans before it are still being summarized), or, with every slot taken, as
// the session's slot-0 job, which waits for the one pending. Failures are logged: the value
// has answered Pi already, and the next extract asks again.
func leaveBase(ctx context.Context, store agents.PreparedStore, q Queues, made *engine.Base, latest *engine.BaseAnchor, job wire.Job, logger *slog.Logger) {
	err := store.UpdateBase(ctx, job.Store, job.SessionID, func(current []byte) ([]byte, error) {
		var c *engine.Base
		if current != nil {
			var cb engine.Base
			if json.Unmarshal(current, &cb) == nil && cb.Path == job.Path {
				c = &cb
			}
		}
		next := engine.NextBase(c, made, latest)
		if q.Follow != nil {
			next = next.WithPending(made.Anchor.FirstKeptEntryID, time.Now()) // its base job is asked for below
		}
		return json.Marshal(next)
	})
	if err != nil {
		logger.Warn("the base a compaction leaves was not stored; the next summary builds on the compaction's text", "store", job.Store, "session", job.SessionID, "err", err)
		return
	}
	if q.Follow == nil {
		return
	}
	for slot := 1; q.Queue != nil && slot <= wire.BaseSpanSlots; slot++ {
		j := job
		j.Slot = slot
		r, err := q.Queue(ctx, j)
		if err != nil {
			logger.Warn("base job not queued", "store", job.Store, "session", job.SessionID, "slot", slot, "err", err)
			return
		}
		if !r.AlreadyQueued || !r.Other {
			logger.Debug("base job queued", "store", job.Store, "session", job.SessionID, "slot", slot, "job", r.JobID, "duplicate", r.Duplicate, "already_queued", r.AlreadyQueued)
			return
		}
	}
	r, err := q.Follow(ctx, job)
	switch {
	case err != nil:
		logger.Warn("base job not queued", "store", job.Store, "session", job.SessionID, "err", err)
	default:
		logger.Debug("base job queued", "store", job.Store, "session", job.SessionID, "slot", 0, "job", r.JobID, "duplicate", r.Duplicate, "already_queued", r.AlreadyQueued)
	}
}

// Queues queue the jobs a worker decides on: Follow waits while the session's job of that
// kind (and slot) is pending, Queue does not (pipeline.Service.Follow and Queue). A nil
// function queues nothing.
type Queues struct {
	Follow func(context.Context, wire.Job) (fleetops.EnqueueResult, error)
	Queue  func(context.Context, wire.Job) (fleetops.EnqueueResult, error)
}

// askMerge queues the merge of the session's base (stored: what is stored now) after
// something landed beside segments. A slot-0 job pending may have read the base before this
// landing, so the merge is queued once that one has ended (Follow), in the background: the
// job that asked has done its work. A merge that finds nothing to fold skips without a
// request.
func askMerge(ctx context.Context, q Queues, job wire.Job, stored *engine.Base) {
	if stored == nil || q.Follow == nil {
		return
	}
	a := stored.Anchor
	state := engine.SHA256(fmt.Sprintf("%s\n%s\n%d", stored.Summary, stored.FromEntryID, len(stored.Segments)))[:16]
	m := wire.Job{Kind: wire.KindBase, Merge: state, Store: job.Store, Path: job.Path, SessionID: job.SessionID, Reason: "merge",
		ExpectLeafID: a.LeafID, Cut: a.FirstKeptEntryID, SummarySHA256: a.SummarySHA256,
		Counter: job.Counter, KeepRecentTokens: job.KeepRecentTokens, PiVersion: job.PiVersion}
	go func() {
		if _, err := q.Follow(context.WithoutCancel(ctx), m); err != nil {
			slog.Default().Warn("merge of the session's base not queued", "store", job.Store, "session", job.SessionID, "err", err)
		}
	}()
}
