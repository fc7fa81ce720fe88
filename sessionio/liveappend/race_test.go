//go:build race

package liveappend

// raceEnabled slows the Pi-like writer down under the race detector, which makes every
// read and parse of the appender several times slower.
const raceEnabled = true
