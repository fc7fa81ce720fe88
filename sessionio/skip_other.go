//go:build !amd64

package sessionio

const hasAVX2 = false

func skipPlainAVX2(b []byte, i int) int { return i }
