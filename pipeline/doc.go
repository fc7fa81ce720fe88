// Package pipeline is compactor's worker runtime: it fetches jobs from NATS JetStream and
// delivers each to a Handler with a per-session lease, counts attempts, retries, hands back
// and dead-letters, publishes each job's events, and runs around them the sweeps of session
// directories (package sweep), the spend limits, the hook and bridge listeners of Pi's
// extension, metrics and readiness.
//
// The compaction work itself (plan, summarize, append) is not here: workers call a Handler
// (handler.go), sweeps a sweep.Assessor, bridges a Bridger (bridger.go), small
// interfaces implemented elsewhere. pipeline guarantees that a job reaches exactly one
// handler at a time, with a resolved path that is safely inside its store, and that every
// outcome is classified in one place (classify.go). The messages it exchanges are package
// wire's; the fleet's NATS layout, its setup and its records are package fleetops's.
package pipeline
