package sessionio_test

import (
	"os"
	"testing"

	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/picontext"
)

// BenchmarkLoad measures read + index + context for the large corpus files (MB/s via
// SetBytes, allocations via ReportAllocs).
func BenchmarkLoad(b *testing.B) {
	pi073 := pi.MustParseRelease("0.73.1")
	for _, name := range []string{"08-large.jsonl", "pi-repo/before-compaction.jsonl"} {
		data, err := os.ReadFile("../testdata/corpus/" + name)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				s, err := sessionio.Parse(data, name)
				if err != nil {
					b.Fatal(err)
				}
				p, err := s.Path("")
				if err != nil {
					b.Fatal(err)
				}
				if c := picontext.Build(p, pi073); len(c.Messages) == 0 {
					b.Fatal("empty context")
				}
			}
		})
	}
}
