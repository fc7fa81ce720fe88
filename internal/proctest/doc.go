// Package proctest runs the programs under test as separate processes, the way users and
// supervisors run them: real signals, real exit codes, output read while they run. A suite
// sets up its command (arguments, environment, where the output goes) and Start does the
// rest: the wait in the background, whether it has exited, its exit code (a signal's as a
// shell reports it), and a stop that sends SIGTERM, then SIGKILL after a grace period, to
// the process or to its whole group. It is a package of its own so that every suite (e2e,
// chaos, redteam) stops its processes the same way and none is left running.
package proctest
