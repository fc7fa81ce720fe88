package engine

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
)

// changedRetryDelay is how long a job waits after the file changed under it (the agent is
// still writing, most likely).
const changedRetryDelay = 30 * time.Second

// Handler adapts the engine to the pipeline: a job runs exactly what `compactor compact`
// (or `branch-summary`) runs, and the engine's errors are mapped onto the pipeline's
// outcome classes here, in one place.
func (e *Engine) Handler() pipeline.Handler {
	return pipeline.HandlerFunc(func(ctx context.Context, job pipeline.Job, file string) (pipeline.Result, error) {
		req := Request{File: file, Policy: job.Policy, KeepRecentTokens: job.KeepRecentTokens,
			Instructions: job.Instructions, OnlyOverBudget: !job.Force, TargetID: job.TargetID, FromID: job.FromID}
		var res *Result
		var err error
		if job.Kind == pipeline.KindBranchSummary {
			res, err = e.BranchSummary(ctx, req)
		} else {
			res, err = e.Compact(ctx, req)
		}
		if err != nil {
			return pipeline.Result{}, classify(err)
		}
		return pipeline.Result{Outcome: pipeline.OutcomeDone, EntryID: res.EntryID, LeafID: res.EntryID,
			TokensBefore: res.TokensBefore, TokensAfter: res.TokensAfter, LLMTokens: res.LLMInputTokens + res.LLMOutputTokens}, nil
	})
}

// classify turns engine, sessionio and summarize errors into pipeline classes.
func classify(err error) error {
	if reason, ok := Skipped(err); ok {
		return pipeline.Skip(reason)
	}
	switch {
	case errors.Is(err, sessionio.ErrNotV3), errors.Is(err, sessionio.ErrNoAssistant), errors.Is(err, sessionio.ErrAlreadyCompacted):
		return pipeline.Skip(err.Error())
	case errors.Is(err, sessionio.ErrChanged):
		return pipeline.RetryAfter(changedRetryDelay, err)
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
	return err // GuardError says Permanent() itself; anything else is retried (bounded by MaxDeliver)
}

// Assessor adapts Assess to the pipeline's sweeps.
func (e *Engine) Assessor() pipeline.Assessor {
	return pipeline.AssessorFunc(func(ctx context.Context, file string) (pipeline.Assessment, error) {
		a, err := e.Assess(ctx, file)
		if err != nil {
			return pipeline.Assessment{}, err
		}
		return pipeline.Assessment{SessionID: a.SessionID, LeafID: a.LeafID, Tokens: a.Tokens, ContextWindow: a.ContextWindow,
			OverBudget: a.OverBudget, Version: a.Version, HasAssistant: a.HasAssistant, Compacted: a.LeafIsCompaction}, nil
	})
}
