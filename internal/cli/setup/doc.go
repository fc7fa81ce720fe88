// Package setup is compactor setup: the admin's step that creates or upgrades a fleet's
// streams, buckets, consumers and settings record on each NATS account, checks that their
// limits fit the account's storage, and exports, imports, migrates or prunes an account's
// state.
//
// It is a program of its own (the one command with the admin's credentials), so it lives
// apart from package cli, which only registers it.
package setup
