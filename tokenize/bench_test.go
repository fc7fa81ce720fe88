package tokenize

import (
	"encoding/base64"
	"strings"
	"testing"

	tiktoken "github.com/pkoukk/tiktoken-go"

	"github.com/compactor-dev/compactor/sessionio"
)

func sampleBytes(sample []string) int64 {
	n := 0
	for _, s := range sample {
		n += len(s)
	}
	return int64(n)
}

// BenchmarkCountText: compactor's tiktoken count over the 3 MB session-text sample
// (compare with `node testdata/tiktoken-count.mjs bench ...`, same text).
func BenchmarkCountText(b *testing.B) {
	sample := loadSample(b)
	for _, enc := range []string{O200KBase, CL100KBase} {
		b.Run(enc, func(b *testing.B) {
			tk := mustTiktoken(b, enc)
			b.SetBytes(sampleBytes(sample))
			cpu0 := processCPU()
			for b.Loop() {
				for _, s := range sample {
					tk.CountText(s)
				}
			}
			reportCPU(b, sampleBytes(sample), cpu0)
		})
	}
}

// BenchmarkLibraryEncodeOrdinary: tiktoken-go's own EncodeOrdinary on the same sample.
func BenchmarkLibraryEncodeOrdinary(b *testing.B) {
	sample := loadSample(b)
	enc, err := tiktoken.GetEncoding(O200KBase)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(sampleBytes(sample))
	cpu0 := processCPU()
	for b.Loop() {
		for _, s := range sample {
			enc.EncodeOrdinary(s)
		}
	}
	reportCPU(b, sampleBytes(sample), cpu0)
}

// BenchmarkCountTextHostile: the inputs that make a naive byte-pair merge quadratic.
func BenchmarkCountTextHostile(b *testing.B) {
	tk := mustTiktoken(b, O200KBase)
	cases := map[string]string{
		"base64-3MB": base64.StdEncoding.EncodeToString(pseudoBytes(3<<20*3/4, 99)),
		"run-a-1MB":  strings.Repeat("a", 1<<20),
		"run-A-1MB":  strings.Repeat("A", 1<<20),
		"spaces-1MB": strings.Repeat(" ", 1<<20) + "x",
	}
	for name, s := range cases {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(s)))
			cpu0 := processCPU()
			for b.Loop() {
				tk.CountText(s)
			}
			reportCPU(b, int64(len(s)), cpu0)
		})
	}
}

// BenchmarkCache08Large counts every message entry of 08-large (3.6 MB, 1787 entries):
// cold = a fresh cache each time, cached = all hits.
func BenchmarkCache08Large(b *testing.B) {
	s := readCorpus(b, "08-large.jsonl")
	for _, name := range []string{"estimate", "tiktoken"} {
		counter, err := New(name, O200KBase)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name+"/cold", func(b *testing.B) {
			b.SetBytes(s.Size)
			for b.Loop() {
				c := NewCache(0)
				countAll(c, counter, s.Entries)
			}
		})
		b.Run(name+"/cached", func(b *testing.B) {
			c := NewCache(0)
			countAll(c, counter, s.Entries)
			b.SetBytes(s.Size)
			b.ResetTimer()
			for b.Loop() {
				countAll(c, counter, s.Entries)
			}
		})
	}
}

// reportCPU adds MB per CPU-second since cpu0 (comparable on a loaded machine).
func reportCPU(b *testing.B, bytesPerOp int64, cpu0 float64) {
	if cpu := processCPU() - cpu0; cpu > 0 {
		b.ReportMetric(float64(bytesPerOp)*float64(b.N)/cpu/1e6, "MB/cpu-s")
	}
}

func countAll(c *Cache, counter Counter, entries []*sessionio.Entry) int {
	n := 0
	for _, e := range entries {
		n += c.Entry(counter, e)
	}
	return n
}

// BenchmarkLoadVocab: parsing an embedded vocabulary into the rank table, what the first
// tiktoken count of a process pays (compactor plan pays it once per run).
func BenchmarkLoadVocab(b *testing.B) {
	for _, enc := range []string{O200KBase, CL100KBase} {
		b.Run(enc, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := loadVocab(enc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
