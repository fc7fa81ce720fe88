// Package activity tells what a session file alone says about the agent writing it, at its
// leaf: a turn in progress (waiting for the model, or running tools), an answer that ended
// in an error Pi retries by itself, an incomplete last line (a write in progress).
//
// It is separate from package sessionio because it reads nothing: it judges a path sessionio
// has read, by the rules of a live Pi (docs/live-agents.md). The engine asks it before it
// appends, since an entry written while Pi is mid-turn ends on a side branch.
package activity
