// Package testbin builds the project's commands from this checkout, once per test binary,
// for the suites that run them as a user does (e2e, chaos, redteam: separate processes,
// signals, exit codes). It is its own package so that each suite's TestMain builds them the
// same way, with the same toolchain, and removes them afterwards.
package testbin
