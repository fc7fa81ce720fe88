package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/compactor-dev/compactor/configs"
	"github.com/compactor-dev/compactor/engine"
	"github.com/compactor-dev/compactor/pipeline"
)

// Handler works the jobs the pipeline delivers with e, exactly as `compactor compact` (or
// `branch-summary`, or `prepare`) runs, by the rules of the Pi release the job names (else
// its store's, pv). A release compactor does not know is worked as pv's policy says: with a
// warning and piUnknown in the result (its event, and the metric
// compactor_pi_version_unknown_total), or skipped. prepared returns the store of prepared
// summaries: the service's bucket, which exists once the service has started, hence a
// function.
func Handler(e *engine.Engine, pv PiVersions, prepared func() pipeline.PreparedStore) pipeline.Handler {
	return pipeline.HandlerFunc(func(ctx context.Context, job pipeline.Job, file string) (pipeline.Result, error) {
		pi, unknown, refusal, err := pv.forRequest(job.Store, job.PiVersion)
		if err != nil {
			return pipeline.Result{}, pipeline.Permanent(fmt.Errorf("job: %w", err))
		}
		if refusal != "" {
			return pipeline.Result{Outcome: pipeline.OutcomeSkipped, Reason: refusal, PiUnknown: unknown}, nil
		}
		req := engine.Request{File: file, Settings: engine.Settings{Pi: pi, Policy: job.Policy, Counter: job.Counter, KeepRecentTokens: job.KeepRecentTokens},
			Instructions: job.Instructions, OnlyOverBudget: job.OnlyOverBudget, ExpectLeafID: job.ExpectLeafID,
			TargetID: job.TargetID, FromID: job.FromID}
		var res *engine.Result
		switch job.Kind {
		case pipeline.KindBranchSummary:
			res, err = e.BranchSummary(ctx, req)
		case pipeline.KindPrepare:
			res, err = prepareJob(ctx, e, job, req, prepared)
		default:
			res, err = e.Compact(ctx, req)
		}
		if err != nil {
			return pipeline.Result{PiUnknown: unknown}, classify(err)
		}
		out := jobResult(res)
		out.PiUnknown = unknown
		return out, nil
	})
}

// prepareJob makes a preparation on top of the session's previous one and stores it.
func prepareJob(ctx context.Context, e *engine.Engine, job pipeline.Job, req engine.Request, prepared func() pipeline.PreparedStore) (*engine.Result, error) {
	var store pipeline.PreparedStore
	if prepared != nil {
		store = prepared()
	}
	if store == nil {
		return nil, pipeline.Permanent(errors.New("prepare: this worker has no store of prepared summaries"))
	}
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
	b, err := json.Marshal(pr)
	if err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	if err := store.Put(ctx, job.Store, job.SessionID, b); err != nil {
		return nil, pipeline.Retry(err)
	}
	return res, nil
}

// Bridger answers the extension's bridge requests with e: the session's preparation
// extended to the cut Pi makes now (engine.Bridge), or, when the request asks for it, the
// answer made without a model at that cut (engine.Extract).
func Bridger(e *engine.Engine, pv PiVersions) pipeline.Bridger {
	return pipeline.BridgerFunc(func(ctx context.Context, req pipeline.BridgeRequest, file string, raw []byte) ([]byte, error) {
		pi, _, refusal, err := pv.forRequest(req.Store, req.PiVersion)
		if err != nil {
			return nil, &engine.InputError{Err: fmt.Errorf("bridge: %w", err)}
		}
		if refusal != "" {
			return nil, &engine.InputError{Err: fmt.Errorf("bridge: %s", refusal)}
		}
		if req.Extract {
			out, err := e.Extract(ctx, engine.ExtractRequest{File: file, LeafID: req.LeafID, FirstKeptEntryID: req.FirstKeptEntryID,
				KeepRecentTokens: req.KeepRecentTokens, ReserveTokens: req.ReserveTokens, ContextWindow: req.ContextWindow, Pi: pi})
			if err != nil {
				return nil, err
			}
			out.Store, out.Path = req.Store, req.Path
			return json.Marshal(out)
		}
		var prep engine.Prepared
		if err := json.Unmarshal(raw, &prep); err != nil {
			return nil, fmt.Errorf("bridge: the prepared value is not JSON: %w", err)
		}
		if prep.Path != req.Path || prep.SessionID != req.SessionID {
			return nil, &engine.StaleError{Reason: fmt.Sprintf("prepared for %s (session %s), asked for %s (session %s)", prep.Path, prep.SessionID, req.Path, req.SessionID)}
		}
		out, err := e.Bridge(ctx, engine.BridgeRequest{File: file, LeafID: req.LeafID, FirstKeptEntryID: req.FirstKeptEntryID, Pi: pi}, &prep)
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	})
}

// Assessor adapts the engine's budget check to the pipeline's sweeps, for the Pi release
// of the store that holds each file. It also fingerprints the settings the budget and a
// job's effect depend on, so a sweep assesses unchanged files again when they change.
func Assessor(e *engine.Engine, pv PiVersions) pipeline.Assessor { return assessor{e, pv} }

type assessor struct {
	e  *engine.Engine
	pv PiVersions
}

func (a assessor) Assess(ctx context.Context, file string) (pipeline.Assessment, error) {
	b, err := a.e.CheckBudgetAs(ctx, file, a.pv.forFile(file))
	if err != nil {
		return pipeline.Assessment{}, err
	}
	return pipeline.Assessment{SessionID: b.SessionID, LeafID: b.LeafID, Tokens: b.Tokens, ContextWindow: b.ContextWindow,
		OverBudget: b.OverBudget, Version: b.Version, HasAssistant: b.HasAssistant, Compacted: b.LeafIsCompaction}, nil
}

// SettingsFingerprint names the settings behind an assessment and what a sweep's job
// would do: the context window override, the reserve, the counter, the policy,
// keep-recent, and the model catalog (which gives the windows).
func (a assessor) SettingsFingerprint() string {
	s := a.e.Settings
	return fmt.Sprintf("w%d r%d c%s p%s k%d m%s pi%s", s.ContextWindow, s.ReserveTokens, s.Counter, s.Policy, s.KeepRecentTokens, configs.Fingerprint(), a.pv.fingerprint())
}
