package jsonscan

import (
	"bytes"
	"testing"
)

// TestSkipPlain: the word-at-a-time and 32-byte (AVX2) scans find the first '"', '\\' or
// control byte exactly where a byte loop does, for every length, start and position, next
// to bytes that look alike in a word (0x20, 0x21, 0x5b, 0x5d, 0x80, 0xa2, 0xdc, 0xff).
func TestSkipPlain(t *testing.T) {
	t.Parallel()
	ref := func(b []byte, i int) int {
		for ; i < len(b); i++ {
			if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
				return i
			}
		}
		return i
	}
	fillers := []byte{'a', 0x20, 0x21, 0x5b, 0x5d, 0x80, 0xa2, 0xdc, 0xff, 0x7f}
	for n := 0; n <= 150; n++ {
		for _, fill := range fillers {
			b := bytes.Repeat([]byte{fill}, n)
			for start := 0; start <= min(n, 40); start++ {
				if got, want := skipPlain(b, start), ref(b, start); got != want {
					t.Fatalf("len %d fill %#x start %d: %d, want %d", n, fill, start, got, want)
				}
				for pos := start; pos < n; pos++ {
					for _, special := range []byte{'"', '\\', 0x00, 0x1f, '\n'} {
						c := b[pos]
						b[pos] = special
						if got := skipPlain(b, start); got != pos {
							t.Fatalf("len %d fill %#x start %d special %#x at %d: got %d (simd %v)", n, fill, start, special, pos, got, hasSIMD)
						}
						b[pos] = c
					}
				}
			}
		}
	}
}
