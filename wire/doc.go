// Package wire is compactor's wire contract: the messages that cross NATS between workers,
// clients (enqueue, the console, dlq) and Pi's extension, and the subjects and keys they
// travel on. It holds only types, subject and key builders, and the validation of what is
// decoded; no NATS connection.
//
// These Go types are the single definition of the contract. The extension's TypeScript types
// and subject builders (extensions/pi) are generated from them by reflection, so a field's
// JSON name, its order and its omitempty are the contract itself: change them here, and the
// goldens and the generated side follow.
//
// It is a package of its own so that everything that speaks the contract (the worker
// runtime, the serving of agents, fleet administration, the CLI and the console) imports
// one small leaf rather than the machinery that runs jobs.
package wire
