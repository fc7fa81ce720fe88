// Package command is the frame every compactor subcommand shares: what a command may touch
// (Env), the registry the commands join, its flag set with compactor's usage text, the
// errors that decide the exit code, the flags that reach a NATS server or a whole fleet
// (the environment's connection, --store, the operator's accounts of fleet.json), the
// version it reports, and JSON printed so a terminal acts on none of it.
//
// It is apart from package cli so that a command which is a whole program of its own
// (auth, setup, dlq, status) lives in a package named for it and imports only this frame,
// never cli: cli imports those packages, parses the command line and dispatches.
package command
