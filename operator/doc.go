// Package operator is what an operator sees and does across a fleet: the fleet view that
// `compactor status` and the console read (stores, workers, queues, running jobs, pauses,
// events, hook reports, with their indexes kept in memory) and the dead-letter queue's
// list, retry and purge.
//
// It is separate because it reads every store's records with the operator's rights,
// which no worker or agent holds, and it changes nothing a worker relies on.
package operator
