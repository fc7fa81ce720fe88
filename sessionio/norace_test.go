//go:build !race

package sessionio

const raceEnabled = false
