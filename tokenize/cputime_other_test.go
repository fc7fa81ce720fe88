//go:build !unix

package tokenize

func processCPU() float64 { return 0 }
