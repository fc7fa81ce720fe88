package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/compactor-dev/compactor/configs"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
)

// Handler adapts the engine to the pipeline: a job runs exactly what `compactor compact`
// (or `branch-summary`) runs, and the engine's errors are mapped onto the pipeline's
// outcome classes here, in one place. Prepare jobs need HandlerWith and a store.
func (e *Engine) Handler() pipeline.Handler { return e.HandlerWith(HandlerOptions{}) }

// HandlerOptions are what some job kinds need beyond the engine.
type HandlerOptions struct {
	// Prepared returns the store of prepared summaries (the service's, which exists only
	// once it has started, hence a function).
	Prepared func() pipeline.PreparedStore
}

// HandlerWith is Handler with options.
func (e *Engine) HandlerWith(opts HandlerOptions) pipeline.Handler {
	return pipeline.HandlerFunc(func(ctx context.Context, job pipeline.Job, file string) (pipeline.Result, error) {
		req := Request{File: file, Policy: job.Policy, Counter: job.Counter, KeepRecentTokens: job.KeepRecentTokens,
			Instructions: job.Instructions, OnlyOverBudget: job.OnlyOverBudget, ExpectLeafID: job.ExpectLeafID,
			TargetID: job.TargetID, FromID: job.FromID}
		var res *Result
		var err error
		switch job.Kind {
		case pipeline.KindBranchSummary:
			res, err = e.BranchSummary(ctx, req)
		case pipeline.KindPrepare:
			res, err = e.prepareJob(ctx, job, req, opts)
		default:
			res, err = e.Compact(ctx, req)
		}
		if err != nil {
			return pipeline.Result{}, classify(err)
		}
		out := pipeline.Result{Outcome: pipeline.OutcomeDone, Reason: res.Reason, EntryID: res.EntryID, LeafID: res.EntryID,
			TokensBefore: res.TokensBefore, TokensAfter: res.TokensAfter, LLMTokens: res.LLMInputTokens + res.LLMOutputTokens}
		if res.Outcome == OutcomeSuperseded {
			out.Outcome, out.LeafID = pipeline.OutcomeSuperseded, ""
		}
		return out, nil
	})
}

// prepareJob makes a preparation on top of the session's previous one and stores it.
func (e *Engine) prepareJob(ctx context.Context, job pipeline.Job, req Request, opts HandlerOptions) (*Result, error) {
	var store pipeline.PreparedStore
	if opts.Prepared != nil {
		store = opts.Prepared()
	}
	if store == nil {
		return nil, pipeline.Permanent(errors.New("prepare: this worker has no store of prepared summaries"))
	}
	var prev *Prepared
	if raw, err := store.Get(ctx, job.Store, job.SessionID); err != nil {
		return nil, pipeline.Retry(err)
	} else if raw != nil {
		var p Prepared
		if json.Unmarshal(raw, &p) == nil && p.Path == job.Path {
			prev = &p
		}
	}
	pr, res, err := e.Prepare(ctx, req, prev)
	if err != nil {
		return res, err
	}
	pr.Store, pr.Path = job.Store, job.Path
	b, err := json.Marshal(pr)
	if err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	if err := store.Put(ctx, job.Store, job.SessionID, b); err != nil {
		return nil, pipeline.Retry(err)
	}
	return res, nil
}

// classify turns engine, sessionio and summarize errors into pipeline classes.
func classify(err error) error {
	if reason, ok := Skipped(err); ok {
		if busyReason(reason) {
			return pipeline.SkipBusy(reason)
		}
		return pipeline.Skip(reason)
	}
	switch {
	case errors.Is(err, sessionio.ErrNotV3), errors.Is(err, sessionio.ErrNoAssistant), errors.Is(err, sessionio.ErrAlreadyCompacted):
		return pipeline.Skip(err.Error())
	case errors.Is(err, sessionio.ErrChanged):
		// Busy is not failure: the session is compacted when it is idle (a sweep, or the
		// requester asking again).
		return pipeline.SkipBusy("busy: " + err.Error())
	case errors.Is(err, sessionio.ErrEmpty), errors.Is(err, sessionio.ErrNoHeader), errors.Is(err, sessionio.ErrCycle),
		errors.Is(err, sessionio.ErrInvalidEntry), errors.Is(err, os.ErrNotExist):
		return pipeline.Permanent(err)
	case errors.Is(err, summarize.ErrEmptyCompletion):
		// An empty answer is a fault of the moment (an overloaded model or proxy), not of
		// the request: retried with backoff like a 5xx, bounded by MaxDeliver.
		return pipeline.Retry(err)
	}
	if kind, ok := summarize.KindOf(err); ok {
		if after, retry := summarize.IsRetryable(err); retry {
			return pipeline.RetryAfter(after, err)
		}
		if kind == summarize.KindCanceled {
			return err // shutting down: the delivery goes back to the queue
		}
		return pipeline.Permanent(err)
	}
	return err // GuardError says Permanent() itself; anything else is retried (bounded by MaxDeliver)
}

// busyReason reports whether a skip is for a state that passes without the file
// changing: a turn or a write in progress (compactable once abandoned, after
// AbandonedAfter), or a session that kept changing while its summary was written. Sweeps
// try such sessions again after a backoff. The prefixes are the ones live and Compact
// write; TestBusySkipsAreMarked keeps them in step.
func busyReason(reason string) bool {
	for _, p := range []string{"turn in progress", "write in progress", "busy:"} {
		if strings.HasPrefix(reason, p) {
			return true
		}
	}
	return false
}

// Assessor adapts Assess to the pipeline's sweeps. It also fingerprints the settings the
// budget and the job's effect depend on, so a sweep assesses unchanged files again when
// they change.
func (e *Engine) Assessor() pipeline.Assessor { return assessor{e} }

type assessor struct{ e *Engine }

func (a assessor) Assess(ctx context.Context, file string) (pipeline.Assessment, error) {
	as, err := a.e.Assess(ctx, file)
	if err != nil {
		return pipeline.Assessment{}, err
	}
	return pipeline.Assessment{SessionID: as.SessionID, LeafID: as.LeafID, Tokens: as.Tokens, ContextWindow: as.ContextWindow,
		OverBudget: as.OverBudget, Version: as.Version, HasAssistant: as.HasAssistant, Compacted: as.LeafIsCompaction}, nil
}

// SettingsFingerprint names the settings behind an assessment and what a sweep's job
// would do: the context window override, the reserve, the counter, the policy,
// keep-recent, and the model catalog (which gives the windows).
func (a assessor) SettingsFingerprint() string {
	s := a.e.Settings.withDefaults()
	return fmt.Sprintf("w%d r%d c%s p%s k%d m%s", s.ContextWindow, s.ReserveTokens, s.Counter, s.Policy, s.KeepRecentTokens, configs.Fingerprint())
}
