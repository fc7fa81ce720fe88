//go:build unix

package tokenize

import "syscall"

// processCPU is the user+system CPU time this process has used, in seconds: benchmarks
// report throughput per CPU second too, which stays comparable on a loaded machine.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}
