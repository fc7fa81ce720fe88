// Package pi knows the releases of Pi compactor serves and the rules each one has: a
// Release (parsed from what a user or an agent writes, "latest" by default), the table of
// Behaviours (each rule of Pi's that changed, with the first release that has it and the
// evidence), and the answers built on it (Has, Rules, RuleSets, Known, Unproven).
//
// It is separate because every layer asks it, from the reader of a session file to the
// wire contract and the command line, while it depends on nothing of the project's: a
// release is a fact about Pi, not about a file. Code asks r.Has(b), never compares
// versions; docs/compatibility.md shows the table with its evidence, and a test keeps the
// two in step.
package pi
