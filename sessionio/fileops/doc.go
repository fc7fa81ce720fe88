// Package fileops tracks the files the summarized part of a session touched, as Pi's
// compaction and branch summaries list them: the paths of read, write and edit tool calls
// (and from Pi 0.99 the calls a codemode script made), seeded from a previous summary's
// details, in Pi's order, and written as the summary's file lists.
//
// It is separate from sessionio because it reads sessions, it does not read files: it
// takes the messages sessionio decodes, and both cutpoint (a plan's file lists) and
// summarize (the lists appended to a summary) use it.
package fileops
