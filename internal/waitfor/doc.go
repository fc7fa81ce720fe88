// Package waitfor is how a test waits: for a condition, never for a duration. A test that
// sleeps for a guessed time passes on an idle machine and fails on a loaded one (a CPU
// hog, one core, -race); a test that polls its condition takes as long as the condition
// takes. The only time limit is a guard against a hang, long enough that load alone never
// reaches it. It is its own package so that every package's tests wait the same way.
package waitfor
