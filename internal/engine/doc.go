// Package engine is compactor's one code path from a session file to an appended entry:
// read, plan with a cut-point policy, summarize, check the guards, append conditionally.
// `compactor compact` / `branch-summary` / `prepare` and the pipeline's workers all call
// it, so a job does exactly what the command does. Planning alone has the same entry
// points: Load (read, resolve the model with configs.Resolve, pick the counter) and Plan,
// used by `compactor plan`, `inspect` and the experiments.
//
// # Files
//
// engine.go holds the Engine, Request, Result and the errors; settings.go the one Settings
// struct and the rule that gives each field its value (defaults, the engine's, a
// request's). plan.go reads a session into a Source (Load) and plans it (Plan). open.go
// is the opening every job goes through; compact.go, branch.go and prepare.go are the
// three jobs after it, fit.go what a compaction leaves out to end under the budget,
// bridge.go the extension of a preparation to Pi's cut, budget.go the sweep's budget check.
//
// # One opening
//
// Compact, BranchSummary and Prepare share their start: open (settings, one read, the
// result naming the session, the v3 format, an assistant message, the job's own lookups,
// the live state) and the job's ends (skip, busy, found, appended, end); Compact and
// Prepare also share planCut (the plan and its guards) and fit, and all three checkSummary.
// What differs between them at the opening (the counter, the skip texts, whether the live
// state stops the job) is one table, jobKind. Bridge shares Load only: it answers Pi's hook
// with no result and no format or live check of its own.
//
// The kinds say some of their skips in words of their own (the v1/v2 and no-assistant
// skips, a dry run's warning for a live session). Results and events carry these words
// and people and scripts read them, so jobKind keeps each kind's words rather than
// unifying them; the opening's steps themselves are shared.
//
// A skip for a busy session says its cause in Result.Busy (BusyCause); callers decide on
// it, never on the reason's words. How a request ended is a word of package outcome.
package engine
