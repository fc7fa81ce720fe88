//go:build !amd64

package jsonscan

const hasSIMD = false

func skipPlainSIMD(b []byte, i int) int { return i }
