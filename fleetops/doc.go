// Package fleetops is a fleet's NATS layout and what is done to it from outside the worker
// runtime: the streams, buckets and consumers and their limits, the records kept in the
// buckets (settings, workers' beats, owners, leases, pause records, counts) with their
// schema versions, `compactor setup` and its migration and retirement of stores, the
// enqueue client, and the diagnosis of a stream that does not answer.
//
// It is separate from package pipeline (the workers) because an administrator, a client
// and a worker all read and write these records, and none of them needs the others'
// machinery: setup runs without a worker, a worker only binds what setup made.
package fleetops
