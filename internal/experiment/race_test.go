//go:build race

package experiment

// raceEnabled shortens the longest tests under the race detector (about 10x slower).
const raceEnabled = true
