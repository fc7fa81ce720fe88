// Package jsonscan validates one line of JSON exactly as JSON.parse accepts it and locates
// the members of its top-level object in the same pass (ScanObject; ScanEntry also finds
// the members of an entry's "message"), and walks JSON it has already validated without
// checking it again (TrustedMembers, TrustedElems, Get, Unquote).
//
// It is separate from sessionio because it knows nothing of Pi: it is the one place where
// bytes become JSON members, the hottest loop of every read (docs/performance.md), with its
// assembly (skip_amd64.s) beside it. sessionio builds entries and messages from the members
// it returns.
package jsonscan
