// Package dlq is compactor dlq: it lists, shows, retries and purges the dead letters of
// COMPACTOR_DLQ, as the operator of a store's NATS account, in one account or across a
// fleet's (--credentials); a retry refuses a store no worker serves and passes a job's
// summary instructions on only when asked, logging who did.
//
// It is an operator's program of its own, with its own subcommands, so it lives apart
// from package cli, which only registers it; it shares the command frame (package
// command) and nothing else of the command line.
package dlq
