// Package pipeline runs compactor's jobs over NATS JetStream: the job schema, the streams,
// consumers and KV buckets, the worker pool with per-session leases, retries, dead letters,
// result events, sweeps of session directories, metrics and the enqueue client.
//
// The compaction work itself (plan, summarize, append) is not here: workers call a Handler,
// and sweeps call an Assessor, both small interfaces implemented elsewhere. pipeline only
// guarantees that a job reaches exactly one handler at a time, with a resolved path that is
// safely inside its store, and that every outcome is classified in one place (classify.go).
package pipeline

import ()
