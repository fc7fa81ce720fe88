// Package events is compactor events: a store's or a session's job history from
// COMPACTOR_EVENTS, oldest first, and with --follow what comes; every record printed so
// that a terminal acts on none of it.
//
// It is an operator's program of its own, so it lives apart from package cli, which only
// registers it.
package events
