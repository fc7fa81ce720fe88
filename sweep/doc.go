// Package sweep is the scheduled sweep of session directories: it walks each store, skips
// what its records say is unchanged (a memo of COMPACTOR_SWEEP held in memory), asks an
// Assessor about the rest and enqueues a compact job for each session over its budget; it
// keeps each file's record, notes how each compact job ended (so that a session whose job
// failed or met a busy session is tried again after a backoff), and removes the records of
// files that are gone.
//
// It is separate from package pipeline, which runs it (Service.Sweep, the sweep loop of
// compactor run), because a sweep only enqueues: it works no job, and a worker's delivery
// needs nothing of it but the outcome note.
package sweep
