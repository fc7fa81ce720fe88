// Package auth is compactor auth: it prints the NATS server configuration (or the nsc
// commands) that gives each host of a fleet its own account, with one user of each role
// and the permissions of docs/security.md, and writes each user's nkey seed and the
// fleet's list of accounts (fleet.json) into a credentials directory.
//
// It is a program of its own beside the other commands (it connects to nothing: it
// writes what an administrator installs), so it lives apart from package cli, which only
// registers it.
package auth
