package jsonscan

// hasSIMD: skipPlainSIMD is the assembly loop (skip_amd64.s).
const hasSIMD = true

// skipPlainSIMD is skipPlain 16 bytes at a time with SSE2, which every amd64 CPU has; it
// stops where fewer than 16 bytes remain. Not AVX2: measured on an Intel Xeon VM, 256-bit
// loops called for the short runs JSON strings are made of kept the core in its slow
// upper-lane warm-up, and reading a session took 2.5-3.3x as long as with this loop
// (docs/performance.md).
//
//go:noescape
func skipPlainSIMD(b []byte, i int) int
