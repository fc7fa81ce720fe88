// Package agents is what a worker serves Pi's extension besides jobs: the bridge requests
// made from inside Pi's session_before_compact hook (a preparation extended to Pi's cut, or
// an extract, answered within the hook's deadline), the store of prepared summaries and
// bases the extension reads, and the hook reports it publishes (counted, and the session's
// preparation forgotten once used).
//
// It is separate from the job runtime (package pipeline) because none of it is a job: a
// bridge is a core NATS request with a reply, never queued or retried, and a hook report is
// a message without an answer. pipeline starts these listeners beside its fetch loops.
package agents
