package sessionio

import (
	"fmt"
	"strings"
)

// Dialect is the Pi release whose rules compactor follows for a session: how its context is
// built, how a compaction is planned and what an appended entry holds. Pi renamed its package
// at 0.74.0 (@mariozechner/pi-coding-agent became @earendil-works/pi-coding-agent), and 1.x
// changed what it writes and how it reads it: system messages that carry the prompt, context
// edits that hide or replace earlier messages, usage entries, compactions that carry a
// checkpoint of the system prompt (pi-1.6-changes.md). A session file does not say which Pi
// wrote it, so the dialect is a setting (per store; the newest by default).
//
// The zero value means DialectLatest.
type Dialect uint8

const (
	// Pi073 is @mariozechner/pi-coding-agent 0.73.1, the last release under that name.
	Pi073 Dialect = iota + 1
	// Pi16 is @earendil-works/pi-coding-agent 1.6.0.
	Pi16
)

// DialectLatest is the dialect of the newest Pi compactor follows: the default everywhere.
const DialectLatest = Pi16

// Dialects lists every dialect, oldest first.
func Dialects() []Dialect { return []Dialect{Pi073, Pi16} }

// String is the exact Pi version the dialect follows ("0.73.1", "1.6.0").
func (d Dialect) String() string {
	switch d.Or() {
	case Pi073:
		return "0.73.1"
	default:
		return "1.6.0"
	}
}

// Package is the npm package of that Pi.
func (d Dialect) Package() string {
	if d.Or() == Pi073 {
		return "@mariozechner/pi-coding-agent"
	}
	return "@earendil-works/pi-coding-agent"
}

// Or is d, or DialectLatest for the zero value.
func (d Dialect) Or() Dialect {
	if d == 0 {
		return DialectLatest
	}
	return d
}

// Projects reports whether the dialect builds contexts through Pi 1.x's projection: context
// edits applied, system messages, compaction checkpoints.
func (d Dialect) Projects() bool { return d.Or() >= Pi16 }

// ParseDialect reads a Pi version as a user writes it: "1.6.0", "1.6", "0.73.1", "0.73",
// "latest" or "" (the newest). Other versions are refused, naming the ones compactor follows.
func ParseDialect(s string) (Dialect, error) {
	v := strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "v")
	switch v {
	case "", "latest":
		return DialectLatest, nil
	case "0.73", "0.73.1":
		return Pi073, nil
	case "1.6", "1.6.0":
		return Pi16, nil
	}
	names := make([]string, 0, 2)
	for _, d := range Dialects() {
		names = append(names, d.String())
	}
	return 0, fmt.Errorf("unknown Pi version %q (compactor follows %s; latest is %s)", s, strings.Join(names, " and "), DialectLatest)
}
