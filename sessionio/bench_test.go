package sessionio

import (
	"os"
	"testing"
)

// BenchmarkLoad measures read + index + context for the large corpus files (MB/s via
// SetBytes, allocations via ReportAllocs).
func BenchmarkLoad(b *testing.B) {
	for _, name := range []string{"08-large.jsonl", "pi-repo/before-compaction.jsonl"} {
		data, err := os.ReadFile("../testdata/corpus/" + name)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				s, err := Parse(data, name)
				if err != nil {
					b.Fatal(err)
				}
				p, err := s.Path("")
				if err != nil {
					b.Fatal(err)
				}
				if c := BuildContext(p); len(c.Messages) == 0 {
					b.Fatal("empty context")
				}
			}
		})
	}
}
