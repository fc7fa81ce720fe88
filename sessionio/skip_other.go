//go:build !amd64

package sessionio

const hasSIMD = false

func skipPlainSIMD(b []byte, i int) int { return i }
