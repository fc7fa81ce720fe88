// Package picontext builds the context Pi sends to its model from a session's path, as the
// given Pi release builds it: Build (Pi's buildSessionContext) and Project, the same entry
// by entry (buildSessionProjection from Pi 0.87: context edits applied, only the newest
// compaction's summary); AsMessage and MessagesOf, what one entry puts there; and
// CurrentSystemMessage, the system prompt and tools replayed from Pi 1.x's system messages.
//
// It is separate from package sessionio because it does not read or write a file: it
// takes a path sessionio has read (a full read's Session.Path or a tail read's Tail.Path)
// and applies Pi's rules to it, which change from release to release (package pi). The
// token counter, the cut, the summary and `compactor context` all start from its answer.
package picontext
