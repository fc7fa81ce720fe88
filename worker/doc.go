// Package worker is the adapter between the queue and the engine: it works the jobs that
// package pipeline delivers with package engine, and answers the extension's bridge
// requests and the sweeps' budget checks the same way.
//
// Neither side knows the other. The engine does the work (read, plan, summarize, guard,
// append) and knows nothing of NATS; the pipeline moves jobs (fetch, lease, retry, dead
// letter, event) and knows nothing of compaction. This package joins them, and is the
// only one that does:
//
//   - Handler turns a wire.Job into an engine.Request and calls Compact,
//     BranchSummary or Prepare, by the rules of the Pi release the job names (PiVersions);
//     Bridger does the same for a bridge request (Bridge, Extract), and Assessor for a
//     sweep's budget check (CheckBudgetAs);
//   - outcomes.go turns what the engine answers into the job's outcome: its result into a
//     wire.Result, its errors into the pipeline's classes (skip, busy, retry,
//     permanent), in one place;
//   - RefuseInstructions skips the jobs that carry summary instructions for a store that
//     refuses them, before anything is read.
//
// It imports the engine and the pipeline and nothing above them: the command line
// (internal/cli) reads the flags, builds the engine and the PiVersions, and wires these
// into a pipeline.Config.
package worker
