//go:build !race

package liveappend

const raceEnabled = false
