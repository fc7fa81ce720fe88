package engine

import (
	"testing"

	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/tokenize"
)

// BenchmarkPlan08Large is what a worker does before summarizing 08-large.jsonl (3.6 MB):
// read, count with tiktoken, plan with the pi policy. "cold" starts each iteration with an
// empty count cache (the vocabulary is loaded once per process either way); "cached" is a
// long-running worker that has seen these entries before (counts are cached by entry
// content). Compare with `interop/pi/pi cut` on the same file (docs/performance.md).
func BenchmarkPlan08Large(b *testing.B) {
	const file = "../../testdata/corpus/08-large.jsonl"
	for _, mode := range []string{"cold", "cached"} {
		b.Run(mode, func(b *testing.B) {
			eng, err := New(summarize.NewExtractive(), Settings{Policy: "pi"})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := eng.load(sessionio.Named(file), eng.Settings); err != nil { // vocabulary loaded, cache warmed
				b.Fatal(err)
			}
			for b.Loop() {
				if mode == "cold" {
					eng.Cache = tokenize.NewCache(0)
				}
				src, err := eng.load(sessionio.Named(file), eng.Settings)
				if err != nil {
					b.Fatal(err)
				}
				if _, _, err := plan(src, eng.Settings); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
