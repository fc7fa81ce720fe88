//go:build !unix

package tokenize

// permanent returns n zero bytes for the life of the process (on the heap here).
func permanent(n int) []byte { return make([]byte, n) }
