package worker

import (
	"errors"
	"os"

	"github.com/compactor-dev/compactor/engine"
	"github.com/compactor-dev/compactor/outcome"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/liveappend"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/wire"
)

// The one place where what the engine says becomes a job's outcome: its result becomes the
// pipeline's Result (jobResult), its errors and those of the packages below it the
// pipeline's classes (classify: skip, busy, retry, permanent). The pipeline decides from
// these alone what happens to the delivery (pipeline.Classify); the engine knows no queue.

// jobResult is the pipeline's view of an engine result. The outcome words are the same
// in both (docs/json-output.md); LeafID is the new leaf only when the entry became it.
func jobResult(res *engine.Result) wire.Result {
	out := wire.Result{Tally: wire.Tally{Outcome: res.Outcome, Reason: res.Reason, EntryID: res.EntryID, TokensBefore: res.TokensBefore, TokensAfter: res.TokensAfter, LLMTokens: res.LLMInputTokens + res.LLMOutputTokens, LLMInputTokens: res.LLMInputTokens, LLMCachedInputTokens: res.LLMCachedInputTokens, LLMOutputTokens: res.LLMOutputTokens}}
	switch res.Outcome {
	case outcome.Done:
		out.LeafID = res.EntryID
		if res.Trimmed != nil && out.Reason == "" {
			out.Reason = res.Trimmed.String() // what was left out to end under the budget
		}
	case outcome.Skipped:
		// A skip for a busy session (a turn or a write in progress, a session that kept
		// changing while its summary was written) passes without the file changing: sweeps
		// try it again after a backoff. The engine says so in a field, not in the words.
		out.Busy = res.Busy != ""
	}
	return out
}

// classify turns engine, sessionio and summarize errors into pipeline classes.
func classify(err error) error {
	switch {
	case errors.Is(err, liveappend.ErrNotV3), errors.Is(err, liveappend.ErrNoAssistant), errors.Is(err, liveappend.ErrAlreadyCompacted):
		return pipeline.Skip(err.Error())
	case errors.Is(err, sessionio.ErrUnsafeFile):
		// A symlink, an escape from the store's root or a hard link appeared where the job's
		// file was: nothing was written, and trying again would meet the same trap.
		return pipeline.Permanent(err)
	case errors.Is(err, sessionio.ErrChanged):
		// (sessionio.ErrReplaced is one too: the file read was replaced or deleted meanwhile;
		// the new one is planned afresh by a later job.)
		// Busy is not failure: the session is compacted when it is idle (a sweep, or the
		// requester asking again). Decided on the error's identity; the text is for people.
		return pipeline.SkipBusy("busy: " + err.Error())
	case errors.Is(err, sessionio.ErrEmpty), errors.Is(err, sessionio.ErrNoHeader), errors.Is(err, sessionio.ErrCycle),
		errors.Is(err, liveappend.ErrInvalidEntry), errors.Is(err, os.ErrNotExist):
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
	return err // GuardError and InputError say Permanent() themselves; anything else is retried (bounded by MaxDeliver)
}
