// Package pisession is a Pi session file as tests use one: lines appended the way a live
// Pi appends them (Append), and what tests read back (LastEntryID). It uses the standard
// library only, so that sessionio's own tests can use it too (a kit importing sessionio
// could not be imported by them).
package pisession
