// Package status is compactor status: store by store, its workers (host, version, job
// versions, jobs in flight), its queue, the jobs running now and whether it is paused,
// read across a fleet's accounts, with a warning when versions skew. Report is its --json
// output.
//
// It is an operator's program of its own, so it lives apart from package cli, which only
// registers it.
package status
