//go:build unix

package tokenize

import "syscall"

// permanent returns n zero bytes that live as long as the process, outside the Go heap. A
// vocabulary is loaded once and kept: its 5-7 MB of integers and bytes need no collector, and
// allocating them on the heap in a short command paid for it (the heap's growth set off a
// collection with heavy assists while the session was being read: measured, a quarter of a
// cold `compactor plan`).
func permanent(n int) []byte {
	if n <= 0 {
		return nil
	}
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]byte, n)
	}
	return b
}
