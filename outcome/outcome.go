// Package outcome is the one vocabulary of how a request ended: the words of the engine's
// results (`compactor compact --json`), the pipeline's job events and decisions, the run
// report and the metrics' labels (docs/json-output.md). A job's event carries the word the
// command's result would.
//
// It imports nothing, so that the engine (which knows nothing of NATS) and the pipeline
// (which knows nothing of compaction) can both name the words without knowing each other.
package outcome

// Outcome is how a request ended, or, for Retry, how one delivery of a job ended.
type Outcome string

const (
	// Done: the entry was appended (or found, appended by an earlier delivery of the same
	// request); for a preparation, it was made and stored, nothing written to the session.
	Done Outcome = "done"
	// Skipped: nothing was written, for a reason that is not a failure (under budget,
	// already compacted, a turn in progress, a v1/v2 file...); the reason says which.
	Skipped Outcome = "skipped"
	// Superseded: the entry was written, but a live agent's lines landed around it, so it
	// is on a side branch and Pi does not load it (see sessionio's append). Nothing was
	// lost; the session will be compacted again when it is idle.
	Superseded Outcome = "superseded"
	// DryRun: planned and reported, nothing written, no summarizer called.
	DryRun Outcome = "dry-run"
	// Retry: a job's delivery failed for now; it is delivered again later.
	Retry Outcome = "retry"
	// Failed: the request failed. The engine never returns it in a result (a failure is an
	// error); the command line, the job events and the dead letters report it.
	Failed Outcome = "failed"
	// Stale: a bridge found the session's preparation made for another state of it.
	Stale Outcome = "stale"
)
