package cli

import (
	"context"
	"errors"
	"os"

	"github.com/compactor-dev/compactor/internal/engine"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
)

// The worker is composed here, at the root: the engine does the work and knows nothing of
// NATS, the pipeline moves jobs and knows nothing of compaction. jobHandler and
// budgetAssessor adapt one to the other, and classify maps the engine's errors onto the
// pipeline's outcome classes, in one place.

// jobHandler runs a job exactly as `compactor compact` (or `branch-summary`) runs.
func jobHandler(e *engine.Engine) pipeline.Handler {
	return pipeline.HandlerFunc(func(ctx context.Context, job pipeline.Job, file string) (pipeline.Result, error) {
		req := engine.Request{File: file, Policy: job.Policy, Counter: job.Counter, KeepRecentTokens: job.KeepRecentTokens,
			Instructions: job.Instructions, OnlyOverBudget: job.OnlyOverBudget, ExpectLeafID: job.ExpectLeafID,
			TargetID: job.TargetID, FromID: job.FromID}
		var res *engine.Result
		var err error
		if job.Kind == pipeline.KindBranchSummary {
			res, err = e.BranchSummary(ctx, req)
		} else {
			res, err = e.Compact(ctx, req)
		}
		if err != nil {
			return pipeline.Result{}, classify(err)
		}
		return jobResult(res), nil
	})
}

// jobResult is the pipeline's view of an engine result. The outcome words are the same
// in both (docs/json-output.md); LeafID is the new leaf only when the entry became it.
func jobResult(res *engine.Result) pipeline.Result {
	out := pipeline.Result{Outcome: pipeline.Outcome(res.Outcome), Reason: res.Reason, EntryID: res.EntryID,
		TokensBefore: res.TokensBefore, TokensAfter: res.TokensAfter, LLMTokens: res.LLMInputTokens + res.LLMOutputTokens}
	if res.Outcome == engine.OutcomeDone {
		out.LeafID = res.EntryID
	}
	return out
}

// classify turns engine, sessionio and summarize errors into pipeline classes.
func classify(err error) error {
	switch {
	case errors.Is(err, sessionio.ErrNotV3), errors.Is(err, sessionio.ErrNoAssistant), errors.Is(err, sessionio.ErrAlreadyCompacted):
		return pipeline.Skip(err.Error())
	case errors.Is(err, sessionio.ErrChanged):
		// Busy is not failure: the session is compacted when it is idle (a sweep, or the
		// requester asking again).
		return pipeline.Skip("busy: " + err.Error())
	case errors.Is(err, sessionio.ErrEmpty), errors.Is(err, sessionio.ErrNoHeader), errors.Is(err, sessionio.ErrCycle),
		errors.Is(err, sessionio.ErrInvalidEntry), errors.Is(err, os.ErrNotExist):
		return pipeline.Permanent(err)
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
	return err // GuardError and InputError say Permanent() themselves; anything else is retried (bounded by MaxDeliver)
}

// budgetAssessor adapts the engine's budget check to the pipeline's sweeps.
func budgetAssessor(e *engine.Engine) pipeline.Assessor {
	return pipeline.AssessorFunc(func(ctx context.Context, file string) (pipeline.Assessment, error) {
		b, err := e.CheckBudget(ctx, file)
		if err != nil {
			return pipeline.Assessment{}, err
		}
		return pipeline.Assessment{SessionID: b.SessionID, LeafID: b.LeafID, Tokens: b.Tokens, ContextWindow: b.ContextWindow,
			OverBudget: b.OverBudget, Version: b.Version, HasAssistant: b.HasAssistant, Compacted: b.LeafIsCompaction}, nil
	})
}
